"""Idempotent producers: the batch header, finding control records in frames, and the
producer table's verdicts (properties against brute force)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replog import frames
from replog.replication.producers import (
    HEADER_BYTES,
    BatchHeader,
    ProducerBatch,
    ProducerTable,
    Verdict,
    decode_header,
    headers_in,
)

headers = st.builds(
    BatchHeader,
    st.integers(1, 2**63 - 1),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**62),
    st.integers(1, 2**32 - 1),
    st.integers(0, 2**63 - 1),
)


@given(headers)
def test_a_header_round_trips_and_has_its_documented_size(header: BatchHeader) -> None:
    value = header.encode()
    assert len(value) == HEADER_BYTES == 36
    assert value[:4] == b"\x00\x01\x00\x01"
    assert decode_header(value) == header


def test_other_control_records_are_not_headers() -> None:
    from replog.replication.driver import encode_marker

    assert decode_header(encode_marker(3, 1, (1, 2, 3))) is None
    assert decode_header(b"") is None
    future = bytearray(BatchHeader(1, 0, 0, 1, 0).encode())
    future[3] = 2  # a header version this node does not know
    assert decode_header(bytes(future)) is None


# A run: (control?, value) pieces, encoded from one base offset.
runs = st.lists(
    st.tuples(st.booleans(), st.binary(max_size=40)).flatmap(
        lambda cv: st.tuples(st.just(cv[0]), st.integers(1, 150), st.just(cv[1]))
    ),
    max_size=12,
)


def _encode(base: int, pieces: list[tuple[bool, int, bytes]]) -> bytes:
    out = b""
    offset = base
    for control, count, value in pieces:
        n = 1 if control else count
        out += frames.encode(offset, [value] * n, control=control)
        offset += n
    return out


@settings(max_examples=200)
@given(st.integers(0, 2**40), runs, st.integers(0, 60))
def test_control_records_finds_exactly_what_decoding_finds(
    base: int, pieces: list[tuple[bool, int, bytes]], cut: int
) -> None:
    buf = _encode(base, pieces)
    decoded = frames.decode(buf)
    expected = [
        (o, v)
        for o, v, c in zip(
            decoded.offsets, decoded.values, decoded.control or [False] * len(decoded), strict=True
        )
        if c
    ]
    assert frames.control_records(buf) == expected
    # A cut tail: what is whole before the cut is found, nothing raises.
    torn = buf[: max(0, len(buf) - cut)]
    found = frames.control_records(torn)
    assert found == expected[: len(found)]


def _batch(pid: int, epoch: int, seq: int) -> ProducerBatch:
    return ProducerBatch(pid, epoch, seq)


def test_verdicts_for_new_next_retried_gapped_and_fenced_batches() -> None:
    table = ProducerTable()
    assert table.check(_batch(7, 0, 0), 3).verdict is Verdict.APPEND
    table.record(10, BatchHeader(7, 0, 0, 3, 0))  # records 11..13
    assert table.check(_batch(7, 0, 3), 2).verdict is Verdict.APPEND
    dup = table.check(_batch(7, 0, 0), 3)
    assert (dup.verdict, dup.base_offset, dup.last_offset) == (Verdict.DUPLICATE, 11, 13)
    gap = table.check(_batch(7, 0, 5), 1)
    assert (gap.verdict, gap.expected_sequence) == (Verdict.OUT_OF_ORDER, 3)
    mismatched = table.check(_batch(7, 0, 0), 2)  # same first sequence, other size
    assert mismatched.verdict is Verdict.OUT_OF_ORDER
    assert table.check(_batch(7, 1, 0), 1).verdict is Verdict.APPEND  # a new epoch
    assert table.check(_batch(7, 1, 4), 1).verdict is Verdict.OUT_OF_ORDER
    table.record(14, BatchHeader(7, 1, 0, 1, 0))
    fenced = table.check(_batch(7, 0, 3), 1)
    assert (fenced.verdict, fenced.epoch) == (Verdict.FENCED, 1)


def test_a_retry_older_than_the_kept_batches_is_a_known_duplicate_without_offsets() -> None:
    table = ProducerTable(batches_kept=2)
    for i in range(4):
        table.record(i * 2, BatchHeader(1, 0, i, 1, 0))
    assert table.check(_batch(1, 0, 0), 1).verdict is Verdict.DUPLICATE_OLD
    assert table.check(_batch(1, 0, 3), 1).verdict is Verdict.DUPLICATE
    assert table.check(_batch(1, 0, 4), 1).verdict is Verdict.APPEND


def test_truncation_forgets_the_batches_above_it_but_keeps_the_epoch() -> None:
    table = ProducerTable()
    table.record(0, BatchHeader(1, 0, 0, 2, 0))  # 1..2
    table.record(3, BatchHeader(1, 2, 0, 2, 0))  # 4..5, epoch 2
    table.truncate(3)
    assert table.check(_batch(1, 2, 0), 2).verdict is Verdict.APPEND  # no longer held
    assert table.check(_batch(1, 0, 2), 1).verdict is Verdict.FENCED  # epoch 2 was seen
    table.truncate(0)
    assert table.check(_batch(1, 2, 9), 1).verdict is Verdict.APPEND  # nothing to compare


def test_the_table_is_bounded_and_evicts_the_least_recently_active() -> None:
    table = ProducerTable(producers_max=3)
    for pid in (1, 2, 3):
        table.record(pid * 10, BatchHeader(pid, 0, 0, 1, 0))
    table.record(40, BatchHeader(1, 0, 1, 1, 0))  # 1 is active again
    table.record(50, BatchHeader(4, 0, 0, 1, 0))  # evicts 2
    assert len(table) == 3 and set(table.state()) == {1, 3, 4}


def test_idle_producers_expire() -> None:
    table = ProducerTable()
    table.record(0, BatchHeader(1, 0, 0, 1, 1_000))
    table.record(2, BatchHeader(2, 0, 0, 1, 9_000))
    assert table.expire(10_000, 5_000) == 1
    assert set(table.state()) == {2}


appends = st.lists(
    st.tuples(st.integers(1, 4), st.integers(0, 2), st.integers(0, 12), st.integers(1, 5)),
    max_size=60,
)


@settings(max_examples=200)
@given(appends)
def test_a_log_built_through_the_table_never_holds_a_sequence_twice_and_rescans_equal(
    attempts: list[tuple[int, int, int, int]],
) -> None:
    """Random (retried, gapped, stale) appends through `check`/`record`: the log never holds
    a (producer, epoch, sequence) twice, duplicates point at the batch holding them, and a
    table rebuilt by scanning the log's frames equals the one kept along the way."""
    table = ProducerTable(batches_kept=5)
    buf = b""
    leo = 0
    held: dict[tuple[int, int, int], int] = {}  # (pid, epoch, seq) -> offset of the record
    for pid, epoch, seq, count in attempts:
        check = table.check(_batch(pid, epoch, seq), count)
        if check.verdict is Verdict.DUPLICATE:
            for i in range(count):
                assert held[(pid, epoch, seq + i)] == check.base_offset + i
            continue
        if check.verdict is not Verdict.APPEND:
            continue
        header = BatchHeader(pid, epoch, seq, count, 0)
        table.record(leo, header)
        buf += frames.encode(leo, [header.encode()], control=True)
        buf += frames.encode(leo + 1, [b"v"] * count)
        for i in range(count):
            key = (pid, epoch, seq + i)
            assert key not in held, f"{key} appended twice"
            held[key] = leo + 1 + i
        leo += 1 + count
    rebuilt = ProducerTable(batches_kept=5)
    rebuilt.record_all(headers_in(buf))
    assert rebuilt.state() == table.state()


def test_a_batch_is_recorded_once_whole_and_never_when_torn() -> None:
    header = BatchHeader(9, 0, 0, 3, 0)
    whole = frames.encode(0, [header.encode()], control=True) + frames.encode(1, [b"a", b"b"])
    table = ProducerTable()
    table.apply_frames(whole, 3)  # header and 2 of its 3 records so far
    assert table.check(_batch(9, 0, 0), 3).verdict is Verdict.APPEND
    table.apply_frames(frames.encode(3, [b"c"]), 4)
    assert table.check(_batch(9, 0, 0), 3).base_offset == 1
    # Torn: a new leader's epoch marker comes before the batch's last record.
    torn = ProducerTable()
    torn.apply_frames(whole, 3)
    torn.apply_frames(frames.encode(3, [b"marker"], control=True), 4)
    assert torn.check(_batch(9, 0, 0), 3).verdict is Verdict.APPEND
    assert torn.state() == {}
    # A leader that took over with part of a batch never completes it.
    led = ProducerTable()
    led.apply_frames(whole, 3)
    led.drop_partial()
    led.apply_frames(frames.encode(3, [b"own"]), 4)
    assert led.state() == {}


def _reference_scan(buf: bytes, first: int) -> list[int] | int:
    """Frame ends, or the position of the first bad frame (a plain loop)."""
    ends, pos, expected = [], 0, first
    while pos < len(buf):
        if pos + frames.HEADER_BYTES > len(buf):
            return pos
        offset, raw_len = frames.HEADER.unpack_from(buf, pos)
        end = pos + frames.HEADER_BYTES + (raw_len & frames.LENGTH_MASK)
        if offset != expected or end > len(buf):
            return pos
        ends.append(end)
        pos, expected = end, expected + 1
    return ends


@settings(max_examples=300)
@given(st.integers(0, 2**40), runs, st.integers(0, 400), st.integers(0, 3))
def test_scan_of_mixed_runs_agrees_with_a_plain_loop_also_on_damage(
    base: int, pieces: list[tuple[bool, int, bytes]], at: int, damage: int
) -> None:
    buf = bytearray(_encode(base, pieces))
    if buf and damage:  # 1: an offset off by one, 2: a cut tail, 3: a wrong first offset
        ends = frames.scan(bytes(buf), base)
        start = ([0, *ends])[at % len(ends)]
        if damage == 1:
            buf[start + 7] ^= 1
        elif damage == 2:
            del buf[len(buf) - 1 - at % len(buf) :]
    first = base + (damage == 3)
    expected = _reference_scan(bytes(buf), first)
    if isinstance(expected, list):
        assert frames.scan(bytes(buf), first) == expected
    else:
        with pytest.raises(frames.FrameError) as err:
            frames.scan(bytes(buf), first)
        assert err.value.position == expected


def test_a_batch_that_a_truncation_cuts_in_the_middle_is_forgotten_as_a_scan_would() -> None:
    """A follower truncated to a point inside a batch holds only part of it: a retry of the
    batch must be appended again, not answered with offsets that now hold other records."""
    table = ProducerTable()
    table.record(0, BatchHeader(5, 0, 0, 2, 1))  # header 0, records 1-2
    table.record(3, BatchHeader(5, 0, 2, 3, 1))  # header 3, records 4-6
    table.truncate(5)
    assert table.check(ProducerBatch(5, 0, 2), 3).verdict is Verdict.APPEND
    assert table.check(ProducerBatch(5, 0, 0), 2).verdict is Verdict.DUPLICATE
    scan = ProducerTable()
    log = frames.encode(0, [BatchHeader(5, 0, 0, 2, 1).encode()], control=True)
    log += frames.encode(1, [b"a", b"b"])
    log += frames.encode(3, [BatchHeader(5, 0, 2, 3, 1).encode()], control=True)
    log += frames.encode(4, [b"c"])
    scan.apply_frames(log, 5)
    assert table.state() == scan.state() and table.partial == scan.partial
