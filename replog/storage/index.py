"""The sparse offset index of one segment: `{base_offset:020d}.idx` (seed 003).

File format: back-to-back 12-byte entries, big-endian::

    relative_offset  u32   record offset - segment base offset
    position         u64   byte position of that record's frame in the `.log` file

An entry exists for the segment's first record and then for the first record that starts at
least `index_interval_bytes` after the previously indexed one. Entries are strictly
increasing in both fields. The first is (0, 0), but in a segment the log cleaner rewrote
(`cleaner.py`, offsets with gaps) it is (its first record's relative offset, 0).

The file is memory-mapped (stdlib `mmap`), pre-sized to `index_bytes_initial`, grown by
doubling (the blocks are reserved with `posix_fallocate`, so a full disk raises ENOSPC at
growth instead of SIGBUS on a later store), and trimmed to its true size on a clean close.
After a crash the file is still pre-sized and zero padded, so its size is never trusted:
`load` keeps only the leading entries that are strictly increasing and point inside the log.
The entries are mirrored in two Python lists so that lookups are C-level `bisect` calls.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
from bisect import bisect_right
from pathlib import Path

ENTRY = struct.Struct(">IQ")
ENTRY_BYTES = ENTRY.size  # 12


class SparseIndex:
    def __init__(
        self, path: Path, initial_bytes: int, log_size: int, *, sparse: bool = False
    ) -> None:
        """`sparse`: the segment's offsets may have gaps (a cleaned segment), so its first
        entry may name a relative offset above 0 (its position is still 0)."""
        self.path = path
        self.sparse = sparse
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            file_size = os.fstat(self._fd).st_size
            self._capacity = max(file_size, initial_bytes)
            self._capacity -= self._capacity % ENTRY_BYTES
            if file_size < self._capacity:
                try:
                    _reserve(self._fd, self._capacity)
                except OSError as exc:
                    # A full disk: an index reopened with what it holds (trimmed at close)
                    # grows when it needs to (`reserve`: a typed error then, not at open).
                    if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or file_size < ENTRY_BYTES:
                        raise
                    self._capacity = file_size - file_size % ENTRY_BYTES
            self._mmap = mmap.mmap(self._fd, self._capacity)
        except BaseException:
            os.close(self._fd)
            raise
        self.relative_offsets: list[int] = []
        self.positions: list[int] = []
        self.dropped_entries = 0  # non-zero entries after the valid ones (damage, stale)
        self._written = False  # an entry was stored or zeroed since the open
        self._load(min(file_size, self._capacity), log_size)

    def _load(self, size: int, log_size: int) -> None:
        rels, poss = self.relative_offsets, self.positions
        raw = self._mmap[: size - size % ENTRY_BYTES]
        for rel, pos in ENTRY.iter_unpack(raw):
            if rels:
                if rel <= rels[-1] or pos <= poss[-1]:
                    break
            elif pos != 0 or (rel != 0 and not self.sparse):
                break
            if pos >= log_size:
                break
            rels.append(rel)
            poss.append(pos)
        rest = raw[len(poss) * ENTRY_BYTES :]
        if rest.strip(b"\0"):
            entries = (rest[i : i + ENTRY_BYTES] for i in range(0, len(rest), ENTRY_BYTES))
            self.dropped_entries = sum(1 for e in entries if e.strip(b"\0"))

    def __len__(self) -> int:
        return len(self.positions)

    def reserve(self, more_entries: int) -> None:
        """Make room for `more_entries` entries (may raise OSError such as ENOSPC)."""
        need = (len(self.positions) + more_entries) * ENTRY_BYTES
        if need <= self._capacity:
            return
        capacity = self._capacity
        while capacity < need:
            capacity *= 2
        _reserve(self._fd, capacity)
        self._mmap.resize(capacity)
        self._capacity = capacity

    def append(self, relative_offset: int, position: int) -> None:
        """Add an entry; `reserve` must have made room for it."""
        n = len(self.positions)
        if n:
            assert relative_offset > self.relative_offsets[-1], "index offsets must increase"
            assert position > self.positions[-1], "index positions must increase"
        self._written = True
        ENTRY.pack_into(self._mmap, n * ENTRY_BYTES, relative_offset, position)
        self.relative_offsets.append(relative_offset)
        self.positions.append(position)

    def floor_by_offset(self, relative_offset: int) -> tuple[int, int, int]:
        """(entry number, relative offset, position) of the last entry at or below the offset."""
        i = bisect_right(self.relative_offsets, relative_offset) - 1
        assert i >= 0, "the first record of a segment is always indexed"
        return i, self.relative_offsets[i], self.positions[i]

    def floor_by_position(self, position: int) -> tuple[int, int]:
        """(relative offset, position) of the last entry whose position is <= `position`."""
        i = bisect_right(self.positions, position) - 1
        assert i >= 0, "the first record of a segment is always indexed"
        return self.relative_offsets[i], self.positions[i]

    def position_after(self, entry: int, default: int) -> int:
        """Position of entry `entry + 1`, or `default` if it is the last one."""
        return self.positions[entry + 1] if entry + 1 < len(self.positions) else default

    def truncate_entries(self, count: int) -> None:
        """Keep only the first `count` entries (zeroing the rest in the file)."""
        n = len(self.positions)
        if count >= n:
            return
        self._written = True
        self._mmap[count * ENTRY_BYTES : n * ENTRY_BYTES] = bytes((n - count) * ENTRY_BYTES)
        del self.relative_offsets[count:]
        del self.positions[count:]

    def drop_from_position(self, position: int) -> None:
        """Drop every entry that points at or past `position`."""
        self.truncate_entries(bisect_right(self.positions, position - 1))

    def flush(self) -> None:
        self._mmap.flush()

    def close(self, *, trim: bool = True) -> None:
        """Sync, unmap, trim the file to its entries (unless `trim` is False: a crash). An
        index nothing was written to since the open is trimmed without a sync (a segment
        only read, closed by the open-files LRU: no fsync per eviction)."""
        if self._fd < 0:
            return
        try:
            sync = trim and self._written
            if sync:
                self._mmap.flush()
            self._mmap.close()
            if trim:
                os.ftruncate(self._fd, len(self.positions) * ENTRY_BYTES)
            if sync:
                os.fsync(self._fd)
        finally:
            os.close(self._fd)
            self._fd = -1


def _reserve(fd: int, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        os.ftruncate(fd, size)
