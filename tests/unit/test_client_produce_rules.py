"""The producers' shared rules (`produce_rules`), table-driven: record checks per topic
format, partition choice, batch limits and the metadata of each record."""

from __future__ import annotations

import pytest

from replog.client.produce_rules import (
    Chooser,
    OpenBatch,
    RecordMetadata,
    check_options,
    deliver,
    metadata,
    prepare,
)
from replog.client.results import AppendResult
from replog.errors import InvalidArgumentError
from replog.records import Record


@pytest.mark.parametrize(
    ("envelope", "value", "key", "headers", "ts", "item_is_record", "sizes"),
    [
        (False, b"v", None, (), None, False, (-1, 1)),
        (False, bytearray(b"vv"), b"k", (), None, False, (1, 2)),  # the key picks only
        (True, b"v", None, (), None, False, (-1, 1)),
        (True, b"v", None, (), 7, False, (-1, 1)),
        (True, b"v", b"kk", (), None, True, (2, 1)),
        (True, None, b"k", (), None, True, (1, -1)),  # a tombstone
        (True, b"", None, [("h", b"1")], 9, True, (-1, 0)),
    ],
)
def test_a_record_is_shaped_for_its_topic_with_its_sizes(
    envelope: bool,
    value: bytes | None,
    key: bytes | None,
    headers: list[tuple[str, bytes]],
    ts: int | None,
    item_is_record: bool,
    sizes: tuple[int, int],
) -> None:
    item, timestamp_ms, key_size, value_size = prepare("t", envelope, value, key, headers, ts)
    assert isinstance(item, Record) == item_is_record
    assert (key_size, value_size) == sizes
    if not envelope:
        assert (item, timestamp_ms) == (bytes(value or b""), 0)
    elif ts is not None:
        assert timestamp_ms == ts
    else:
        assert timestamp_ms > 1_700_000_000_000  # the send time
    if isinstance(item, Record):
        assert (item.value, item.key, item.timestamp_ms) == (value, key, timestamp_ms)


@pytest.mark.parametrize(
    ("envelope", "value", "key", "headers", "ts", "match"),
    [
        (False, None, None, (), None, "null values"),
        (False, b"v", None, [("h", b"1")], None, "headers"),
        (False, b"v", None, (), 5, "timestamps"),
        (True, "text", None, (), None, "str"),
        (True, b"v", "key", (), None, "key is bytes"),
    ],
)
def test_a_record_its_topic_cannot_hold_is_refused_before_it_is_queued(
    envelope: bool,
    value: object,
    key: object,
    headers: list[tuple[str, bytes]],
    ts: int | None,
    match: str,
) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        prepare("t", envelope, value, key, headers, ts)  # type: ignore[arg-type]


def test_options_are_range_checked_and_name_the_partitioner() -> None:
    assert check_options("all", 0, 1, 1, 1, 1, "crc32") == "crc32"
    for bad in [("al", 5, 1, 1, 1, 1, "murmur2"), ("all", -1, 1, 1, 1, 1, "murmur2")]:
        with pytest.raises(InvalidArgumentError):
            check_options(*bad)
    with pytest.raises(InvalidArgumentError, match="murmur2"):
        check_options("all", 5, 1, 1, 1, 1, "md5")


def test_partitions_are_explicit_by_key_or_sticky_and_batches_round_robin() -> None:
    chooser = Chooser(3, "murmur2")
    assert chooser.choose(b"k", 2) == 2
    assert chooser.choose(b"k", None) == chooser.choose(b"k", None)
    assert [chooser.choose(None, None) for _ in range(4)] == [0, 0, 0, 0]  # sticky
    chooser.sealed(1)  # another partition's batch left: keyless records stay
    assert chooser.choose(None, None) == 0
    chooser.sealed(0)
    assert chooser.choose(None, None) == 1
    chooser.sealed(1)
    chooser.sealed(2)
    assert chooser.choose(None, None) == 0  # wraps
    assert [chooser.next_batch(None) for _ in range(4)] == [0, 1, 2, 0]
    assert chooser.next_batch(2) == 2
    with pytest.raises(InvalidArgumentError, match="outside"):
        chooser.next_batch(3)
    with pytest.raises(InvalidArgumentError, match="outside"):
        chooser.choose(None, 3)


def test_a_batch_fills_by_records_or_bytes_and_each_record_gets_its_metadata() -> None:
    batch = OpenBatch(1)
    seen: list[tuple[BaseException | None, RecordMetadata | None]] = []
    first = prepare("t", True, b"abc", b"k", (), 11)
    batch.add(first, lambda err, md: seen.append((err, md)))
    assert not batch.full(4, 3)
    second = prepare("t", True, b"d", None, (), 12)
    assert batch.add(second, None) == 1
    assert batch.full(4, 3) and batch.full(100, 2) and not batch.full(100, 3)
    assert batch.times == [11, 12]
    answer = AppendResult(base_offset=40, last_offset=41, high_watermark=42)
    assert metadata("t", 1, answer, 1, second, True) == RecordMetadata("t", 1, 41, 12, -1, 1)
    assert metadata("t", 1, AppendResult(-1, -1, -1), 1, second, False).offset == -1  # acks=none
    deliver("t", batch, answer, None, True)
    assert seen == [(None, RecordMetadata("t", 1, 40, 11, 1, 3))]
