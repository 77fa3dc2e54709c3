"""Kafka records <-> replog's records: the one translation between the two protocols' data.

Produce: a Kafka record batch v2 (decoded by `replog.kafka.records`, CRC and codec checked)
becomes one replog append of its records' values, in order:

* envelope topic: each record becomes one envelope (`replog.records`) with the Kafka
  record's key (null stays null), value (null: an empty value; replog has no tombstones),
  headers (a null header value: empty) and timestamp (`base_timestamp + timestamp_delta`);
* raw topic: each record's value as it is. A record with a key or headers is refused
  (INVALID_RECORD): a raw topic has nowhere to keep them, and dropping them would lose what
  the producer was told was written.

Fetch: the frames a replog read returns (`replog.frames`) become ONE uncompressed Kafka
batch whose `base_offset` is the first frame's offset and whose `last_offset_delta` reaches
the last frame's, so a client's next fetch offset passes every frame read. Data frames are
its records, at `offset_delta = offset - base_offset`; control frames (leader-epoch markers,
idempotent batch headers) take offsets and carry no record, so a client sees an offset gap
there, as it does on a compacted Kafka topic (a read of control frames only is a batch of
zero records, which clients skip over the same way). Envelope topics give each record its
key, headers and timestamp (create time); raw topics a null key, no headers, and the
leader's append time of the idempotent batch the record was written in (replog's batch
header, per record: the batch's timestamp type stays create time), -1 when none was.

Pure: no I/O.
"""

from __future__ import annotations

import numpy as np

from replog import frames, records
from replog.errors import InvalidRecordError
from replog.kafka.columns import RUN_RECORDS_MIN, Columns, Gen, Span, assemble, encode_spans
from replog.kafka.records import (
    Header,
    Record,
    RecordBatch,
    encode_batch,
)
from replog.replication.producers import decode_header

NO_TIMESTAMP = -1  # Kafka's "no timestamp"


def values_of(batch: RecordBatch, envelope: bool) -> list[bytes]:
    """The replog values to append for a Kafka batch (see the module doc)."""
    if batch.columns is not None:
        return _values_of_columns(batch.columns, batch.base_timestamp, envelope)
    if not envelope:
        out = []
        for r in batch.records:
            if r.key is not None or r.headers or r.value is None:
                raise InvalidRecordError(_RAW_REFUSED)
            out.append(r.value)
        return out
    base = batch.base_timestamp
    return [
        records.encode(
            r.value,
            key=r.key,
            headers=[(h.key, h.value or b"") for h in r.headers],
            timestamp_ms=base + r.timestamp_delta,
        )
        for r in batch.records
    ]


_RAW_REFUSED = (
    "a raw topic keeps values only: a record with a key, headers or a null value (a "
    "tombstone) needs an envelope topic (create it through Kafka's CreateTopics or with "
    "--format envelope)"
)


def _values_of_columns(cols: Columns, base_timestamp: int, envelope: bool) -> list[bytes]:
    """`values_of` for a batch decoded as columns (no headers): the envelopes' fixed parts
    as one numpy array, each envelope one C-level join of its fixed part, key and value."""
    if not envelope:
        if (cols.key_lengths >= 0).any() or (cols.value_lengths < 0).any():
            raise InvalidRecordError(_RAW_REFUSED)
        return cols.values_or_empty()
    n = len(cols)
    if n:
        lo = base_timestamp + int(cols.timestamp_deltas.min())
        hi = base_timestamp + int(cols.timestamp_deltas.max())
        if lo < records.TIMESTAMP_MIN or hi > records.TIMESTAMP_MAX:
            raise InvalidRecordError("a record's timestamp does not fit in an i64")
    fixed = np.zeros(n, dtype=records.FIXED_DTYPE)
    fixed["version"] = records.VERSION
    fixed["attributes"] = (cols.key_lengths >= 0) * records.ATTR_KEY | (
        cols.value_lengths < 0
    ) * records.ATTR_NULL_VALUE
    fixed["ts"] = cols.timestamp_deltas + base_timestamp
    key_bytes = np.maximum(cols.key_lengths, 0)
    value_bytes = np.maximum(cols.value_lengths, 0)
    fixed["key_length"] = key_bytes
    fixed["value_length"] = value_bytes
    heads = Gen(
        fixed.view(np.uint8).reshape(n, records.FIXED_BYTES), np.full(n, records.FIXED_BYTES)
    )
    out, sizes = assemble(
        cols.payload,
        [heads, Span(cols.key_starts, key_bytes), Span(cols.value_starts, value_bytes)],
    )
    return cut(out.tobytes(), sizes)


def cut(flat: bytes, sizes: np.ndarray) -> list[bytes]:
    """`flat` cut into one `bytes` of each size (sizes > 0, summing to its length): a run
    of equal sizes by numpy (its rows as a void array, `tolist`: the bytes made in C, half
    the time of a slice each), many shapes by a slice each."""
    n = len(sizes)
    if n == 0:
        return []
    cuts = (np.flatnonzero(sizes[1:] != sizes[:-1]) + 1).tolist()
    if len(cuts) * RUN_RECORDS_MIN > n:
        ends = np.cumsum(sizes).tolist()
        return [flat[start:end] for start, end in zip([0, *ends[:-1]], ends, strict=True)]
    out: list[bytes] = []
    at = 0
    for first, end in zip([0, *cuts], [*cuts, n], strict=True):
        size = int(sizes[first])
        assert size > 0, "an envelope is never empty"
        rows = np.frombuffer(flat, dtype=f"V{size}", count=end - first, offset=at)
        out += rows.tolist()
        at += size * (end - first)
    assert at == len(flat), "the sizes cover the bytes"
    return out


def batch_of_frames(data: bytes, envelope: bool, leader_epoch: int = -1) -> bytes:
    """One Kafka batch (bytes) holding the frames `data` (b"" for no frames)."""
    if envelope:  # the envelopes as spans of `data` (control records skipped)
        spans = records.envelope_spans(data)
        if not spans.header_counts.any():  # the usual case: one columnar encoding
            return b"" if not data else _batch_of_spans(data, spans, leader_epoch)
    decoded = frames.decode(data)
    if not decoded.offsets:
        return b""
    base = decoded.offsets[0]
    last = decoded.offsets[-1]
    if envelope:  # envelopes with headers: a Record each
        env = records.decode_frames(data)
        times = env.timestamps
        out = [
            Record(offset - base, 0, key, value, tuple(Header(n, v) for n, v in heads))
            for offset, key, value, heads in zip(
                env.offsets, env.keys, env.values, env.headers, strict=True
            )
        ]
    else:
        out, times = _raw_records(decoded, base)
    base_ts = min(times) if times else NO_TIMESTAMP
    recs = tuple(r._replace(timestamp_delta=t - base_ts) for r, t in zip(out, times, strict=True))
    batch = RecordBatch(
        base_offset=base,
        records=recs,
        base_timestamp=base_ts,
        max_timestamp=max(times) if times else NO_TIMESTAMP,
        last_offset_delta=last - base,
        partition_leader_epoch=leader_epoch,
    )
    return encode_batch(batch)


def _batch_of_spans(data: bytes, spans: records.EnvelopeSpans, leader_epoch: int) -> bytes:
    """`batch_of_frames` of envelopes without headers: one columnar encoding from the
    frames' bytes. Its offsets reach the first and last frames', control ones included."""
    base = int(frames.HEADER.unpack_from(data)[0])
    last = frames.next_offset(data, base) - 1
    times = spans.timestamps
    n = len(times)
    base_ts = int(times.min()) if n else NO_TIMESTAMP
    section = encode_spans(
        data,
        spans.offsets - base,
        times - base_ts,
        Span(spans.key_starts, spans.key_lengths),
        Span(spans.value_starts, spans.value_lengths),
    )
    batch = RecordBatch(
        base_offset=base,
        records=(),
        base_timestamp=base_ts,
        max_timestamp=int(times.max()) if n else NO_TIMESTAMP,
        last_offset_delta=last - base,
        partition_leader_epoch=leader_epoch,
        records_count=n,
    )
    return encode_batch(batch, section)


def _raw_records(decoded: frames.DecodedFrames, base: int) -> tuple[list[Record], list[int]]:
    """A raw topic's records (null keys) and their times: the append time of the
    idempotent batch header before them, NO_TIMESTAMP before any."""
    control = decoded.control or [False] * len(decoded.offsets)
    out: list[Record] = []
    times: list[int] = []
    append_time = NO_TIMESTAMP
    for offset, value, is_control in zip(decoded.offsets, decoded.values, control, strict=True):
        if is_control:
            header = decode_header(value)
            if header is not None:
                append_time = header.timestamp_ms
            continue
        out.append(Record(offset - base, 0, None, value))
        times.append(append_time)
    return out, times
