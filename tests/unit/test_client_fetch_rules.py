"""The consumers' positions core (`replog.client.fetch_rules.Positions`), driven as both
group consumers and both assigned consumers drive it: a fetcher's items in, records and
restarts out."""

from __future__ import annotations

import pytest

from replog.client.fetch_rules import GroupRecord, Positions, bounds, offset_at
from replog.client.results import FetchResult
from replog.errors import (
    NotFoundError,
    OffsetOutOfRangeError,
    PermissionDeniedError,
)
from replog.frames import DecodedFrames
from replog.records import DecodedRecords

T0, T1 = ("t", 0), ("t", 1)


def fetched(start: int, count: int, hw: int = 100) -> FetchResult:
    offsets = list(range(start, start + count))
    return FetchResult(DecodedFrames(offsets, [b"v%d" % o for o in offsets]), hw, 0, start + count)


def started(*tps: tuple[str, int], at: int = 0, max_poll_records: int = 500) -> Positions:
    pos = Positions(max_poll_records)
    for tp in tps:
        pos.restart(pos.add(tp, at))
    return pos


def test_a_current_batch_gives_its_records_and_a_stale_or_paused_one_nothing() -> None:
    pos = started(T0, T1)
    epoch = pos.partitions[T0].epoch
    assert [r.offset for r in pos.accept(T0, epoch, fetched(0, 3)) or []] == [0, 1, 2]
    assert pos.accept(T0, epoch - 1, fetched(0, 3)) == []  # an older fetch epoch
    assert pos.accept(("t", 9), epoch, fetched(0, 3)) == []  # not consumed here
    pos.set_paused([T0], True)
    assert pos.accept(T0, epoch, fetched(0, 3)) == []
    assert pos.epoch_of(T0) is None and pos.epoch_of(T1) == pos.partitions[T1].epoch


def test_errors_out_of_range_resets_a_gone_topic_is_skipped_others_are_raised() -> None:
    pos = started(T0)
    epoch = pos.partitions[T0].epoch
    assert pos.accept(T0, epoch, OffsetOutOfRangeError("gone")) is None  # the driver resets
    assert pos.accept(T0, epoch, NotFoundError("topic deleted")) == []
    with pytest.raises(PermissionDeniedError):
        pos.accept(T0, epoch, PermissionDeniedError("no read"))
    state = pos.reset(T0, 40)
    assert (state.position, state.consumed) == (40, 40)
    assert pos.restart(state) > epoch  # the restarted fetch's batches are the current ones


def test_envelope_batches_keep_keys_headers_timestamps_and_null_values() -> None:
    pos = started(T0)
    decoded = DecodedRecords([5, 6], [b"a", None], [b"k", None], [11, 12], [(("h", b"1"),), ()])
    got = pos.accept(T0, pos.partitions[T0].epoch, FetchResult(decoded, 7, 0, 7))
    assert got == [
        GroupRecord("t", 0, 5, b"a", b"k", (("h", b"1"),), 11),
        GroupRecord("t", 0, 6, None, None, (), 12),
    ]


def test_a_call_returns_at_most_max_poll_records_and_holds_the_rest_for_the_next() -> None:
    pos = started(T0, T1, max_poll_records=2)
    records = (pos.accept(T0, pos.partitions[T0].epoch, fetched(0, 3)) or []) + (
        pos.accept(T1, pos.partitions[T1].epoch, fetched(0, 2)) or []
    )
    first = pos.cut(records)
    assert [(r.partition, r.offset) for r in first] == [(0, 0), (0, 1)]
    pos.delivered(first)
    assert pos.position(T0) == 2
    assert len(pos.held) == 3
    second = pos.take_held()
    assert [(r.partition, r.offset) for r in second] == [(0, 2), (1, 0)]
    pos.restart(pos.partitions[T1])  # a seek (or a pause, a release) of partition 1
    assert pos.take_held() == []  # its held record is stale now: dropped, never delivered
    assert not pos.held


def test_processed_commits_what_was_delivered_and_rewind_fetches_the_rest_again() -> None:
    pos = started(T0, T1, at=10)
    taken = (pos.accept(T0, pos.partitions[T0].epoch, fetched(10, 4)) or []) + (
        pos.accept(T1, pos.partitions[T1].epoch, fetched(10, 2)) or []
    )
    pos.delivered(taken[:2])
    assert pos.consumed_offsets() == {T0: 10, T1: 10}  # delivered, not processed yet
    pos.processed()
    assert pos.consumed_offsets() == {T0: 12, T1: 10}
    assert pos.positions() == {T0: 12, T1: 10}
    assert pos.consumed_offsets([T1]) == {T1: 10}
    pos.partitions[T0].position = 14  # the driver handed out two more, then partitions moved
    assert pos.rewind(taken[2:]) == [T0, T1]
    assert pos.positions() == {T0: 12, T1: 10}  # fetched again from the first undelivered


def test_seek_checks_pause_and_resume_answer_only_the_partitions_that_changed() -> None:
    pos = started(T0, T1)
    with pytest.raises(ValueError, match="not assigned"):
        pos.seek_target(("t", 7), 0)
    with pytest.raises(ValueError, match="earliest"):
        pos.seek_target(T0, "middle")
    assert pos.seek_target(T0, "latest") == "latest" and pos.seek_target(T0, 3) == 3
    assert pos.set_paused([T0, T0, ("x", 1)], True) == [T0]
    assert pos.set_paused([T0, T1], True) == [T1]
    assert pos.paused() == {T0, T1}
    assert pos.set_paused([T1], False) == [T1] and pos.paused() == {T0}
    assert [s.position for s in pos.drop([T0])] == [0] and set(pos.partitions) == {T1}
    with pytest.raises(ValueError, match="max_poll_records"):
        Positions(0)


def test_reset_offsets_come_from_a_one_byte_fetch_or_its_out_of_range_error() -> None:
    answer = FetchResult(DecodedFrames([], []), 90, 30, 30)
    assert bounds(answer) == (30, 90)
    assert (offset_at(answer, "earliest"), offset_at(answer, "latest")) == (30, 90)
    err = OffsetOutOfRangeError("x", log_start_offset=50, high_watermark=70)
    assert (offset_at(err, "earliest"), offset_at(err, "latest")) == (50, 70)
