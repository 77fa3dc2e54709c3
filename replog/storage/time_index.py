"""The time index of one segment: `{base_offset:020d}.timeindex` (Kafka's `.timeindex` idea).

It answers "the first record whose timestamp is >= t" with one bisect and a scan of at
most one offset-index interval. A record's timestamp comes from the partition's
`StorageConfig.timestamps` reader (an envelope topic: the envelope's; a raw topic: the
idempotent batch header's, for the records after it; records without one are never an
answer). Timestamps need not grow with offsets (create time comes from producers' clocks),
so the index keeps running maxima:

* one entry per offset-index entry (`index.py`): `max_before[i]` is the largest timestamp
  of the segment's records *before* the record that offset-index entry `i` points at
  (`NO_TIMESTAMP`, the smallest i64, for entry 0). The values never decrease.
* `max_timestamp`: the largest timestamp in the whole segment.

Lookup of t: the last entry `i` with `max_before[i] < t` (entry 0 always qualifies). Every
record before entry `i` is older than t, and, when there is an entry `i + 1`, some record
before it is not: the answer lies in `[entry i, entry i + 1)`, one index interval (or, past
the last entry, the segment's tail, which is at most an interval and a record long).

File format (all big-endian), written whole (`checkpoint.write_atomic`)::

    header  24 bytes: magic b"RLTI", version u16 (1), reserved u16 (0),
            log_size u64 (the `.log` size the file describes), max_timestamp i64
    entries 12 bytes each, one per offset-index entry: max_before i64, relative_offset u32

The index is derived from the log and never trusted over it: a segment builds it on first
use (a lookup, or time-based retention) by reading its `.log` once, keeps it up to date
with appends from then on, and writes the file when it is sealed or closed cleanly. A file
is used only if its `log_size` is the segment's size and its relative offsets are the
offset index's; a segment deletes its file before it changes (an append or a truncation),
so a file that survives a crash describes the bytes it was written for, and an active
segment after a crash is rebuilt from its log (Recovery: like the offset index, which is
rebuilt from the last entry that points at its frame).
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import numpy as np

from replog.storage.checkpoint import write_atomic
from replog.storage.config import NO_TIMESTAMP

MAGIC = b"RLTI"
VERSION = 1
HEADER = struct.Struct(">4sHHQq")
HEADER_BYTES = HEADER.size  # 24
ENTRY = struct.Struct(">qI")
ENTRY_BYTES = ENTRY.size  # 12


def time_index_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}.timeindex"


class TimeIndex:
    """`max_before` (one per offset-index entry, see the module doc) and `max_timestamp`."""

    __slots__ = ("max_before", "max_timestamp", "relative_offsets")

    def __init__(
        self, max_before: list[int], relative_offsets: list[int], max_timestamp: int
    ) -> None:
        assert len(max_before) == len(relative_offsets)
        self.max_before = max_before
        self.relative_offsets = relative_offsets
        self.max_timestamp = max_timestamp

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TimeIndex) and (
            self.max_before,
            self.relative_offsets,
            self.max_timestamp,
        ) == (other.max_before, other.relative_offsets, other.max_timestamp)

    def __repr__(self) -> str:
        return (
            f"TimeIndex(max_before={self.max_before}, relative_offsets={self.relative_offsets}"
            f", max_timestamp={self.max_timestamp})"
        )

    def entry_below(self, timestamp_ms: int) -> int:
        """The last entry whose `max_before` is < `timestamp_ms` (0 at least)."""
        return max(bisect_left(self.max_before, timestamp_ms) - 1, 0)

    def extend(
        self, stamps: np.ndarray, new_entries: Sequence[tuple[int, int]], first_frame: int
    ) -> None:
        """Account for appended frames: `stamps[j]` is the timestamp of the j-th frame
        appended, and `new_entries` the offset-index entries added for them as (relative
        offset, frame number j + `first_frame`)."""
        if not len(stamps):
            return
        running = np.maximum.accumulate(stamps)
        before = self.max_timestamp
        for rel, frame in new_entries:
            j = frame - first_frame
            self.max_before.append(before if j == 0 else max(before, int(running[j - 1])))
            self.relative_offsets.append(rel)
        self.max_timestamp = max(before, int(running[-1]))

    # -- the file -------------------------------------------------------------------------

    def write(self, path: Path, log_size: int) -> None:
        """Write the file whole (`checkpoint.write_atomic`); OSError on failure."""
        n = len(self.max_before)
        entries = np.empty(n, dtype=[("ts", ">i8"), ("rel", ">u4")])
        entries["ts"] = self.max_before
        entries["rel"] = self.relative_offsets
        data = HEADER.pack(MAGIC, VERSION, 0, log_size, self.max_timestamp) + entries.tobytes()
        write_atomic(path, data)

    @classmethod
    def load(cls, path: Path, log_size: int, relative_offsets: Sequence[int]) -> TimeIndex | None:
        """The file's index if it describes a log of `log_size` bytes whose offset index
        holds `relative_offsets`; None otherwise (missing, stale or damaged)."""
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if len(data) < HEADER_BYTES or (len(data) - HEADER_BYTES) % ENTRY_BYTES:
            return None
        magic, version, _, size, max_timestamp = HEADER.unpack_from(data)
        if magic != MAGIC or version != VERSION or size != log_size:
            return None
        entries = np.frombuffer(data, dtype=[("ts", ">i8"), ("rel", ">u4")], offset=HEADER_BYTES)
        rels: list[int] = entries["rel"].tolist()
        stamps: list[int] = entries["ts"].tolist()
        if rels != list(relative_offsets):
            return None
        ordered = all(a <= b for a, b in pairwise(stamps))
        if not ordered or (stamps and (stamps[0] != NO_TIMESTAMP or stamps[-1] > max_timestamp)):
            return None
        return cls(stamps, rels, int(max_timestamp))


def build(
    stamps: np.ndarray, frame_relative_offsets: Sequence[int], entry_relative_offsets: Sequence[int]
) -> TimeIndex:
    """The index of a segment whose frames have timestamps `stamps` and relative offsets
    `frame_relative_offsets`, for the offset-index entries `entry_relative_offsets`."""
    index = TimeIndex([], [], NO_TIMESTAMP)
    frame_of = {rel: j for j, rel in enumerate(frame_relative_offsets)}
    index.extend(stamps, [(rel, frame_of[rel]) for rel in entry_relative_offsets], 0)
    return index
