"""How the replication service hands a peer's messages to replicas: one `post` per
message, in the stream's order, no task per message; a batch that carries a forged
envelope delivers nothing of itself; a stopping replica loses messages quietly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from replog.replication import ReplicaConfig
from replog.replication.driver import ReplicaDriver
from replog.replication.messages import Message, VoteRequest
from replog.server.peering.replication_codec import to_envelope
from replog.server.peering.replication_transport import ReplicationService
from replog.storage import PartitionLog
from replog.v1 import replication_pb2 as pb
from tests.unit.test_replication_driver import STORAGE, VOTERS


class Refused(Exception):
    pass


class _Context:
    def invocation_metadata(self) -> tuple[()]:
        return ()

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Refused(code, details)


class _Replica:
    """A replica's `post`: records each message the moment it is handed over."""

    def __init__(self) -> None:
        self.got: list[Message] = []
        self.waits: list[asyncio.Future[None]] = []

    def post(self, message: Message) -> Awaitable[None]:
        self.got.append(message)
        fut = asyncio.get_running_loop().create_future()
        self.waits.append(fut)
        return fut


def _vote(epoch: int) -> Message:
    return VoteRequest(epoch, 2, 0, 0)


def _envelopes(sender: int, epochs: Sequence[int]) -> list[pb.Envelope]:
    return [to_envelope("t", 0, sender, _vote(e)) for e in epochs]


async def _stream(*batches: list[pb.Envelope]) -> AsyncIterator[pb.Envelopes]:
    for batch in batches:
        yield pb.Envelopes(envelopes=batch)


def _service(replica: _Replica, peer: int | None) -> ReplicationService:
    route: Callable[[str, int, int], Any] = lambda topic, partition, topic_id: replica.post  # noqa: E731
    return ReplicationService(route, authenticate=(lambda context: peer) if peer else None)


def test_each_message_is_posted_in_order_and_the_stream_ends_once_all_were_handled() -> None:
    async def scenario() -> None:
        replica = _Replica()
        service = _service(replica, peer=None)
        stream = _stream(_envelopes(2, [1, 2, 3]), _envelopes(2, [4]))
        call = asyncio.ensure_future(service.ExchangeBatches(stream, _Context()))  # type: ignore[arg-type]
        while len(replica.got) < 4:
            await asyncio.sleep(0.001)
        assert [m.epoch for m in replica.got] == [1, 2, 3, 4]  # type: ignore[union-attr]
        assert all(not asyncio.isfuture(m) for m in replica.got)
        await asyncio.sleep(0.01)
        assert not call.done()  # the replicas have not handled them yet
        for fut in replica.waits:
            fut.set_result(None)
        summary = await asyncio.wait_for(call, 5)
        assert summary.envelopes == 4

    asyncio.run(scenario())


def test_a_batch_with_a_forged_envelope_delivers_none_of_its_messages() -> None:
    async def scenario() -> None:
        replica = _Replica()
        service = _service(replica, peer=2)  # the certificate says node 2
        forged = _envelopes(2, [1, 2]) + _envelopes(3, [3]) + _envelopes(2, [4])
        with pytest.raises(Refused) as refused:
            await service.ExchangeBatches(_stream(forged), _Context())  # type: ignore[arg-type]
        assert refused.value.args[0] is grpc.StatusCode.PERMISSION_DENIED
        assert replica.got == []  # not even the two before the forged one
        assert service.refused == 1

    asyncio.run(scenario())


def test_a_message_posted_to_a_stopping_replica_is_lost_quietly(tmp_path: Path) -> None:
    """As on a dead node: the future is done with no error (an error would end the peer's
    whole stream), whether the replica stops before the post or with the message still
    in its inbox."""

    async def scenario() -> None:
        log = PartitionLog(tmp_path / "r", "t", 0, STORAGE)
        driver = ReplicaDriver(log, ReplicaConfig(1, VOTERS), _NoTransport())
        try:
            await driver.start()
            waiting = driver.post(_vote(5))  # in the inbox; the owner has not run yet
            await driver.close()
            assert await asyncio.wait_for(waiting, 5) is None
            after = driver.post(_vote(6))
            assert after.done() and after.result() is None
        finally:
            log.close()

    asyncio.run(scenario())


class _NoTransport:
    def send(self, to: int, message: Message) -> None:
        pass
