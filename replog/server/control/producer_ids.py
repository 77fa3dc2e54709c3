"""Producer ids and epochs for idempotent appends (`Log.InitProducer`).

One owner: the cluster metadata. A *named* producer's id and epoch come from an
`init_producer` command proposed on the metadata leader (any other node forwards the call
there) and read from the image once the command applied (`MetadataImage.producers_made`):
a name's epochs only grow, across leader changes and restarts.

An *anonymous* producer (no name: every default client, librdkafka's idempotent producer)
gets its id from the node it asks, out of a block the node reserved ahead (Kafka's KIP-730),
so that a new producer costs no metadata write and does not wait for the metadata log's
leader (a client whose first append follows the loss of that leader is not held up by its
election). A block is reserved by an anonymous `init_producer` command: the command at
`__cluster` offset `o` makes id `o + 1` (what every release reads it as; that id is then
never handed out) and, for the node that asked for it, the block
`[BLOCK_BASE + o * BLOCK_IDS, BLOCK_BASE + (o + 1) * BLOCK_IDS)`, above every id an
offset can make: ids stay unique in the cluster and are never reused (a node that restarts
drops what is left of its block and reserves another). No new command kind, so a node of
an earlier release applies the log as before; a metadata leader of an earlier release
answers a reservation with one id, which the asking node takes as a block of one.

`keep_reserved` is the one owner of a node's reservations (a supervised task): it keeps a
spare block in hand once half of the current one is used, and waits with backoff while the
metadata log has no leader. A call that finds no id left waits for it up to its timeout,
then gets LEADER_UNKNOWN (retriable), as a forwarded call did before.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc

from replog.errors import (
    InternalError,
    InvalidArgumentError,
    LeaderUnknownError,
    ReplogError,
    UnavailableError,
)
from replog.replication.producers import PRODUCER_ID_MAX
from replog.server.control.routing import Router
from replog.server.edge.listeners import MembersOnly
from replog.server.meta.metadata import InitProducer, MetadataImage
from replog.server.meta.metadata_log import MetadataLog
from replog.server.peering.peers import FORWARD_METADATA, Peers, remote
from replog.v1 import log_pb2

_log = logging.getLogger("replog.producers")

BLOCK_IDS = 1000  # anonymous producer ids per reservation (Kafka's block size too)
BLOCK_BASE = 2**48  # above every `offset + 1` id: 2.8e14 metadata records
RESERVE_BACKOFF_S = (0.1, 5.0)  # between failed reservations: first, and at most


def block_of(offset: int) -> range:
    """The ids the anonymous `init_producer` command at `__cluster` offset `offset`
    reserves for the node that asked for it."""
    first = BLOCK_BASE + offset * BLOCK_IDS
    return range(first, first + BLOCK_IDS)


def checked_block(first: int, count: int) -> range:
    """A metadata leader's answer to a reservation, range-checked (a block of one: the
    answer of a leader of an earlier release, one anonymous id)."""
    if count == 0:
        count = 1
    elif count != BLOCK_IDS or first < BLOCK_BASE or (first - BLOCK_BASE) % BLOCK_IDS:
        raise InternalError(f"a reservation answered a bad block: {first} + {count}")
    if not 1 <= first <= PRODUCER_ID_MAX - count:
        raise InternalError(f"a reservation answered ids out of range: {first} + {count}")
    return range(first, first + count)


class ProducerIds:
    def __init__(
        self, router: Router, metadata: MetadataLog, peers: Peers, *, timeout_s: float
    ) -> None:
        self.router = router
        self.metadata = metadata
        self.peers = peers
        self.timeout_s = timeout_s
        self._ids = range(0)  # what is left of the block ids are taken from
        self._spare: range | None = None  # the next block, reserved ahead
        self._wanted = asyncio.Event()  # set: `keep_reserved` should reserve (again)
        self._reserved = asyncio.Event()  # set (and replaced) at each reservation
        self.reservations = 0  # blocks reserved by this node (tests, metrics)

    async def init(
        self, name: str, *, resume: bool = False, forwarded: bool = False
    ) -> tuple[int, int]:
        """(producer id, epoch) for a new producer, or for the next instance of `name` (with
        `resume`: for `name`'s current instance, when it has one)."""
        self.metadata.image.init_producer(name)  # a bad name fails on any node at once
        if not name:
            return await self._anonymous(), 0
        leader = self.router.metadata_leader()
        if leader != self.peers.node_id and not forwarded:
            request = log_pb2.InitProducerRequest(name=name, resume=resume)
            call = self.peers.log(leader).InitProducer(
                request, timeout=self.timeout_s, metadata=FORWARD_METADATA
            )
            reply = await remote(call)
            return int(reply.producer_id), int(reply.producer_epoch)

        if resume:
            # The leader's image holds every committed command once it applied its log.
            await self.metadata.wait_applied(self.metadata.log.log_end_offset - 1, self.timeout_s)
            known = self.metadata.image.producer_names.get(name)
            if known is not None:
                return known

        def make(image: MetadataImage) -> InitProducer:
            return image.init_producer(name)

        _, offset = await self.metadata.propose(make, self.timeout_s)
        return self.metadata.image.producers_made[offset]

    async def reserve_here(self) -> range:
        """On the metadata leader: reserve a block (for this node, or a peer that asked)."""
        _, offset = await self.metadata.propose(lambda _image: InitProducer(""), self.timeout_s)
        return block_of(offset)

    async def _anonymous(self) -> int:
        """The next id of this node's block; waits (up to the timeout) while there is none."""
        try:
            async with asyncio.timeout(self.timeout_s):
                while not self._ids:
                    if self._spare is not None:
                        self._ids, self._spare = self._spare, None
                        break
                    self._wanted.set()
                    await self._reserved.wait()
        except TimeoutError:
            raise LeaderUnknownError(
                f"node {self.peers.node_id} has no producer id to give: the cluster metadata "
                "has no leader right now"
            ) from None
        pid = self._ids[0]
        self._ids = self._ids[1:]
        if self._spare is None and len(self._ids) < BLOCK_IDS // 2:
            self._wanted.set()
        return pid

    async def keep_reserved(self) -> None:
        """The one owner of this node's reservations (module doc): runs until cancelled."""
        backoff = RESERVE_BACKOFF_S[0]
        while True:
            if self._spare is not None or len(self._ids) >= BLOCK_IDS // 2:
                self._wanted.clear()
                await self._wanted.wait()
                continue
            try:
                block = await self._reserve()
            except (ReplogError, grpc.RpcError) as exc:  # no metadata leader (yet), a peer gone
                quiet = isinstance(exc, UnavailableError | grpc.RpcError)
                _log.log(
                    logging.DEBUG if quiet else logging.WARNING,
                    "producer id reservation failed, again in %.1f s: %r",
                    backoff,
                    exc,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RESERVE_BACKOFF_S[1])
                continue
            backoff = RESERVE_BACKOFF_S[0]
            self.reservations += 1
            if self._ids:
                self._spare = block
            else:
                self._ids = block
            reserved, self._reserved = self._reserved, asyncio.Event()
            reserved.set()

    async def _reserve(self) -> range:
        leader = self.router.metadata_leader()  # LEADER_UNKNOWN during an election
        if leader == self.peers.node_id:
            return await self.reserve_here()
        call = self.peers.log(leader).InitProducer(
            log_pb2.InitProducerRequest(reserve_block=True),
            timeout=self.timeout_s,
            metadata=FORWARD_METADATA,
        )
        reply = await remote(call)
        return checked_block(int(reply.producer_id), int(reply.block_ids))


def refuse_reservation(request: log_pb2.InitProducerRequest) -> None:
    """A client's InitProducer may not reserve blocks (only nodes, on the peer listener)."""
    if request.reserve_block:
        raise InvalidArgumentError("reserve_block is for replog nodes (their peer listener)")


def peer_handler(log_service: Any, authenticate: Any) -> grpc.GenericRpcHandler:  # type: ignore[type-arg]
    """`Log.InitProducer` alone, for the peer listener: where other nodes forward it and
    reserve producer id blocks (with TLS, only from a member's certificate). The peer
    listener serves no other Log call."""
    servicer = log_service if authenticate is None else MembersOnly(log_service, authenticate)
    handler = grpc.unary_unary_rpc_method_handler(
        servicer.InitProducerFromPeer,
        request_deserializer=log_pb2.InitProducerRequest.FromString,
        response_serializer=log_pb2.InitProducerResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler("replog.v1.Log", {"InitProducer": handler})
