"""Producer ids and epochs for idempotent appends (`Log.InitProducer`).

One owner: the cluster metadata. An `init_producer` command is proposed on the metadata
leader (any other node forwards the call there) and the id and epoch are read from the
image once the command applied (`MetadataImage.producers_made`): ids are unique in the
cluster and a name's epochs only grow, across leader changes and restarts.
"""

from __future__ import annotations

from typing import Any

import grpc

from replog.server.control.routing import Router
from replog.server.edge.listeners import MembersOnly
from replog.server.meta.metadata import InitProducer, MetadataImage
from replog.server.meta.metadata_log import MetadataLog
from replog.server.peering.peers import FORWARD_METADATA, Peers, remote
from replog.v1 import log_pb2


class ProducerIds:
    def __init__(
        self, router: Router, metadata: MetadataLog, peers: Peers, *, timeout_s: float
    ) -> None:
        self.router = router
        self.metadata = metadata
        self.peers = peers
        self.timeout_s = timeout_s

    async def init(
        self, name: str, *, resume: bool = False, forwarded: bool = False
    ) -> tuple[int, int]:
        """(producer id, epoch) for a new producer, or for the next instance of `name` (with
        `resume`: for `name`'s current instance, when it has one)."""
        self.metadata.image.init_producer(name)  # a bad name fails on any node at once
        leader = self.router.metadata_leader()
        if leader != self.peers.node_id and not forwarded:
            request = log_pb2.InitProducerRequest(name=name, resume=resume)
            call = self.peers.log(leader).InitProducer(
                request, timeout=self.timeout_s, metadata=FORWARD_METADATA
            )
            reply = await remote(call)
            return int(reply.producer_id), int(reply.producer_epoch)

        if resume and name:
            # The leader's image holds every committed command once it applied its log.
            await self.metadata.wait_applied(self.metadata.log.log_end_offset - 1, self.timeout_s)
            known = self.metadata.image.producer_names.get(name)
            if known is not None:
                return known

        def make(image: MetadataImage) -> InitProducer:
            return image.init_producer(name)

        _, offset = await self.metadata.propose(make, self.timeout_s)
        return self.metadata.image.producers_made[offset]


def peer_handler(log_service: Any, authenticate: Any) -> grpc.GenericRpcHandler:  # type: ignore[type-arg]
    """`Log.InitProducer` alone, for the peer listener: where other nodes forward it (with
    TLS, only from a member's certificate). The peer listener serves no other Log call."""
    servicer = log_service if authenticate is None else MembersOnly(log_service, authenticate)
    handler = grpc.unary_unary_rpc_method_handler(
        servicer.InitProducer,
        request_deserializer=log_pb2.InitProducerRequest.FromString,
        response_serializer=log_pb2.InitProducerResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler("replog.v1.Log", {"InitProducer": handler})
