"""Delivery callbacks and futures when a producer closes with batches unanswered: each
record's `on_delivery` runs once with SHUTTING_DOWN and no future stays pending (sync and
asyncio producers, against clients that never answer)."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Sequence

import pytest

from replog.client import formats
from replog.client.aio_producer import AsyncProducer
from replog.client.produce_rules import DeliveryCallback, RecordMetadata
from replog.client.producer import Producer
from replog.client.results import AppendResult
from replog.errors import ShuttingDownError
from replog.v1 import log_pb2

WAIT_S = 30.0


class StuckClient:
    """A threaded client whose unary appends block until `release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Semaphore(0)

    def partition_count(self, topic: str) -> int:
        return 1

    def topic_format(self, topic: str) -> str:
        return formats.ENVELOPE

    def append(
        self, topic: str, partition: int, values: formats.Values, *, acks: str = "all"
    ) -> AppendResult:
        self.started.release()
        assert self.release.wait(WAIT_S)
        return AppendResult(
            base_offset=10, last_offset=10 + len(list(values)) - 1, high_watermark=0
        )

    def pipeline(self, acks: str, **_kwargs: object) -> None:
        return None


def test_close_with_a_timeout_delivers_each_unanswered_record_once_with_shutting_down() -> None:
    client = StuckClient()
    producer = Producer(client, "t", streaming=False, linger_ms=0, batch_records_max=1)
    calls: list[tuple[str, BaseException | None, RecordMetadata | None]] = []

    def record(name: str) -> DeliveryCallback:
        return lambda err, md: calls.append((name, err, md))

    first = producer.send(b"a", on_delivery=record("a"))
    assert client.started.acquire(timeout=WAIT_S)  # under way, stuck
    queued = producer.send(b"b", on_delivery=record("b"))
    producer.close(timeout=0.1)
    with pytest.raises(ShuttingDownError):
        queued.result(0)
    assert [(name, type(err)) for name, err, _ in calls] == [("b", ShuttingDownError)]
    client.release.set()  # the stuck append ends after close: its callback still runs once
    md = first.result(WAIT_S)
    assert (md.offset, md.timestamp_ms is not None, md.serialized_value_size) == (10, True, 1)
    for _ in range(int(WAIT_S * 100)):
        if len(calls) == 2:
            break
        threading.Event().wait(0.01)
    assert calls[1] == ("a", None, md)


class StuckAsyncClient:
    """An asyncio client whose pipeline takes batches and never answers them."""

    idempotent = True

    def __init__(self) -> None:
        self.taken: list[asyncio.Future[AppendResult]] = []

    async def list_topics(self) -> dict[str, int]:
        return {"t": 2}

    async def topic_format(self, topic: str) -> str:
        return formats.RAW

    async def _append(
        self, topic: str, partition: int, values: Sequence[bytes], acks: str
    ) -> AppendResult:
        raise AssertionError("pipelined: no unary appends")

    async def _enqueue(self, req: log_pb2.AppendRequest) -> asyncio.Future[AppendResult]:
        fut: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        self.taken.append(fut)
        return fut


def test_the_async_producer_settles_every_future_and_callback_on_close() -> None:
    calls: list[tuple[int, BaseException | None]] = []

    def note(i: int, err: BaseException | None, md: RecordMetadata | None) -> None:
        calls.append((i, err))

    async def scenario() -> None:
        client = StuckAsyncClient()
        producer = AsyncProducer(client, "t", linger_ms=0, batch_records_max=2)
        futures = [
            await producer.send(b"v%d" % i, partition=i % 2, on_delivery=functools.partial(note, i))
            for i in range(7)
        ]
        flushing = asyncio.create_task(producer.flush())
        await asyncio.sleep(0.01)
        flushing.cancel()  # the wait only
        await asyncio.gather(flushing, return_exceptions=True)
        assert len(client.taken) == 4 and not any(f.done() for f in futures)
        client.taken[0].set_result(AppendResult(5, 6, 7))  # partition 0's first batch
        await producer.close(timeout=0.05)
        assert all(f.done() for f in futures)
        assert [f.result().offset for f in futures[:4:2]] == [5, 6]
        for f in futures[4:] + futures[1:4:2]:
            assert isinstance(f.exception(), ShuttingDownError)
        with pytest.raises(ShuttingDownError):
            await producer.send(b"late")

    asyncio.run(asyncio.wait_for(scenario(), WAIT_S))
    assert sorted(i for i, _ in calls) == list(range(7))  # once each
    assert {i for i, e in calls if e is None} == {0, 2}
