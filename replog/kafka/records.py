"""Kafka record batches (magic v2), the unit of Produce requests and Fetch responses.

A batch, byte by byte (big-endian; Kafka's "Message Format" documentation)::

    base_offset              int64
    batch_length             int32   bytes after this field (>= 49)
    partition_leader_epoch   int32
    magic                    int8    2
    crc                      uint32  CRC-32C (Castagnoli) of every byte from attributes to
                                     the end of the batch
    attributes               int16   bits 0-2 compression (0 none, 1 gzip, 2 snappy, 3 lz4,
                                     4 zstd), bit 3 timestamp type (1: log append time),
                                     bit 4 transactional, bit 5 control, bit 6 delete horizon
    last_offset_delta        int32
    base_timestamp           int64
    max_timestamp            int64
    producer_id              int64   -1 without an idempotent producer
    producer_epoch           int16
    base_sequence            int32
    records_count            int32
    records                  records_count records, compressed as one block by the codec

A record (lengths and deltas are zigzag varints, `replog.kafka.primitives`)::

    length varint (bytes after it), attributes int8 (unused, 0), timestamp_delta varlong,
    offset_delta varint, key_length varint (-1: null), key, value_length varint (-1: null),
    value, headers_count varint, then per header: key_length varint, key (UTF-8, not
    null), value_length varint (-1: null), value

Decoding checks the batch length against the bytes there, the magic, the CRC, the
compression codec, decompresses within `decompressed_bytes_max`, and requires the records
to fill the (decompressed) section exactly and to number `records_count`. Every failure is a
`KafkaDecodeError` (`CorruptRecordBatchError` for corruption).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

import google_crc32c

from replog.kafka.columns import Columns, decode_columns
from replog.kafka.compression import Compression, compress, compression_of, decompress
from replog.kafka.errors import CorruptRecordBatchError, KafkaDecodeError

BATCH_HEADER_BYTES: Final = 61
_LENGTH_OFFSET: Final = 8  # batch_length follows base_offset
_CRC_OFFSET: Final = 17
_ATTRIBUTES_OFFSET: Final = 21  # the CRC covers attributes .. end
_HEAD: Final = struct.Struct(">qiibI")  # base_offset .. crc
_BODY: Final = struct.Struct(">hiqqqhii")  # attributes .. records_count
# Kafka's own limit on a batch is message.max.bytes (1 MiB by default); a decoded record
# costs ~15x its wire bytes in Python objects, so the listener passes its own limit.
DECOMPRESSED_BYTES_MAX_DEFAULT: Final = 8 * 1024 * 1024

TIMESTAMP_LOG_APPEND: Final = 0x08
TRANSACTIONAL: Final = 0x10
CONTROL: Final = 0x20
DELETE_HORIZON: Final = 0x40


class Header(NamedTuple):
    key: str
    value: bytes | None


class Record(NamedTuple):
    """One record of a batch (a named tuple: decoding builds thousands per batch)."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    attributes: int = 0


@dataclass(frozen=True, slots=True)
class RecordBatch:
    base_offset: int
    records: tuple[Record, ...]
    base_timestamp: int
    max_timestamp: int
    attributes: int = 0
    last_offset_delta: int = 0
    partition_leader_epoch: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    records_count: int = field(default=-1, compare=False)  # -1: len(records)
    # decode_batch(columnar=True) of records without headers: the records as columns
    # (`records` is then empty), read without a Python object per record
    columns: Columns | None = field(default=None, compare=False)

    @property
    def compression(self) -> Compression:
        return compression_of(self.attributes)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_LOG_APPEND)

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL)

    @property
    def control(self) -> bool:
        return bool(self.attributes & CONTROL)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


def batch_of(
    base_offset: int,
    records: Sequence[tuple[bytes | None, bytes | None, int, Sequence[Header]]],
    *,
    compression: Compression = Compression.NONE,
    **header: Any,
) -> RecordBatch:
    """A batch of (key, value, timestamp_ms, headers) at consecutive offsets, with the
    deltas, timestamps and last offset delta computed; `header` sets the other fields."""
    assert records, "a record batch holds at least one record"
    base_ts = min(r[2] for r in records)
    recs = tuple(
        Record(i, ts - base_ts, key, value, tuple(hs))
        for i, (key, value, ts, hs) in enumerate(records)
    )
    attributes = (header.pop("attributes", 0) & ~0x07) | int(compression)
    return RecordBatch(
        base_offset=base_offset,
        records=recs,
        base_timestamp=base_ts,
        max_timestamp=max(r[2] for r in records),
        attributes=attributes,
        last_offset_delta=len(records) - 1,
        **header,
    )


# --- encoding ----------------------------------------------------------------------------


def _uvarint(u: int) -> bytes:
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


_SMALL = [_uvarint(u) for u in range(1 << 14)]  # the unsigned varints of two bytes or less


def _zigzag_bytes(n: int) -> bytes:
    """`n` (a 64-bit signed value) as a zigzag varint."""
    u = (n << 1) ^ (n >> 63)
    return _SMALL[u] if u < 16384 else _uvarint(u)


_NULL = _zigzag_bytes(-1)


def _encode_record(r: Record) -> bytes:
    """One record's bytes, its length prefix included (the hot path of Fetch responses:
    joined parts, small varints from a table)."""
    zz = _zigzag_bytes
    parts = [bytes((r.attributes & 0xFF,)), zz(r.timestamp_delta), zz(r.offset_delta)]
    for blob in (r.key, r.value):
        if blob is None:
            parts.append(_NULL)
        else:
            parts += (zz(len(blob)), blob)
    parts.append(zz(len(r.headers)))
    for h in r.headers:
        key = h.key.encode()
        parts += (zz(len(key)), key)
        if h.value is None:
            parts.append(_NULL)
        else:
            parts += (zz(len(h.value)), h.value)
    body = b"".join(parts)
    return zz(len(body)) + body


def encode_batch(batch: RecordBatch, section: bytes | None = None) -> bytes:
    """The batch's bytes, its records compressed by the codec its attributes name.
    `section`: the records already encoded (`columns.encode_columns`), `records_count` of
    them; `batch.records` is then not read."""
    if section is None:
        section = b"".join(map(_encode_record, batch.records))
    payload = compress(batch.compression, section)
    count = len(batch.records) if batch.records_count < 0 else batch.records_count
    body = _BODY.pack(
        batch.attributes,
        batch.last_offset_delta,
        batch.base_timestamp,
        batch.max_timestamp,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        count,
    )
    crc = google_crc32c.extend(google_crc32c.value(body), payload)
    length = len(body) + len(payload) + (BATCH_HEADER_BYTES - _LENGTH_OFFSET - 4 - _BODY.size)
    head = _HEAD.pack(batch.base_offset, length, batch.partition_leader_epoch, 2, crc)
    return head + body + payload


# --- decoding ----------------------------------------------------------------------------


def _zigzag(buf: bytes, pos: int, end: int, max_bytes: int = 5) -> tuple[int, int]:
    """The zigzag varint at `pos` (at most `max_bytes` bytes, never past `end`) and the
    position after it."""
    if pos >= end:
        raise KafkaDecodeError("truncated varint in a record", position=pos)
    byte = buf[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    raw = byte & 0x7F
    shift = 7
    for i in range(1, max_bytes):
        if pos + i >= end:
            raise KafkaDecodeError("truncated varint in a record", position=pos)
        byte = buf[pos + i]
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            if raw >> (32 if max_bytes == 5 else 64):
                raise KafkaDecodeError("varint out of range in a record", position=pos)
            return (raw >> 1) ^ -(raw & 1), pos + i + 1
        shift += 7
    raise KafkaDecodeError(f"varint longer than {max_bytes} bytes in a record", position=pos)


def _blob(buf: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    n, pos = _zigzag(buf, pos, end)
    if n == -1:
        return None, pos
    if n < -1 or n > end - pos:
        raise KafkaDecodeError(f"record {what} of {n} bytes in {end - pos}", position=pos)
    return buf[pos : pos + n], pos + n


def _decode_records(buf: bytes, count: int) -> tuple[Record, ...]:
    """`count` records filling `buf` exactly (one function, local varints: the hot path)."""
    if count < 0 or count > len(buf):
        raise CorruptRecordBatchError(f"{count} records in {len(buf)} bytes")
    out = []
    pos, end = 0, len(buf)
    for _ in range(count):
        length, pos = _zigzag(buf, pos, end)
        if length < 1 or length > end - pos:
            raise KafkaDecodeError(f"record of {length} bytes in {end - pos}", position=pos)
        stop = pos + length
        attributes = buf[pos]
        timestamp_delta, pos = _zigzag(buf, pos + 1, stop, 10)
        offset_delta, pos = _zigzag(buf, pos, stop)
        key, pos = _blob(buf, pos, stop, "key")
        value, pos = _blob(buf, pos, stop, "value")
        n_headers, pos = _zigzag(buf, pos, stop)
        if n_headers < 0 or n_headers > stop - pos:
            raise KafkaDecodeError(f"{n_headers} headers in {stop - pos} bytes", position=pos)
        headers = []
        for _ in range(n_headers):
            hkey, pos = _blob(buf, pos, stop, "header key")
            if hkey is None:
                raise KafkaDecodeError("null header key", position=pos)
            hvalue, pos = _blob(buf, pos, stop, "header value")
            try:
                headers.append(Header(hkey.decode(), hvalue))
            except UnicodeDecodeError:
                raise KafkaDecodeError("header key is not UTF-8", position=pos) from None
        if pos != stop:
            raise KafkaDecodeError(f"{stop - pos} bytes left in a record", position=pos)
        out.append(
            Record(
                offset_delta,
                timestamp_delta,
                key,
                value,
                tuple(headers),
                attributes - ((attributes & 0x80) << 1),
            )
        )
    if pos != end:
        raise CorruptRecordBatchError(f"{end - pos} bytes after the batch's {count} records")
    return tuple(out)


def batch_size(data: bytes | memoryview, pos: int = 0) -> int | None:
    """The whole size of the batch at `pos`, or None if fewer than 12 bytes are there."""
    if len(data) - pos < 12:
        return None
    (length,) = struct.unpack_from(">i", data, pos + _LENGTH_OFFSET)
    if length < BATCH_HEADER_BYTES - 12:
        raise CorruptRecordBatchError(f"batch length {length} is below the header's")
    return int(length) + 12


def decode_batch(
    data: bytes | memoryview,
    decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX_DEFAULT,
    *,
    columnar: bool = False,
) -> RecordBatch:
    """One whole batch (`data` is exactly its bytes, `batch_size` long). `columnar`: records
    without headers come as `columns` (`records` empty), decoded a batch at a time."""
    view = memoryview(data)
    if len(view) < BATCH_HEADER_BYTES:
        raise KafkaDecodeError(f"record batch of {len(view)} bytes is truncated")
    base_offset, length, leader_epoch, magic, crc = _HEAD.unpack_from(view)
    if length + 12 != len(view):
        raise KafkaDecodeError(f"batch length {length} does not match its {len(view)} bytes")
    if magic != 2:
        raise CorruptRecordBatchError(f"record batch magic {magic} (only 2 is served)", magic=magic)
    covered = bytes(view[_ATTRIBUTES_OFFSET:])
    if google_crc32c.value(covered) != crc:
        raise CorruptRecordBatchError("record batch CRC-32C mismatch", base_offset=base_offset)
    attributes, last_delta, base_ts, max_ts, pid, epoch, base_seq, count = _BODY.unpack_from(
        view, _ATTRIBUTES_OFFSET
    )
    payload = covered[BATCH_HEADER_BYTES - _ATTRIBUTES_OFFSET :]
    codec = compression_of(attributes)
    if codec != Compression.NONE:
        payload = decompress(codec, payload, decompressed_bytes_max)
    elif len(payload) > decompressed_bytes_max:
        raise CorruptRecordBatchError(f"batch of {len(payload)} bytes is over the limit")
    columns = None
    if columnar:
        columns, headers_seen = decode_columns(payload, count)
        if headers_seen:
            columns = None
    records = _decode_records(payload, count) if columns is None else ()
    return RecordBatch(
        base_offset=base_offset,
        records=records,
        columns=columns,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        attributes=attributes,
        last_offset_delta=last_delta,
        partition_leader_epoch=leader_epoch,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=base_seq,
        records_count=count,
    )


def decode_batches(
    data: bytes | memoryview,
    decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX_DEFAULT,
    *,
    partial_tail: bool = False,
    columnar: bool = False,
) -> list[RecordBatch]:
    """Every batch of a records field. A Produce request's must all be whole; a Fetch
    response may end in a partial batch (`partial_tail=True` drops it, as clients do).
    `columnar`: as `decode_batch`'s."""
    view = memoryview(data)
    out: list[RecordBatch] = []
    pos = 0
    while pos < len(view):
        size = batch_size(view, pos)
        if size is None or size > len(view) - pos:
            if partial_tail:
                break
            raise KafkaDecodeError(f"record batch at byte {pos} is truncated", position=pos)
        out.append(decode_batch(view[pos : pos + size], decompressed_bytes_max, columnar=columnar))
        pos += size
    return out
