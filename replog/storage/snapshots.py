"""State snapshots beside a partition's segments: `{offset:020d}.snapshot` files.

A snapshot holds a state that is a function of the log's records *below* its offset (the
replica's idempotent producers: `replog.replication.producer_snapshot` owns the payload), so
that a replica that starts reads the newest one and scans only the records after it instead
of the whole log (Kafka's producer-state `.snapshot` files). Storage owns the files: their
framing, their atomic write, and their lifecycle against the log's (`partition_log.py`):

* written atomically (`checkpoint.write_atomic`: temp file `<name>.tmp`, fsync, rename over,
  fsync the directory); kept: the `SNAPSHOTS_KEPT` newest, and the newest at or below the
  checkpointed recovery point (after a crash a start may use none above it: without that
  one, a busy partition killed between two recovery-point checkpoints scanned its whole
  log at the next start, 17-20 s at 20 GiB);
* a snapshot above the log end offset describes records the log no longer holds: deleted
  when the log is opened (after a crash lost a tail), and *before* a truncation to `offset`
  drops records, every snapshot above `offset` is deleted and the directory fsynced (a
  follower that truncates never keeps a state built from records it removed; a crash
  between the two leaves fewer snapshots, never a wrong one); a reset deletes them all;
* a snapshot below the log start is deleted by retention (the records between it and the
  log start are gone, so nothing could be scanned after it).

File, byte by byte (big-endian)::

    0      4 bytes  magic b"RLSN"
    4      u16      format version (1)
    6      u64      offset (the same as the file name's)
    14     u32      payload length n (at most SNAPSHOT_BYTES_MAX)
    18     n bytes  payload (the owner's encoding)
    18+n   u32      CRC32C (Castagnoli) of bytes [0, 18+n)

A file that is short, long, of another magic, version or offset, or whose CRC does not match
is corrupt (`CorruptDataError`): its reader falls back to an older snapshot or the scan.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

from replog.errors import CorruptDataError
from replog.storage import checkpoint
from replog.storage.checksums import crc32c_value

SUFFIX = ".snapshot"
MAGIC = b"RLSN"
VERSION = 1
HEAD = struct.Struct(">4sHQI")  # magic, version, offset, payload length: 18 bytes
CRC = struct.Struct(">I")
SNAPSHOT_BYTES_MAX = 64 * 1024 * 1024
SNAPSHOTS_KEPT = 3
_NAME = re.compile(r"(\d{20})\.snapshot")


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SUFFIX}"


def encode(offset: int, payload: bytes) -> bytes:
    assert 0 <= offset < 2**64 and len(payload) <= SNAPSHOT_BYTES_MAX, (offset, len(payload))
    body = HEAD.pack(MAGIC, VERSION, offset, len(payload)) + payload
    return body + CRC.pack(crc32c_value(body))


def decode(offset: int, data: bytes) -> bytes:
    """The payload of the snapshot file `data` named for `offset`; `CorruptDataError` if the
    file is not exactly one whole, matching snapshot."""
    where = f"snapshot {snapshot_name(offset)}"
    if len(data) < HEAD.size + CRC.size:
        raise CorruptDataError(f"{where}: {len(data)} bytes, too short")
    magic, version, at, length = HEAD.unpack_from(data)
    if magic != MAGIC or version != VERSION or at != offset:
        raise CorruptDataError(f"{where}: bad header {magic!r} v{version} offset {at}")
    if length > SNAPSHOT_BYTES_MAX or len(data) != HEAD.size + length + CRC.size:
        raise CorruptDataError(f"{where}: {len(data)} bytes for a payload of {length}")
    end = HEAD.size + length
    (crc,) = CRC.unpack_from(data, end)
    if crc != crc32c_value(data[:end]):
        raise CorruptDataError(f"{where}: checksum mismatch")
    return data[HEAD.size : end]


def offsets(directory: Path) -> list[int]:
    """The offsets of the snapshot files in `directory`, ascending."""
    with os.scandir(directory) as listing:
        found = [m for e in listing if (m := _NAME.fullmatch(e.name))]
    return sorted(int(m.group(1)) for m in found)


def write(directory: Path, offset: int, payload: bytes, *, crash_bound: int | None) -> None:
    """Write the snapshot at `offset` atomically, then keep only the `SNAPSHOTS_KEPT` newest
    and the newest at or below `crash_bound` (the checkpointed recovery point: the newest
    a start after a crash may use; None: no recovery point on disk)."""
    checkpoint.write_atomic(directory / snapshot_name(offset), encode(offset, payload))
    found = offsets(directory)
    old = found[:-SNAPSHOTS_KEPT]
    if crash_bound is not None:
        usable = [o for o in found if o <= crash_bound]
        if usable and usable[-1] in old:
            old.remove(usable[-1])
    _delete(directory, old, durable=False)  # an older one left behind is still valid


def read(directory: Path, offset: int) -> bytes:
    """The payload of the snapshot at `offset` (`CorruptDataError` if it is damaged,
    `FileNotFoundError` if it is gone)."""
    return decode(offset, (directory / snapshot_name(offset)).read_bytes())


def delete_above(directory: Path, offset: int) -> int:
    """Delete every snapshot above `offset` (and leftover temp files), durably: the directory
    is fsynced before this returns if anything was deleted. Returns how many."""
    for name in os.listdir(directory):
        if name.endswith(SUFFIX + ".tmp"):
            (directory / name).unlink(missing_ok=True)
    above = [o for o in offsets(directory) if o > offset]
    _delete(directory, above, durable=True)
    return len(above)


def delete_below(directory: Path, offset: int) -> int:
    """Delete every snapshot below `offset` (retention moved the log start there)."""
    below = [o for o in offsets(directory) if o < offset]
    _delete(directory, below, durable=False)
    return len(below)


def _delete(directory: Path, doomed: list[int], *, durable: bool) -> None:
    for o in doomed:
        (directory / snapshot_name(o)).unlink(missing_ok=True)
    if doomed and durable:
        checkpoint.fsync_dir(directory)
