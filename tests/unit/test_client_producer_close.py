"""`Producer.close(timeout)`: bounded in time, what is left fails with SHUTTING_DOWN."""

from __future__ import annotations

import threading
import time

import pytest

from replog.client import formats
from replog.client.producer import Producer
from replog.client.results import AppendResult
from replog.errors import ShuttingDownError

WAIT_S = 30.0  # generous: the bound under test is the close's, far below this


class StuckClient:
    """Every unary append blocks until `release` is set (a cluster that does not answer)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Semaphore(0)
        self.appended: list[int] = []

    def partition_count(self, topic: str) -> int:
        return 2

    def topic_format(self, topic: str) -> str:
        return formats.RAW

    def append(
        self, topic: str, partition: int, values: formats.Values, *, acks: str = "all"
    ) -> AppendResult:
        self.started.release()
        assert self.release.wait(WAIT_S)
        self.appended.append(partition)
        return AppendResult(base_offset=0, last_offset=len(list(values)) - 1, high_watermark=0)

    def pipeline(self, acks: str, **_kwargs: object) -> None:
        return None


def test_close_with_a_timeout_returns_and_fails_what_was_not_sent() -> None:
    client = StuckClient()
    producer = Producer(client, "t", streaming=False, linger_ms=0)
    in_flight = producer.send_batch([b"a"], partition=0)
    assert client.started.acquire(timeout=WAIT_S)  # partition 0 has a batch under way
    queued = [producer.send_batch([b"b%d" % i], partition=0) for i in range(3)]
    started = time.monotonic()
    producer.close(timeout=0.2)
    assert time.monotonic() - started < WAIT_S / 2  # did not wait for the stuck append
    for fut in queued:  # never sent: they fail, not appended
        with pytest.raises(ShuttingDownError, match="before this batch was sent"):
            fut.result(timeout=0)
    assert not in_flight.done()  # the unary append under way goes on in the background
    client.release.set()
    assert in_flight.result(timeout=WAIT_S).base_offset == 0
    assert client.appended == [0]
    with pytest.raises(ShuttingDownError):
        producer.send(b"late")


def test_close_without_a_timeout_waits_for_every_batch() -> None:
    client = StuckClient()
    producer = Producer(client, "t", streaming=False, linger_ms=0)
    futures = [producer.send_batch([b"x"], partition=p) for p in (0, 1, 0)]
    closer = threading.Thread(target=producer.close)
    closer.start()
    assert client.started.acquire(timeout=WAIT_S)
    assert closer.is_alive()  # waits: nothing was answered yet
    client.release.set()
    closer.join(WAIT_S)
    assert not closer.is_alive()
    assert all(f.result(timeout=0).base_offset == 0 for f in futures)
    assert sorted(client.appended) == [0, 0, 1]
