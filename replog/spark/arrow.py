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

Today a record is its value only: `key`, `timestamp`, `timestampType` and `headers` are null
(Kafka's types, so jobs written for Kafka run unchanged). All decoding of a record happens in
one function, `frames_to_record_batch`: when records carry an envelope with key, timestamp
and headers (issue 13), it decodes them there, per the topic's format, and nothing else in
the source changes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from replog import frames

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
    slice; frames walked one by one have their values gathered with a byte mask."""
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
        starts, n = starts[keep], n[keep]
        # +1 where a kept value starts, -1 where it ends: the running sum marks value bytes.
        edges = np.zeros(len(data) + 1, dtype=np.int8)
        edges[starts] = 1
        edges[starts + n] -= 1
        offsets.append(o[keep])
        lengths.append(n)
        values.append(data[np.cumsum(edges[:-1], dtype=np.int8).view(bool)])
    if len(offsets) == 1:
        return offsets[0], lengths[0], values[0]
    if not offsets:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint8)
    return np.concatenate(offsets), np.concatenate(lengths), np.concatenate(values)


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
    buf: bytes, topic: str, partition: int, include_headers: bool = False
) -> pa.RecordBatch:
    """A record batch of the data records in `buf` (whole frames), control records dropped:
    the one place where a stored record becomes Spark's columns (see the module docstring)."""
    schema = arrow_schema(include_headers)
    if not buf:
        return _empty(schema)
    offsets, lengths, values = _records(buf)
    count = len(offsets)
    value_offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(lengths, out=value_offsets[1:])
    value_array = pa.Array.from_buffers(
        pa.binary(), count, [None, pa.py_buffer(value_offsets), pa.py_buffer(values)]
    )
    # The raw format has no key, timestamp or headers: null columns of Kafka's types.
    columns = [
        pa.nulls(count, pa.binary()),
        value_array,
        _constant_string(topic, count),
        pa.array(np.full(count, partition, dtype=np.int32)),
        pa.array(offsets),
        pa.nulls(count, TIMESTAMP_TYPE),
        pa.nulls(count, pa.int32()),
    ]
    if include_headers:
        columns.append(pa.nulls(count, HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)
