"""The payload of a producer-state snapshot: a `ProducerTable` as bytes, and back. Pure.

The replica's driver writes one, through storage (`replog.storage.snapshots`: the file
framing, its offset and CRC32C), at a segment roll and at a clean close, with the table as
it is when the log ends at the snapshot's offset; a replica that starts takes the newest
valid one at or below its log's recovery point and scans only the records after it
(`producer_state.py`).

Payload, byte by byte (big-endian)::

    0    u16  payload version (1)
    2    u32  producer count P (at most PRODUCERS_MAX)
    6    u8   1 if a partial batch follows, else 0 (a batch header whose records had not
              all arrived: a follower fetched part of it)
    [7   u64  its header offset, then the 36-byte header value (`producers.HEADER`)]
    then P producers, least recently active first:
         u64  producer_id
         u32  epoch        newest epoch seen (fencing)
         u64  timestamp_ms newest batch's timestamp (idle expiry)
         u8   B            batches kept (at most BATCHES_KEPT), then B times, oldest first:
              u64 header_offset, u32 epoch, u64 first_sequence, u64 last_sequence

Every number is range-checked as it is read, and the payload must end exactly after the
last producer: anything else is `SnapshotFormatError` (the start falls back to the scan).
"""

from __future__ import annotations

import struct

from replog.replication.producers import (
    BATCHES_KEPT,
    HEADER_BYTES,
    PRODUCER_EPOCH_MAX,
    PRODUCER_ID_MAX,
    PRODUCERS_MAX,
    SEQUENCE_MAX,
    BatchHeader,
    ProducerEntry,
    ProducerTable,
    decode_header,
)

VERSION = 1
_HEAD = struct.Struct(">HIB")
_OFFSET = struct.Struct(">Q")
_PRODUCER = struct.Struct(">QIQB")
_BATCH = struct.Struct(">QIQQ")
_OFFSET_MAX = 2**63 - 1


class SnapshotFormatError(ValueError):
    """A payload that is not one this version wrote."""


def encode(table: ProducerTable) -> bytes:
    entries = table.entries()
    partial = table.partial
    parts = [_HEAD.pack(VERSION, len(entries), 0 if partial is None else 1)]
    if partial is not None:
        parts.append(_OFFSET.pack(partial[0]) + partial[1].encode())
    for e in entries:
        parts.append(_PRODUCER.pack(e.producer_id, e.epoch, e.timestamp_ms, len(e.batches)))
        parts.extend(_BATCH.pack(*b) for b in e.batches)
    return b"".join(parts)


def decode(payload: bytes) -> tuple[list[ProducerEntry], tuple[int, BatchHeader] | None]:
    """The entries and partial batch `encode` wrote (`ProducerTable.restore` takes them)."""
    try:
        return _decode(memoryview(payload))
    except struct.error as exc:
        raise SnapshotFormatError(f"producer snapshot cut short: {exc}") from None


def _decode(
    buf: memoryview,
) -> tuple[list[ProducerEntry], tuple[int, BatchHeader] | None]:
    version, count, has_partial = _HEAD.unpack_from(buf)
    _need(version == VERSION, f"payload version {version}")
    _need(count <= PRODUCERS_MAX and has_partial in (0, 1), f"{count} producers")
    pos = _HEAD.size
    partial = None
    if has_partial:
        (offset,) = _OFFSET.unpack_from(buf, pos)
        header = decode_header(bytes(buf[pos + 8 : pos + 8 + HEADER_BYTES]))
        _need(header is not None and offset <= _OFFSET_MAX, "partial batch header")
        assert header is not None
        partial = (offset, header)
        pos += 8 + HEADER_BYTES
    entries = []
    for _ in range(count):
        pid, epoch, ts, nbatches = _PRODUCER.unpack_from(buf, pos)
        pos += _PRODUCER.size
        _need(pid <= PRODUCER_ID_MAX and epoch <= PRODUCER_EPOCH_MAX, f"producer {pid}")
        _need(nbatches <= BATCHES_KEPT, f"{nbatches} batches")
        batches: list[tuple[int, int, int, int]] = []
        for _ in range(nbatches):
            b = _BATCH.unpack_from(buf, pos)
            pos += _BATCH.size
            at, b_epoch, first, last = b
            _need(at <= _OFFSET_MAX and b_epoch <= epoch, f"batch at {at}")
            _need(first <= SEQUENCE_MAX and first <= last, f"sequences {first}..{last}")
            _need(not batches or batches[-1][0] < at, "batches out of order")
            batches.append(b)
        entries.append(ProducerEntry(pid, epoch, ts, tuple(batches)))
    _need(pos == len(buf), f"{len(buf) - pos} bytes after the last producer")
    return entries, partial


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise SnapshotFormatError(f"producer snapshot: bad {what}")


def load(payload: bytes, table: ProducerTable) -> None:
    """Restore `table` from `payload` (`SnapshotFormatError`: the table is unchanged)."""
    entries, partial = decode(payload)
    table.restore(entries, partial)
