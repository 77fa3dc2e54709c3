"""A replication stream ends once the node that opened it is no longer a member.

The peer listener checks the caller's certificate when a stream opens and again while it
delivers (`replication_transport.REAUTHENTICATE_INTERVAL_S`): a node removed from the
cluster (`replog node remove`) that keeps the stream it opened as a member open gets
PERMISSION_DENIED at its next envelope, which reaches no replica. Real gRPC on 127.0.0.1;
the certificate check is stood in for by a function of a member set (the container test
tests/containers/test_membership_containers.py does it with real certificates).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from replog.devcluster import free_port
from replog.server.peering import replication_transport
from replog.server.peering.replication_transport import ReplicationService
from replog.v1 import replication_pb2 as pb
from replog.v1 import replication_pb2_grpc

DEADLINE_S = 30.0


def test_the_open_stream_of_a_node_removed_since_is_refused_at_its_next_envelope(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replication_transport, "REAUTHENTICATE_INTERVAL_S", 0.0)
    members = {1, 4}
    received: list[int] = []

    def route(topic: str, partition: int, topic_id: int) -> None:
        received.append(partition)  # (and host nothing)

    def authenticate(context: object) -> int | None:
        return 4 if 4 in members else None  # node 4's certificate, checked against members

    async def main() -> str:
        address = f"127.0.0.1:{free_port()}"
        server = grpc.aio.server()
        service = ReplicationService(route, authenticate)
        replication_pb2_grpc.add_ReplicationServicer_to_server(service, server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(address)
        await server.start()
        outbox: asyncio.Queue[pb.Envelope | None] = asyncio.Queue()

        async def envelopes() -> AsyncIterator[pb.Envelope]:
            while (envelope := await outbox.get()) is not None:
                yield envelope

        try:
            async with grpc.aio.insecure_channel(address) as channel:
                stub = replication_pb2_grpc.ReplicationStub(channel)  # type: ignore[no-untyped-call]
                call = stub.Exchange(envelopes(), timeout=DEADLINE_S)
                for partition in (1, 2):  # a member's envelopes, each checked again: taken
                    await outbox.put(pb.Envelope(topic="t", partition=partition, from_id=4))
                async with asyncio.timeout(DEADLINE_S):
                    while received != [1, 2]:
                        await asyncio.sleep(0.01)
                members.discard(4)  # node 4 left the cluster; its stream is still open
                await outbox.put(pb.Envelope(topic="t", partition=3, from_id=4))
                try:
                    await call
                except grpc.aio.AioRpcError as exc:
                    return str(exc.code().name)
                finally:
                    await outbox.put(None)
                return "OK"
        finally:
            await server.stop(None)

    assert asyncio.run(main()) == "PERMISSION_DENIED"
    assert received == [1, 2], "the removed node's envelope reached a replica"
