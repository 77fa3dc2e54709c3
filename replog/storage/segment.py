"""One segment: `{base_offset:020d}.log` (frames, see `replog.frames`) + its sparse index.

The `.log` file holds frames for offsets `base_offset .. next_offset - 1`, back to back, with
nothing else: its size is the write position. Appends are one `write` per call (callers pass
a whole pre-encoded batch); reads are one `pread` of the needed byte range, located through
the index, then a short in-memory scan (at most one index interval).

Recovery (`create=False`) never trusts the index's size nor the log's tail: it checks that the
last index entry points at a frame with the offset it claims (dropping entries until one
does), scans forward from there, and stops at the first frame whose offset is not the next
one, or that is cut short. The log is truncated there, index entries past it are dropped and
missing ones rebuilt. The seed format has no checksum: damage that leaves frame headers
intact (bytes changed inside a value) cannot be detected; damage to headers or a torn tail
always is.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from pathlib import Path

from replog.errors import CorruptDataError
from replog.frames import HEADER, HEADER_BYTES, LENGTH_MASK
from replog.storage.config import StorageConfig
from replog.storage.index import SparseIndex

_unpack_header = HEADER.unpack_from


def log_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def index_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}.idx"


class Segment:
    def __init__(
        self, directory: Path, base_offset: int, config: StorageConfig, *, create: bool
    ) -> None:
        self.base_offset = base_offset
        self.next_offset = base_offset
        self.size = 0
        self._interval = config.index_interval_bytes
        self.log_path = directory / log_file_name(base_offset)
        self.index_path = directory / index_file_name(base_offset)
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | (os.O_EXCL if create else 0)
        if create:
            # A stale index of a segment deleted earlier must not be mistaken for this one's.
            self.index_path.unlink(missing_ok=True)
        self._fd = os.open(self.log_path, flags, 0o644)
        try:
            log_size = os.fstat(self._fd).st_size
            self.index = SparseIndex(self.index_path, config.index_bytes_initial, log_size)
        except BaseException:
            os.close(self._fd)
            if create:
                self.log_path.unlink(missing_ok=True)
            raise
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        if not create:
            self._recover(log_size)

    # -- recovery ------------------------------------------------------------------------

    def _recover(self, log_size: int) -> None:
        index = self.index
        while len(index):
            rel, pos = index.relative_offsets[-1], index.positions[-1]
            header = os.pread(self._fd, HEADER_BYTES, pos)
            if len(header) == HEADER_BYTES and _unpack_header(header)[0] == self.base_offset + rel:
                break
            index.truncate_entries(len(index) - 1)
        if len(index):
            start_pos, expected = index.positions[-1], self.base_offset + index.relative_offsets[-1]
        else:
            start_pos, expected = 0, self.base_offset
        buf = os.pread(self._fd, log_size - start_pos, start_pos)
        size = len(buf)
        pos = 0
        last_indexed = index.positions[-1] if len(index) else None
        while pos + HEADER_BYTES <= size:
            offset, raw_len = _unpack_header(buf, pos)
            if offset != expected:
                break
            end = pos + HEADER_BYTES + (raw_len & LENGTH_MASK)
            if end > size:
                break
            record_pos = start_pos + pos
            if last_indexed is None or record_pos - last_indexed >= self._interval:
                if last_indexed is None or record_pos > last_indexed:
                    index.reserve(1)
                    index.append(offset - self.base_offset, record_pos)
                last_indexed = record_pos
            pos = end
            expected += 1
        valid_end = start_pos + pos
        index.drop_from_position(valid_end)
        if valid_end < log_size:
            os.ftruncate(self._fd, valid_end)
        self.size = valid_end
        self.next_offset = expected

    # -- writes --------------------------------------------------------------------------

    def append(
        self, chunk: memoryview, first_offset: int, ends: list[int], lo: int, hi: int, bias: int
    ) -> None:
        """Append the frames `lo..hi-1` of a batch in one write.

        `chunk` holds exactly those frames; `ends[i] - bias` is frame i's end within `chunk`.
        On an OSError the file is cut back and nothing changes.
        """
        assert first_offset == self.next_offset, "frames must continue the segment"
        base_pos = self.size
        entries: list[tuple[int, int]] = []
        index = self.index
        if len(index) == 0:
            assert base_pos == 0
            entries.append((first_offset - self.base_offset, 0))
            last = 0
        else:
            last = index.positions[-1]
        interval = self._interval
        target = last + interval - base_pos + bias  # in the units of `ends`
        i = lo if target <= bias else bisect_left(ends, target, lo, hi) + 1
        while i < hi:
            start = base_pos + ((ends[i - 1] - bias) if i > lo else 0)
            if start > last:
                entries.append((first_offset + (i - lo) - self.base_offset, start))
                last = start
            i = bisect_left(ends, last + interval - base_pos + bias, lo, hi) + 1
        if entries:
            index.reserve(len(entries))
        total = len(chunk)
        try:
            written = 0
            while written < total:
                written += os.write(self._fd, chunk[written:])
        except OSError:
            os.ftruncate(self._fd, base_pos)
            raise
        for rel, pos in entries:
            index.append(rel, pos)
        self.size = base_pos + total
        self.next_offset = first_offset + (hi - lo)

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or above `offset` (base_offset <= offset <= next_offset)."""
        assert self.base_offset <= offset <= self.next_offset
        pos = self.position_of(offset)
        os.ftruncate(self._fd, pos)
        self.index.drop_from_position(pos)
        self.size = pos
        self.next_offset = offset

    def flush(self) -> None:
        os.fdatasync(self._fd)

    # -- reads ---------------------------------------------------------------------------

    def position_of(self, offset: int) -> int:
        """Byte position of the frame of `offset` (`size` for `next_offset`)."""
        if offset >= self.next_offset:
            assert offset == self.next_offset
            return self.size
        entry, rel, pos = self.index.floor_by_offset(offset - self.base_offset)
        expected = self.base_offset + rel
        if expected == offset:
            return pos
        stop = self.index.position_after(entry, self.size)
        buf = os.pread(self._fd, stop - pos, pos)
        p = 0
        while p + HEADER_BYTES <= len(buf):
            found, raw_len = _unpack_header(buf, p)
            if found != expected:
                break
            if found == offset:
                return pos + p
            p += HEADER_BYTES + (raw_len & LENGTH_MASK)
            expected += 1
        raise CorruptDataError(
            f"offset {offset} not found in segment {self.log_path.name} near position {pos}",
            offset=offset,
            segment=self.log_path.name,
        )

    def read(
        self, offset: int, max_bytes: int, end_offset: int, *, first: bool
    ) -> tuple[bytes, bool]:
        """Whole frames from `offset`, at most `max_bytes` (at least one frame if `first`),
        stopping before `end_offset`. Returns (frames, reached the segment's or range's end)."""
        start = self.position_of(offset)
        stop = self.size if end_offset >= self.next_offset else self.position_of(end_offset)
        if stop - start <= max_bytes:
            return os.pread(self._fd, stop - start, start), True
        limit = start + max_bytes
        _, q = self.index.floor_by_position(limit)
        buf = os.pread(self._fd, max_bytes, start)
        p = max(q - start, 0)
        size = len(buf)
        while p + HEADER_BYTES <= size:
            end = p + HEADER_BYTES + (_unpack_header(buf, p)[1] & LENGTH_MASK)
            if end > size:
                break
            p = end
        if p == 0:
            if not first:
                return b"", False
            length = _unpack_header(os.pread(self._fd, HEADER_BYTES, start))[1] & LENGTH_MASK
            frame = os.pread(self._fd, HEADER_BYTES + length, start)
            return frame, start + len(frame) >= stop
        return buf[:p], False

    def modified_ms(self) -> int:
        return int(os.fstat(self._fd).st_mtime * 1000)

    # -- lifecycle -----------------------------------------------------------------------

    def close(self, *, trim: bool = True) -> None:
        if self._fd < 0:
            return
        try:
            self.index.close(trim=trim)
        finally:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close(trim=False)
        self.log_path.unlink(missing_ok=True)
        self.index_path.unlink(missing_ok=True)
