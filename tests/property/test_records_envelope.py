"""The record envelope (`replog.records`): round trips, and malformed bytes always raise
`InvalidRecordError`, never anything else."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replog import frames, records
from replog.errors import InvalidRecordError

values = st.binary(max_size=300)
keys = st.none() | st.binary(max_size=40)
headers = st.lists(st.tuples(st.text(max_size=12), st.binary(max_size=20)), max_size=4)
stamps = st.integers(min_value=records.TIMESTAMP_MIN, max_value=records.TIMESTAMP_MAX)
nullable_values = st.none() | values  # None: a null value (a tombstone)
record_args = st.tuples(nullable_values, keys, headers, stamps)
Args = tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]


def _encode(args: Args) -> bytes:
    value, key, head, ts = args
    return records.encode(value, key=key, headers=head, timestamp_ms=ts)


@given(record_args)
def test_an_envelope_decodes_to_what_was_encoded(args: Args) -> None:
    value, key, head, ts = args
    got = records.decode(_encode(args), 7)
    assert got == records.ConsumerRecord(7, value, key, tuple(head), ts)


@given(st.lists(record_args, max_size=40), stamps, st.integers(0, 2**40))
def test_a_batch_decodes_from_values_and_from_frames(batch: list[Args], ts: int, base: int) -> None:
    recs = [records.Record(v, key=k, headers=h, timestamp_ms=t) for v, k, h, t in batch]
    envelopes = records.encode_batch(recs, ts)
    expected = [
        records.ConsumerRecord(base + i, v, k, tuple(h), t) for i, (v, k, h, t) in enumerate(batch)
    ]
    assert records.decode_values(envelopes, range(base, base + len(batch))).records() == expected
    assert records.decode_frames(frames.encode(base, envelopes)).records() == expected
    records.validate(envelopes)


@given(st.lists(values, max_size=60), stamps, st.booleans())
def test_plain_values_get_the_batch_timestamp(vals: list[bytes], ts: int, equal: bool) -> None:
    if equal and vals:
        vals = [vals[0]] * len(vals)
    envelopes = records.encode_batch(vals, ts)
    decoded = records.decode_frames(frames.encode(5, envelopes))
    assert decoded.values == vals
    assert decoded.timestamps == [ts] * len(vals)
    assert decoded.keys == [None] * len(vals)
    assert decoded.offsets == list(range(5, 5 + len(vals)))


@given(
    st.lists(st.tuples(st.sampled_from([b"", b"ab", b"xyz" * 30]), st.integers(0, 3)), max_size=80),
    st.integers(0, 2**41),
    stamps,
)
def test_values_sent_one_by_one_encode_as_the_general_path_does(
    items: list[tuple[bytes, int]], start_ms: int, odd_ms: int
) -> None:
    """`encode_timed` (runs of one millisecond and one value length share their fixed
    part) gives the same envelopes as `encode_batch`, runs long or short, times odd."""
    vals = [v for v, _ in items]
    times = list(itertools.accumulate((step for _, step in items), initial=start_ms))[1:]
    if times and odd_ms % 3 == 0:
        times[odd_ms % len(times)] = odd_ms
    assert records.encode_timed(vals, 1, times) == records.encode_batch(vals, 1, times)
    decoded = records.decode_values(records.encode_timed(vals, 1, times))
    assert (decoded.values, decoded.timestamps) == (vals, times)


@given(st.lists(record_args, min_size=1, max_size=10), stamps)
def test_stamping_replaces_only_the_timestamp(batch: list[Args], ts: int) -> None:
    envelopes = [_encode(a) for a in batch]
    stamped = records.decode_values(records.stamp(envelopes, ts))
    original = records.decode_values(envelopes)
    assert stamped.timestamps == [ts] * len(batch)
    assert (stamped.values, stamped.keys, stamped.headers) == (
        original.values,
        original.keys,
        original.headers,
    )


@given(record_args)
def test_an_envelope_cut_at_any_byte_or_padded_is_refused(args: Args) -> None:
    envelope = _encode(args)
    for cut in range(len(envelope)):
        with pytest.raises(InvalidRecordError):
            records.decode(envelope[:cut])
        with pytest.raises(InvalidRecordError):
            records.validate([envelope, envelope[:cut]])
    with pytest.raises(InvalidRecordError):
        records.decode(envelope + b"\0")


@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_the_typed_error(data: bytes) -> None:
    try:
        got = records.decode(data)
    except InvalidRecordError:
        with pytest.raises(InvalidRecordError):
            records.validate([data])
        return
    records.validate([data])
    assert (
        records.encode(got.value, key=got.key, headers=got.headers, timestamp_ms=got.timestamp_ms)
        == data
    )


@given(st.lists(st.tuples(st.booleans(), record_args), max_size=20))
def test_frame_timestamps_skip_control_records(batch: list[tuple[bool, Args]]) -> None:
    parts = []
    expected = []
    for i, (control, args) in enumerate(batch):
        envelope = _encode(args)
        parts.append(frames.encode(i, [envelope], control=control))
        expected.append(records.NO_TIMESTAMP if control else args[3])
    buf = b"".join(parts)
    starts = [sum(map(len, parts[:i])) for i in range(len(parts))]
    assert records.frame_timestamps(buf, starts).tolist() == expected


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("control"), st.binary(max_size=40)),
            st.tuples(st.just("run"), st.integers(1, 40), nullable_values, keys),  # equal records
            st.tuples(st.just("one"), record_args),
        ),
        max_size=12,
    ),
    st.integers(0, 2**40),
)
def test_frames_with_runs_and_control_records_decode_in_order(
    pieces: list[tuple[object, ...]], base: int
) -> None:
    buf = b""
    offset = base
    expected: list[records.ConsumerRecord] = []
    for piece in pieces:
        if piece[0] == "control":
            buf += frames.encode(offset, [piece[1]], control=True)  # type: ignore[list-item]
            offset += 1
            continue
        if piece[0] == "run":
            _, count, value, key = piece
            batch = [(value, key, [], 7)] * count  # type: ignore[operator]
        else:
            batch = [piece[1]]
        envelopes = [_encode(args) for args in batch]  # type: ignore[arg-type]
        buf += frames.encode(offset, envelopes)
        for v, k, h, t in batch:  # type: ignore[misc]
            expected.append(records.ConsumerRecord(offset, v, k, tuple(h), t))
            offset += 1
    assert records.decode_frames(buf).records() == expected


def _outcome(vals: list[bytes], few: int) -> tuple[str, object]:
    saved = records._FEW
    records._FEW = few
    try:
        return ("ok", records.validate(vals))
    except InvalidRecordError as exc:
        return (str(exc), exc.metadata)
    finally:
        records._FEW = saved


mangled = st.tuples(record_args, st.integers(0, 40), st.binary(max_size=3), st.booleans())


@given(st.lists(mangled, min_size=1, max_size=12))
def test_a_few_envelopes_are_checked_one_by_one_with_the_batch_checks_verdict(
    items: list[tuple[Args, int, bytes, bool]],
) -> None:
    """`validate` checks small batches with `struct`, larger ones with numpy: on valid,
    cut, overwritten and padded envelopes both give the same total or the same first error."""
    vals = []
    for args, at, junk, pad in items:
        envelope = _encode(args)
        if junk and at < len(envelope):
            envelope = envelope[:at] + junk + envelope[at + len(junk) :]
        elif pad:
            envelope = envelope + junk
        elif at < len(envelope):
            envelope = envelope[:at]
        vals.append(envelope)
    for batch in (vals, [vals[0]] * len(vals)):  # unequal and equal sizes
        assert _outcome(batch, few=10**6) == _outcome(batch, few=0)
