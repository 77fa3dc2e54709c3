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

Frames are `[offset u64 BE][length u32 BE, bit 31 = control][value]` (replog.frames). A run of
equally sized frames (the common case) is decoded with numpy reshapes alone; a mixed run walks
the headers once (`replog.frames.scan`) and then gathers the value bytes with numpy. Control
records are dropped.

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


def _columns(buf: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(offsets int64, value starts, value lengths, control mask) of every frame in `buf`."""
    data = np.frombuffer(buf, dtype=np.uint8)
    first_len = int.from_bytes(buf[8:12], "big")
    size = _HEADER + (first_len & frames.LENGTH_MASK)
    if first_len == size - _HEADER and len(buf) % size == 0:
        rows = data.reshape(-1, size)
        lengths_raw = rows[:, 8:12].copy().view(_BE_U32).ravel()
        if bool((lengths_raw == first_len).all()):
            count = rows.shape[0]
            offsets = rows[:, :8].copy().view(_BE_U64).ravel().astype(np.int64)
            starts = np.arange(count, dtype=np.int64) * size + _HEADER
            lengths = np.full(count, first_len, dtype=np.int64)
            return offsets, starts, lengths, np.zeros(count, dtype=bool)
    ends = np.asarray(frames.scan(buf), dtype=np.int64)
    positions = np.concatenate(([0], ends[:-1]))
    header_idx = positions[:, None] + np.arange(_HEADER)
    headers = data[header_idx]  # (n, 12)
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
    offsets, starts, lengths, control = _columns(buf)
    if control.any():
        keep = ~control
        offsets, starts, lengths = offsets[keep], starts[keep], lengths[keep]
    count = len(offsets)
    data = np.frombuffer(buf, dtype=np.uint8)
    value_offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(lengths, out=value_offsets[1:])
    uniform = (
        count and int(starts[0]) == _HEADER and len(buf) == count * (_HEADER + int(lengths[0]))
    )
    if uniform and bool((lengths == lengths[0]).all()):
        values = data.reshape(count, -1)[:, _HEADER:].ravel()  # one strided copy
    elif count and bool((starts[1:] - starts[:-1] == lengths[:-1] + _HEADER).all()):
        # Contiguous frames: drop the 12 header bytes in front of each value with one mask.
        mask = np.ones(len(data), dtype=bool)
        first = int(starts[0]) - _HEADER
        mask[:first] = False
        last = int(starts[-1] + lengths[-1])
        mask[last:] = False
        mask[(starts[:, None] - _HEADER + np.arange(_HEADER)).ravel()] = False
        values = data[mask]
    else:
        pieces = [data[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)]
        values = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint8)
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
