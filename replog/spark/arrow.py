"""Raw frames -> Arrow record batches for Spark, without a Python object per record.

The Spark schema is Spark's Kafka source's, column for column, with its exact Arrow twin::

    key            binary     -> pa.binary()      (not large_binary: Spark rejects it)
    value          binary     -> pa.binary()
    topic          string     -> pa.string()
    partition      int        -> pa.int32()
    offset         bigint     -> pa.int64()
    timestamp      timestamp  -> pa.timestamp("us", tz="UTC")
    timestampType  int        -> pa.int32()       (Kafka: 0 CreateTime, 1 LogAppendTime)
    headers        array<struct<key:string,value:binary>>   (only with includeHeaders=true)

Frames are `[offset u64 BE][length u32 BE, bit 31 = control][value]` (replog.frames). The
decoder follows runs of equally sized, equally flagged frames with numpy (a whole run is one
strided copy), so records split now and then by control records (a producer's batch header
before each batch, a leader's epoch marker) cost little more than a reply without them;
when the frames vary so much that runs are short, it walks the headers once
(`replog.frames.scan`) and gathers the values with a byte mask. Control records are dropped.

A topic's format decides the other columns (`RecordFormat`, from the topic's metadata):

* `raw` (the value is the producer's bytes): `key`, `timestamp`, `timestampType` and
  `headers` are null;
* `envelope` (`replog.records`: key, value, timestamp, headers): the envelope's fields, the
  timestamp in microseconds (null when outside Spark's range), `timestampType` the topic's
  (0 create time, 1 log-append time), `headers` null for a record without headers (as in
  Kafka's source). Runs of envelopes without key and headers (the usual batch) are decoded
  with numpy alone; any other envelope goes through `replog.records.decode_frames`, which
  also refuses malformed ones.

All decoding of a stored record into Spark's columns happens in one function,
`frames_to_record_batch`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
import pyarrow as pa

from replog import frames, records

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

_COLUMNS = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "timestamp timestamp, timestampType int"
)
_HEADERS_DDL = "headers array<struct<key:string,value:binary>>"


def spark_schema_ddl(include_headers: bool) -> str:
    """The source's schema as Spark DDL (Kafka's, `headers` only with includeHeaders)."""
    return f"{_COLUMNS}, {_HEADERS_DDL}" if include_headers else _COLUMNS


ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
)
ARROW_SCHEMA_WITH_HEADERS = ARROW_SCHEMA.append(pa.field("headers", HEADERS_TYPE))


def arrow_schema(include_headers: bool) -> pa.Schema:
    return ARROW_SCHEMA_WITH_HEADERS if include_headers else ARROW_SCHEMA


CREATE_TIME = 0  # Kafka's timestampType values
LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True)
class RecordFormat:
    """What a topic's frames hold: raw values, or envelopes stamped with create time or
    log-append time. Plain fields: travels in a task's partition."""

    envelope: bool = False
    timestamp_type: int = CREATE_TIME


RAW = RecordFormat()


_HEADER = frames.HEADER_BYTES
_BE_U64 = np.dtype(">u8")
_BE_U32 = np.dtype(">u4")


def _constant_string(text: str, count: int) -> pa.Array:
    raw = text.encode()
    offsets = np.arange(count + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.Array.from_buffers(
        pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(raw * count)]
    )


_RUN_PROBE = 16  # frames checked at once when following a run of equally sized frames
# After this many runs averaging fewer than _RUN_FRAMES_MIN frames, the frames vary too much
# for runs to pay (each costs a few numpy calls): the rest is walked frame by frame.
_RUNS_BEFORE_FALLBACK = 16
_RUN_FRAMES_MIN = 4


def _runs(buf: bytes, data: np.ndarray) -> tuple[list[tuple[int, int, int, int]], int]:
    """Runs of equally sized, equally flagged frames: `(position, count, frame bytes, raw
    length)` each, and where the walk stopped (`len(buf)`, or earlier when the frames turned
    out to vary too much for runs to pay: the caller walks the rest frame by frame).

    Each run costs a few numpy calls whatever its length, so a reply of equal records split
    by a control record now and then (a producer's batch header, a leader's epoch marker)
    decodes nearly as fast as one without."""
    size = len(buf)
    runs: list[tuple[int, int, int, int]] = []
    pos = seen = 0
    while pos < size:
        if len(runs) >= _RUNS_BEFORE_FALLBACK and seen < len(runs) * _RUN_FRAMES_MIN:
            break
        if pos + _HEADER > size:
            raise frames.FrameError("truncated frame header", pos)
        raw_len = int.from_bytes(buf[pos + 8 : pos + 12], "big")
        frame = _HEADER + (raw_len & frames.LENGTH_MASK)
        fits = (size - pos) // frame
        if fits < 1:
            raise frames.FrameError("truncated frame", pos)
        count, probe = 1, _RUN_PROBE
        while count < fits:
            k = min(probe, fits - count)
            at = pos + count * frame
            lengths = data[at : at + k * frame].reshape(k, frame)[:, 8:12].copy().view(_BE_U32)
            other = np.flatnonzero(lengths.ravel() != raw_len)
            if other.size:
                count += int(other[0])
                break
            count += k
            probe *= 2
        runs.append((pos, count, frame, raw_len))
        pos += count * frame
        seen += count
    return runs, pos


def _records(buf: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets int64, value lengths int64, value bytes uint8) of the data records in `buf`;
    control records dropped. A run of equally sized frames is copied out with one strided
    slice; frames walked one by one have their values joined in one C-level pass."""
    data = np.frombuffer(buf, dtype=np.uint8)
    runs, walked = _runs(buf, data)
    offsets: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    values: list[np.ndarray] = []
    for pos, count, frame, raw_len in runs:
        if raw_len & frames.CONTROL_FLAG:
            continue
        rows = data[pos : pos + count * frame].reshape(count, frame)
        offsets.append(rows[:, :8].copy().view(_BE_U64).ravel().astype(np.int64))
        lengths.append(np.full(count, frame - _HEADER, dtype=np.int64))
        values.append(rows[:, _HEADER:].ravel())
    if walked < len(buf):
        o, starts, n, control = _walk(buf, data, walked)
        keep = ~control
        offsets.append(o[keep])
        lengths.append(n[keep])
        values.append(np.frombuffer(_gather(buf, starts[keep], n[keep]), dtype=np.uint8))
    if len(offsets) == 1:
        return offsets[0], lengths[0], values[0]
    if not offsets:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint8)
    return np.concatenate(offsets), np.concatenate(lengths), np.concatenate(values)


def _gather(buf: bytes, starts: np.ndarray, lengths: np.ndarray) -> bytes:
    """The byte ranges `[start, start + length)` of `buf`, back to back."""
    return b"".join(map(buf.__getitem__, map(slice, starts.tolist(), (starts + lengths).tolist())))


def _data_spans(
    buf: bytes, data: np.ndarray, runs: list[tuple[int, int, int, int]], walked: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, value starts, value lengths) of the data frames in `buf` (`_runs`' answer)."""
    parts = [
        (
            data[pos : pos + count * frame]
            .reshape(count, frame)[:, :8]
            .copy()
            .view(_BE_U64)
            .ravel(),
            np.arange(count, dtype=np.int64) * frame + (pos + _HEADER),
            np.full(count, frame - _HEADER, dtype=np.int64),
        )
        for pos, count, frame, raw_len in runs
        if not raw_len & frames.CONTROL_FLAG
    ]
    if walked < len(buf):
        o, starts, n, control = _walk(buf, data, walked)
        keep = ~control
        parts.append((o[keep], starts[keep], n[keep]))
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    offsets, starts_, lengths = (np.concatenate(column) for column in zip(*parts, strict=True))
    return offsets.astype(np.int64), starts_, lengths


def _walk(
    buf: bytes, data: np.ndarray, pos: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, value starts, value lengths, control mask) of the frames from `pos` on,
    walking their headers one by one."""
    ends = np.asarray(frames.scan(memoryview(buf)[pos:]), dtype=np.int64) + pos
    positions = np.concatenate(([pos], ends[:-1]))
    headers = data[positions[:, None] + np.arange(_HEADER)]  # (n, 12)
    offsets = headers[:, :8].copy().view(_BE_U64).ravel().astype(np.int64)
    raw_len = headers[:, 8:12].copy().view(_BE_U32).ravel()
    control = (raw_len & np.uint32(frames.CONTROL_FLAG)) != 0
    return offsets, positions + _HEADER, ends - positions - _HEADER, control


def frames_to_record_batch(
    buf: bytes,
    topic: str,
    partition: int,
    include_headers: bool = False,
    fmt: RecordFormat = RAW,
) -> pa.RecordBatch:
    """A record batch of the data records in `buf` (whole frames), control records dropped:
    the one place where a stored record becomes Spark's columns (see the module docstring)."""
    schema = arrow_schema(include_headers)
    if not buf:
        return _empty(schema)
    if fmt.envelope:
        offsets, key, value, stamps, headers = _envelopes(buf, include_headers)
        count = len(offsets)
        timestamp = _timestamps(stamps)
        timestamp_type = pa.array(np.full(count, fmt.timestamp_type, dtype=np.int32))
    else:
        # The raw format has no key, timestamp or headers: null columns of Kafka's types.
        offsets, lengths, values = _records(buf)
        count = len(offsets)
        key = pa.nulls(count, pa.binary())
        value = _binary_array(lengths, values)
        timestamp = pa.nulls(count, TIMESTAMP_TYPE)
        timestamp_type = pa.nulls(count, pa.int32())
        headers = None
    columns = [
        key,
        value,
        _constant_string(topic, count),
        pa.array(np.full(count, partition, dtype=np.int32)),
        pa.array(offsets),
        timestamp,
        timestamp_type,
    ]
    if include_headers:
        columns.append(pa.nulls(count, HEADERS_TYPE) if headers is None else headers)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _binary_array(
    lengths: np.ndarray, values: np.ndarray | bytes, valid: np.ndarray | None = None
) -> pa.Array:
    """A binary array from value lengths and the values back to back (`valid`: None when
    every value is present)."""
    count = len(lengths)
    value_offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(lengths, out=value_offsets[1:])
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.binary(), count, [bitmap, pa.py_buffer(value_offsets), pa.py_buffer(values)]
    )


# The fixed part at the start of every envelope, as `replog.records` (its owner) reads it:
# version, attributes, ts, key_length, count, value_length.
_ENVELOPE_FIXED = records.FIXED_DTYPE
assert _ENVELOPE_FIXED.itemsize == records.FIXED_BYTES
_TIMESTAMP_MS_MAX = (2**63 - 1) // 1000  # past it, microseconds overflow Spark's int64

Envelopes = tuple[np.ndarray, pa.Array, pa.Array, np.ndarray, pa.Array | None]
# Up to this many runs, envelopes are checked and copied run by run (strided copies); past
# it, the numpy calls per run cost more than checking all envelopes at once and joining
# their keys and values (`_envelopes_without_headers`).
_UNIFORM_RUNS_MAX = 16


def _envelopes(buf: bytes, include_headers: bool) -> Envelopes:
    """(offsets, key, value, timestamps in ms, headers or None) of an envelope topic's data
    records: with numpy alone unless a record has headers (or is malformed, which
    `records.decode_frames` then says)."""
    data = np.frombuffer(buf, dtype=np.uint8)
    runs, walked = _runs(buf, data)
    if walked == len(buf) and len(runs) <= _UNIFORM_RUNS_MAX:
        uniform = _uniform_envelopes(data, runs)
        if uniform is not None:
            return uniform
    headerless = _envelopes_without_headers(buf, data, *_data_spans(buf, data, runs, walked))
    if headerless is not None:
        return headerless
    decoded = records.decode_frames(buf)
    count = len(decoded)
    value = _nullable_binary(decoded.values, count)  # None: a tombstone's null value
    keys = decoded.keys
    if all(k is None for k in keys):
        key = pa.nulls(count, pa.binary())
    else:
        key = _nullable_binary(keys, count)
    headers = None
    if include_headers:
        headers = pa.array(
            [[{"key": n, "value": v} for n, v in h] if h else None for h in decoded.headers],
            type=HEADERS_TYPE,
        )
    stamps = np.array(decoded.timestamps, dtype=np.int64)
    return np.array(decoded.offsets, dtype=np.int64), key, value, stamps, headers


def _nullable_binary(items: list[bytes | None], count: int) -> pa.Array:
    """A binary column of `items`, None as null (keys; values of tombstones)."""
    if None not in items:
        present = cast(list[bytes], items)
        lengths = np.fromiter(map(len, present), dtype=np.int64, count=count)
        return _binary_array(lengths, b"".join(present))
    valid = np.fromiter((k is not None for k in items), dtype=bool, count=count)
    filled = [k if k is not None else b"" for k in items]
    lengths = np.fromiter(map(len, filled), dtype=np.int64, count=count)
    return _binary_array(lengths, b"".join(filled), valid)


def _uniform_envelopes(data: np.ndarray, runs: list[tuple[int, int, int, int]]) -> Envelopes | None:
    """The columns when, within each run of equal frames, the envelopes have no headers and
    the same key length (or none): a producer's usual batch, keyed or not. Keys and values
    are then strided copies, run by run; None when the runs are not like that."""
    fixed_bytes = records.FIXED_BYTES
    offsets: list[np.ndarray] = []
    stamps: list[np.ndarray] = []
    key_parts: list[tuple[int, bool, np.ndarray]] = []  # (key length, has key, bytes) per run
    value_lengths: list[np.ndarray] = []
    values: list[np.ndarray] = []
    for pos, count, frame, raw_len in runs:
        if raw_len & frames.CONTROL_FLAG:
            continue
        if frame - _HEADER < fixed_bytes:
            return None  # too short for an envelope: let records.decode_frames say so
        rows = data[pos : pos + count * frame].reshape(count, frame)
        fixed = rows[:, _HEADER : _HEADER + fixed_bytes].copy().view(_ENVELOPE_FIXED).ravel()
        attributes = int(fixed["attributes"][0])
        key_length = int(fixed["key_length"][0])
        length = frame - _HEADER - fixed_bytes - key_length
        if not (
            attributes in (0, records.ATTR_KEY)
            and (key_length == 0 or attributes == records.ATTR_KEY)
            and length >= 0
            and (fixed["version"] == records.VERSION).all()
            and (fixed["attributes"] == attributes).all()
            and (fixed["key_length"] == key_length).all()
            and not fixed["count"].any()
            and (fixed["value_length"] == length).all()
        ):
            return None
        key_at = _HEADER + fixed_bytes
        offsets.append(rows[:, :8].copy().view(_BE_U64).ravel().astype(np.int64))
        stamps.append(fixed["ts"].astype(np.int64))
        key_parts.append((key_length, bool(attributes), rows[:, key_at : key_at + key_length]))
        value_lengths.append(np.full(count, length, dtype=np.int64))
        values.append(rows[:, key_at + key_length :].ravel())
    if not offsets:
        empty = np.zeros(0, dtype=np.int64)
        return empty, pa.nulls(0, pa.binary()), _binary_array(empty, b""), empty, None
    lengths = np.concatenate(value_lengths)
    count = len(lengths)
    value = _binary_array(lengths, np.concatenate(values))
    if not any(has for _, has, _ in key_parts):
        key = pa.nulls(count, pa.binary())
    else:
        has_key = np.concatenate([np.full(len(k), has) for _, has, k in key_parts])
        key_lengths = np.concatenate([np.full(len(k), n, dtype=np.int64) for n, _, k in key_parts])
        keys = np.concatenate([k.ravel() for _, _, k in key_parts])
        key = _binary_array(key_lengths, keys, None if has_key.all() else has_key)
    return np.concatenate(offsets), key, value, np.concatenate(stamps), None


def _envelopes_without_headers(
    buf: bytes, data: np.ndarray, offsets: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> Envelopes | None:
    """The columns of envelopes with or without keys but without headers, at the given value
    spans (any sizes); None when one has headers or does not check out."""
    fixed_bytes = records.FIXED_BYTES
    if not len(starts) or (lengths < fixed_bytes).any():
        return None
    fixed = data[starts[:, None] + np.arange(fixed_bytes)].view(_ENVELOPE_FIXED).ravel()
    attributes = fixed["attributes"]
    has_key = (attributes & records.ATTR_KEY).astype(bool)
    key_lengths = fixed["key_length"].astype(np.int64)
    value_lengths = fixed["value_length"].astype(np.int64)
    if not (
        (fixed["version"] == records.VERSION).all()
        and not (attributes & ~np.uint8(records.ATTR_KEY)).any()
        and not fixed["count"].any()
        and not key_lengths[~has_key].any()
        and (fixed_bytes + key_lengths + value_lengths == lengths).all()
    ):
        return None
    value_starts = starts + lengths - value_lengths
    value = _binary_array(value_lengths, _gather(buf, value_starts, value_lengths))
    if not has_key.any():
        key = pa.nulls(len(starts), pa.binary())
    else:
        keys = _gather(buf, starts + fixed_bytes, key_lengths)
        key = _binary_array(key_lengths, keys, None if has_key.all() else has_key)
    return offsets, key, value, fixed["ts"].astype(np.int64), None


def _timestamps(ms: np.ndarray) -> pa.Array:
    """Milliseconds -> Spark's timestamps (microseconds, UTC); null where they overflow."""
    valid = np.abs(ms) <= _TIMESTAMP_MS_MAX
    micros = np.where(valid, ms, 0) * 1000
    bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(TIMESTAMP_TYPE, len(ms), [bitmap, pa.py_buffer(micros)])


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)
