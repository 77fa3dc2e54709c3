"""The columnar record codec (replog/kafka/columns.py) against the per-record one
(replog/kafka/records.py), its reference: any records encode to the same bytes; any
records section, valid or mangled (bytes flipped, cut, appended), decodes to the same
records or is refused with a typed error by both; and the edge's conversions made with
columns equal those made record by record."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replog import frames
from replog.errors import InvalidRecordError
from replog.kafka import columns
from replog.kafka.errors import KafkaDecodeError
from replog.kafka.records import (
    Header,
    Record,
    RecordBatch,
    _decode_records,
    _encode_record,
    batch_of,
    decode_batch,
    encode_batch,
)
from replog.server.kafka_edge.convert import batch_of_frames, values_of

blobs = st.none() | st.binary(max_size=40)
records = st.lists(
    st.tuples(
        st.integers(-(2**40), 2**40) | st.integers(-(2**63), 2**63 - 1),  # timestamp delta
        st.integers(0, 2**31 - 1) | st.integers(0, 300),  # offset delta
        blobs,
        blobs,
    ),
    max_size=60,
)


def as_records(rows: list[tuple[int, int, bytes | None, bytes | None]]) -> list[Record]:
    return [Record(o, t, k, v) for t, o, k, v in rows]


@given(records)
@settings(max_examples=200, deadline=None)
def test_columns_encode_the_bytes_the_per_record_encoder_does(rows: list) -> None:
    recs = as_records(rows)
    section = columns.encode_columns(
        np.array([r.offset_delta for r in recs], dtype=np.int64),
        np.array([r.timestamp_delta for r in recs], dtype=np.int64),
        [r.key for r in recs],
        [r.value for r in recs],
    )
    assert section == b"".join(map(_encode_record, recs))


def decoded(section: bytes, count: int) -> tuple[str, object]:
    """What the columnar decoder makes of `section`: ("error", None) or ("ok", records);
    records with headers are left to the per-record decoder (as `decode_batch` does)."""
    try:
        cols, headers = columns.decode_columns(section, count)
    except KafkaDecodeError:
        return "error", None
    if headers:
        return reference(section, count)
    keys, values = cols.key_list(), cols.value_list()
    got = [
        (int(o), int(t), k, v)
        for o, t, k, v in zip(cols.offset_deltas, cols.timestamp_deltas, keys, values, strict=True)
    ]
    return "ok", got


def reference(section: bytes, count: int) -> tuple[str, object]:
    try:
        recs = _decode_records(section, count)
    except KafkaDecodeError:
        return "error", None
    if any(r.headers for r in recs):
        return "headers", None
    return "ok", [(r.offset_delta, r.timestamp_delta, r.key, r.value) for r in recs]


@given(
    records,
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    st.integers(0, 2) | st.none(),
    st.binary(max_size=3),
    st.integers(-2, 2),
)
@settings(max_examples=400, deadline=None)
def test_any_section_decodes_as_the_per_record_decoder_decodes_it(
    rows: list, flips: list, cut: int | None, tail: bytes, miscount: int
) -> None:
    recs = as_records(rows)
    if rows and cut == 0:  # a record with headers somewhere: both leave it to records
        recs[0] = recs[0]._replace(headers=(Header("h", b"x"),))
    section = bytearray(b"".join(map(_encode_record, recs)))
    for at, value in flips:
        if section:
            section[at % len(section)] = value
    if cut and section:
        del section[-cut:]
    data = bytes(section) + tail
    count = max(len(recs) + miscount, 0)
    assert decoded(data, count) == reference(data, count)


@given(records, st.booleans(), st.sampled_from([1, 10**9]), st.integers(1, 30))
@settings(max_examples=150, deadline=None)
def test_the_edge_converts_columns_as_it_converts_records(
    rows: list, raw: bool, run_records_min: int, repeat: int
) -> None:
    """Produce: a batch decoded as columns appends the values the records would; Fetch:
    frames become the batch the per-record encoder makes (the columns assembled by runs
    of equal records as blocks, or by one gather: both forced)."""
    old = (columns.RUN_RECORDS_MIN, columns._GATHER_BYTES_MAX)
    columns.RUN_RECORDS_MIN = run_records_min
    columns._GATHER_BYTES_MAX = 64  # the gathers in chunks of a few rows
    try:
        edge_conversions(rows[:1] * repeat + rows, raw)
    finally:
        columns.RUN_RECORDS_MIN, columns._GATHER_BYTES_MAX = old


def edge_conversions(rows: list, raw: bool) -> None:
    recs = [(k if not raw else None, v, 1_700_000_000_000 + (t % 10**9), ()) for t, _, k, v in rows]
    if not recs:
        return
    data = encode_batch(batch_of(0, recs))
    by_records = decode_batch(data)
    by_columns = decode_batch(data, columnar=True)
    assert by_columns.columns is not None and by_columns.records == ()
    if raw and any(v is None for _, v, _, _ in recs):  # a tombstone: refused on raw topics
        for batch in (by_records, by_columns):
            with pytest.raises(InvalidRecordError):
                values_of(batch, envelope=False)
        return
    expected = values_of(by_records, envelope=not raw)
    assert values_of(by_columns, envelope=not raw) == expected
    if raw:
        return
    stored = frames.encode(5, expected)
    fetched = decode_batch(batch_of_frames(stored, envelope=True))
    assert [(r.key, r.value) for r in fetched.records] == [(k, v) for k, v, _, _ in recs]
    assert [fetched.base_timestamp + r.timestamp_delta for r in fetched.records] == [
        ts for _, _, ts, _ in recs
    ]
    assert (fetched.base_offset, fetched.last_offset) == (5, 5 + len(recs) - 1)
    assert isinstance(fetched, RecordBatch)


groups = st.lists(
    st.tuples(
        st.integers(1, 40),  # records in the group: equal keys and values, equally spaced
        blobs,
        blobs,
        st.integers(0, 5),  # bytes between one record's value and the next one's key
        st.integers(0, 3) | st.integers(0, 10**6),  # offset step
        st.integers(-3, 3) | st.integers(-(2**40), 2**40),  # timestamp step
    ),
    max_size=8,
)


@given(groups, st.sampled_from([1, 10**9]))
@settings(max_examples=100, deadline=None)
def test_spans_encode_the_bytes_the_per_record_encoder_does(
    spec: list, run_records_min: int
) -> None:
    """`encode_spans` (by runs of equal records as blocks, or by one gather: both forced)
    makes the section `_encode_record` makes, whatever the spacing and nulls."""
    buf = bytearray(b"\xee" * 3)
    recs: list[Record] = []
    spans: list[tuple[int, int, int, int]] = []
    offset, ts = 0, 0
    for count, key, value, gap, offset_step, ts_step in spec:
        for _ in range(count):
            buf += b"\xee" * gap
            spans.append((len(buf), -1 if key is None else len(key), 0, 0))
            buf += key or b""
            spans[-1] = (*spans[-1][:2], len(buf), -1 if value is None else len(value))
            buf += value or b""
            recs.append(Record(offset, ts, key, value))
            offset += offset_step
            ts += ts_step
    cols = np.array(spans, dtype=np.int64).reshape(-1, 4)
    old = (columns.RUN_RECORDS_MIN, columns._GATHER_BYTES_MAX)
    columns.RUN_RECORDS_MIN = run_records_min
    columns._GATHER_BYTES_MAX = 64  # the gathers in chunks of a few rows
    try:
        section = columns.encode_spans(
            bytes(buf),
            np.array([r.offset_delta for r in recs], dtype=np.int64),
            np.array([r.timestamp_delta for r in recs], dtype=np.int64),
            columns.Span(cols[:, 0], cols[:, 1]),
            columns.Span(cols[:, 2], cols[:, 3]),
        )
    finally:
        columns.RUN_RECORDS_MIN, columns._GATHER_BYTES_MAX = old
    assert section == b"".join(map(_encode_record, recs))


@given(
    st.lists(st.tuples(blobs, st.binary(max_size=30)), min_size=1, max_size=30),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    st.integers(0, 3),
)
@settings(max_examples=100, deadline=None)
def test_mangled_frames_are_refused_as_the_envelope_decoder_refuses_them(
    rows: list, flips: list, cut: int
) -> None:
    """Fetch: frames whose lengths or envelopes are mangled (not their offsets, which the
    log orders) are refused by `batch_of_frames` with the error `records.decode_frames`
    raises; what it accepts becomes the same records."""
    from replog import records as envelopes_mod

    values = envelopes_mod.encode_batch(
        [envelopes_mod.Record(v, key=k) for k, v in rows], 1_700_000_000_000
    )
    ends = np.cumsum([frames.HEADER_BYTES + len(v) for v in values])
    offset_bytes = {int(e) + i for e in [0, *ends[:-1]] for i in range(8)}
    buf = bytearray(frames.encode(3, values))
    for at, value in flips:
        if at % len(buf) not in offset_bytes:
            buf[at % len(buf)] = value
    data = bytes(buf[: len(buf) - cut])

    def outcome(decode: object) -> tuple[str, object]:
        try:
            return "ok", decode(data)  # type: ignore[operator]
        except (frames.FrameError, InvalidRecordError) as exc:
            return type(exc).__name__, None

    expected, decoded = outcome(envelopes_mod.decode_frames)
    got, batch = outcome(partial(batch_of_frames, envelope=True))
    assert got == expected
    if expected == "ok" and data:
        records = decode_batch(batch).records  # type: ignore[arg-type]
        assert [(r.key, r.value) for r in records] == [
            (k, b"" if v is None else v)
            for k, v in zip(decoded.keys, decoded.values, strict=True)  # type: ignore[union-attr]
        ]


@given(
    st.lists(st.tuples(st.integers(1, 200), blobs, blobs), min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 100_000), st.integers(0, 255)), max_size=2),
    st.integers(0, 2),
    st.integers(-2, 2),
)
@settings(max_examples=100, deadline=None)
def test_runs_of_equal_records_decode_as_the_per_record_decoder_decodes_them(
    groups: list, flips: list, cut: int, miscount: int
) -> None:
    """The length walk's galloping over runs of equally long records (`_starts`), on runs
    of equal records, mangled or not."""
    recs = [Record(0, 0, k, v) for count, k, v in groups for _ in range(count)]
    section = bytearray(b"".join(map(_encode_record, recs)))
    for at, value in flips:
        section[at % len(section)] = value
    data = bytes(section[: len(section) - cut])
    count = max(len(recs) + miscount, 0)
    assert decoded(data, count) == reference(data, count)
