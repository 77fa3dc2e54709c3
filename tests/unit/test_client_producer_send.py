"""`Producer.send`'s record-by-record path (sync producer, against an in-memory client):
each record's future gives its own metadata whether it was sent plain or with options,
keyless records fill one partition's batch at a time, and a misspelt option is refused
before anything is queued."""

from __future__ import annotations

import threading
import time

import pytest

from replog.client import formats
from replog.client.producer import Producer
from replog.client.results import AppendResult
from replog.records import Record

WAIT_S = 30.0


class MemoryClient:
    """Unary appends land in `appended` (partition, values) at consecutive offsets."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.appended: list[tuple[int, list[object]]] = []
        self._offsets = [0] * partitions
        self._lock = threading.Lock()

    def partition_count(self, topic: str) -> int:
        return self.partitions

    def topic_format(self, topic: str) -> str:
        return formats.ENVELOPE

    def append(
        self, topic: str, partition: int, values: formats.Values, *, acks: str = "all"
    ) -> AppendResult:
        items = list(values)
        with self._lock:
            base = self._offsets[partition]
            self._offsets[partition] += len(items)
            self.appended.append((partition, items))
        return AppendResult(base, base + len(items) - 1, base + len(items))

    def pipeline(self, acks: str, **_kwargs: object) -> None:
        return None


def test_plain_and_optioned_records_each_get_their_own_metadata() -> None:
    client = MemoryClient(1)
    with Producer(client, "t", streaming=False, linger_ms=10_000) as producer:
        before_ms = time.time_ns() // 1_000_000
        plain = producer.send(b"abc")
        keyed = producer.send(b"de", key=b"k1", timestamp_ms=42)
        tombstone = producer.send(None, key=b"k2")
        last = producer.send(b"", key=None, partition=None, headers=None)  # (as Spark passes)
        after_ms = time.time_ns() // 1_000_000
        producer.flush(WAIT_S)
        assert all(f.done() and f.exception() is None for f in (plain, keyed, tombstone, last))
        md = [f.result(WAIT_S) for f in (plain, keyed, tombstone, last)]
    assert [m.offset for m in md] == [0, 1, 2, 3]
    assert [(m.serialized_key_size, m.serialized_value_size) for m in md] == [
        (-1, 3),
        (2, 2),
        (2, -1),
        (-1, 0),
    ]
    assert md[1].timestamp_ms == 42
    for m in (md[0], md[2], md[3]):
        assert m.timestamp_ms is not None and before_ms <= m.timestamp_ms <= after_ms
    [(_, values)] = client.appended  # one batch, in send order
    assert values[0] == Record(b"abc", timestamp_ms=md[0].timestamp_ms)
    assert isinstance(values[2], Record) and values[2].value is None


def test_keyless_records_fill_one_partition_then_move_to_the_next() -> None:
    client = MemoryClient(2)
    with Producer(client, "t", streaming=False, linger_ms=10_000, batch_records_max=2) as p:
        futures = [p.send(bytes([i])) for i in range(6)]
        p.flush(WAIT_S)
        partitions = [f.result(WAIT_S).partition for f in futures]
    assert partitions == [0, 0, 1, 1, 0, 0]
    assert sorted((part, [r.value for r in vals]) for part, vals in client.appended) == [  # type: ignore[attr-defined]
        (0, [b"\x00", b"\x01"]),
        (0, [b"\x04", b"\x05"]),
        (1, [b"\x02", b"\x03"]),
    ]


def test_a_misspelt_option_is_a_type_error_and_queues_nothing() -> None:
    client = MemoryClient(1)
    with Producer(client, "t", streaming=False, linger_ms=0) as producer:
        with pytest.raises(TypeError, match="kye"):
            producer.send(b"v", kye=b"k")  # type: ignore[call-arg]
        producer.flush(WAIT_S)
    assert client.appended == []
