"""The asyncio client's pipeline (`aio_pipeline.AsyncPipeline`) against a scripted leader:
what it writes, in which order, and what its callers get."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from replog.client.aio_pipeline import Answered, AsyncPipeline
from replog.client.results import AppendResult
from replog.client.retry import RetryPolicy
from replog.client.sequences import Identity, Sequences
from replog.errors import (
    InvalidArgumentError,
    LeaderUnknownError,
    OutOfOrderSequenceError,
    ReplogError,
    ShuttingDownError,
)
from replog.v1 import log_pb2

FAST = RetryPolicy(attempts_max=20, backoff_initial_ms=1, backoff_max_ms=2, deadline_ms=30_000)


class Leader:
    """Appends batches in sequence order, per producer; `refuse` scripts errors by
    (producer id, base_sequence, attempt). `sent` records every write: (pid, seq)."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int]] = []
        self.log: list[tuple[int, int]] = []
        self.next_seq: dict[int, int] = {}
        self.refuse: dict[tuple[int, int, int], ReplogError] = {}
        self.attempts: dict[tuple[int, int], int] = {}
        self.gate = asyncio.Event()  # answers wait for it
        self.gate.set()

    async def send(self, req: log_pb2.AppendRequest) -> Answered:
        key = (req.producer_id, req.base_sequence)
        self.sent.append(key)
        attempt = self.attempts[key] = self.attempts.get(key, 0) + 1

        async def answered() -> AppendResult:
            await self.gate.wait()
            err = self.refuse.get((*key, attempt))
            if err is not None:
                raise err
            expected = self.next_seq.get(req.producer_id, 0)
            if req.base_sequence < expected:  # a duplicate: its first offsets
                at = self.log.index(key)
                return AppendResult(at, at, len(self.log))
            if req.base_sequence != expected:
                raise OutOfOrderSequenceError("gap", expected_sequence=expected)
            self.next_seq[req.producer_id] = expected + len(req.values)
            self.log.append(key)
            return AppendResult(len(self.log) - 1, len(self.log) - 1, len(self.log))

        return answered


def pipeline(leader: Leader) -> tuple[AsyncPipeline, list[Identity]]:
    sequences = Sequences()
    given: list[Identity] = []

    async def identity() -> Identity:
        if sequences.identity is None:
            made = Identity(len(given) + 1, 0)
            given.append(made)
            sequences.adopt(made)
        assert sequences.identity is not None
        return sequences.identity

    async def reroute(err: ReplogError, topic: str, partition: int) -> bool:
        return False

    return AsyncPipeline(leader.send, reroute, identity, sequences, FAST), given


def request(value: bytes = b"x") -> log_pb2.AppendRequest:
    return log_pb2.AppendRequest(topic="t", partition=0, values=[value])


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 30))


def test_one_batch_at_a_time_until_the_leader_knows_the_producer_then_five() -> None:
    async def scenario() -> None:
        leader = Leader()
        leader.gate.clear()
        pipe, _ = pipeline(leader)
        calls = [asyncio.ensure_future(pipe.append(request())) for _ in range(8)]
        for _ in range(20):
            await asyncio.sleep(0)
        assert leader.sent == [(1, 0)]  # the first alone
        leader.gate.set()
        results = await asyncio.gather(*calls)
        assert [r.base_offset for r in results] == list(range(8))
        assert leader.sent == [(1, s) for s in range(8)]  # each once, in order
        await pipe.close()

    run(scenario)


def test_a_refused_batch_is_resent_in_order_with_the_ones_behind_it() -> None:
    async def scenario() -> None:
        leader = Leader()
        pipe, _ = pipeline(leader)
        assert (await pipe.append(request())).base_offset == 0  # the producer is known now
        # batch 1 refused once (an election); 2..4 were sent behind it and fail out of order
        leader.refuse[(1, 1, 1)] = LeaderUnknownError("election")
        results = await asyncio.gather(*(pipe.append(request()) for _ in range(4)))
        assert [r.base_offset for r in results] == [1, 2, 3, 4]
        assert leader.log == [(1, s) for s in range(5)]  # once each, in sequence order
        resent = leader.sent[5:]
        assert resent[0] == (1, 1) and resent == sorted(resent)  # from the refused one on
        await pipe.close()

    run(scenario)


def test_a_batch_refused_for_good_with_nothing_written_renumbers_the_others() -> None:
    async def scenario() -> None:
        leader = Leader()
        pipe, given = pipeline(leader)
        await pipe.append(request())
        leader.refuse[(1, 2, 1)] = InvalidArgumentError("bad batch")
        leader.gate.clear()
        calls = [asyncio.ensure_future(pipe.append(request())) for _ in range(3)]
        for _ in range(20):
            await asyncio.sleep(0)
        leader.gate.set()
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        assert isinstance(outcomes[1], InvalidArgumentError)
        assert not isinstance(outcomes[0], BaseException)
        assert not isinstance(outcomes[2], BaseException)
        # the one behind the refused batch went again under a new producer id, from 0
        assert len(given) == 2 and leader.log[-1] == (2, 0)
        await pipe.close()

    run(scenario)


def test_close_fails_what_is_unanswered() -> None:
    async def scenario() -> None:
        leader = Leader()
        leader.gate.clear()
        pipe, _ = pipeline(leader)
        call = asyncio.ensure_future(pipe.append(request()))
        for _ in range(20):
            await asyncio.sleep(0)
        await pipe.close()
        with pytest.raises(ShuttingDownError):
            await call
        with pytest.raises(ShuttingDownError):
            await pipe.append(request())

    run(scenario)


def test_bytes_in_flight_over_every_partition_are_capped() -> None:
    """Many partitions, each under its 5 batches: the bytes held stay under the cap (one
    batch alone always goes), and every append is answered once room is made."""

    async def main() -> None:
        leader = Leader()
        leader.gate.clear()  # nothing is answered yet
        pipe, _ = pipeline(leader)
        value = b"v" * 1000
        size = log_pb2.AppendRequest(topic="t", partition=1, values=[value]).ByteSize()
        pipe.in_flight_bytes_max = 3 * size
        tasks = [
            asyncio.ensure_future(
                pipe.append(log_pb2.AppendRequest(topic="t", partition=p, values=[value]))
            )
            for p in range(1, 11)  # the same size each (partition 0 encodes shorter)
        ]
        for _ in range(50):
            await asyncio.sleep(0)
        assert pipe.in_flight_bytes == 3 * size  # three taken; seven wait for room
        assert len(leader.sent) == 3
        leader.gate.set()
        results = await asyncio.wait_for(asyncio.gather(*tasks), 30)
        assert len(results) == 10 and pipe.in_flight_bytes == 0
        # a batch larger than the cap alone still goes
        pipe.in_flight_bytes_max = 10
        big = await asyncio.wait_for(pipe.append(request(value)), 30)
        assert big.base_offset >= 0 and pipe.in_flight_bytes == 0

    asyncio.run(main())


def test_a_caller_cancelled_while_waiting_for_room_gives_nothing_back_twice() -> None:
    async def main() -> None:
        leader = Leader()
        leader.gate.clear()
        pipe, _ = pipeline(leader)
        size = request(b"a" * 100).ByteSize()
        pipe.in_flight_bytes_max = size
        first = asyncio.ensure_future(pipe.append(request(b"a" * 100)))
        waiting = asyncio.ensure_future(pipe.append(request(b"b" * 100)))
        for _ in range(20):
            await asyncio.sleep(0)
        assert pipe.in_flight_bytes == size
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        assert pipe.in_flight_bytes == size  # the first batch's bytes only
        leader.gate.set()
        await asyncio.wait_for(first, 30)
        assert pipe.in_flight_bytes == 0

    asyncio.run(main())
