"""One segment: `{base_offset:020d}.log` (frames, see `replog.frames`), its sparse index
(`.idx`, see `index.py`), its CRC32C sidecar (`.crc`, see `checksums.py`; in use:
`segment_checksums.py`) and, for a partition whose records have timestamps, its time index
(`.timeindex`, see `time_index.py`; in use: `segment_times.py`). Recovery after a crash is
`segment_recovery.py`, the index check and the scrubber's step `segment_scrub.py`, the
shared state and findings `segment_base.py`; this module holds appends, reads and the
segment's lifecycle.

The `.log` file holds frames for offsets `base_offset .. next_offset - 1`, back to back, with
nothing else: its size is the write position. Appends are one `write` per call (callers pass
a whole pre-encoded batch) followed by one `write` of the sidecar's entries for it; reads
are one `pread` of the needed byte range, located through the index, then a short
in-memory scan (at most one index interval), verified against the sidecar.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import time
from bisect import bisect_left
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from replog.errors import CorruptDataError
from replog.frames import HEADER, HEADER_BYTES, LENGTH_MASK, OFFSET_MAX
from replog.storage.config import StorageConfig
from replog.storage.index import SparseIndex
from replog.storage.segment_base import index_file_name, log_file_name
from replog.storage.segment_times import TimedSegment

_unpack_header = HEADER.unpack_from

__all__ = ["Segment", "SyncTarget", "index_file_name", "log_file_name"]


class Segment(TimedSegment):
    """One segment's files (see the module doc and the layers in `segment_base.py`)."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: StorageConfig,
        *,
        create: bool,
        known: tuple[int, int] | None = None,
        sparse: bool = False,
        offset_end: int = OFFSET_MAX,
    ) -> None:
        """Open a new segment (`create`), or recover an existing one after a crash; or, with
        `known` = (next_offset, size), make a closed handle of a segment whose bytes are
        known to be whole (flushed before the recovery point, or closed cleanly): no I/O
        until `open_files`, which then opens it without a recovery scan. `sparse`: its
        offsets may have gaps (a cleaned segment, see `segment_base`), all below
        `offset_end`."""
        self.sparse = sparse
        self._offset_end = offset_end
        self.base_offset = base_offset
        self.next_offset = base_offset
        self.size = 0
        self._interval = config.index_interval_bytes
        self._config = config
        self.directory = directory  # the paths: `SegmentBase`, made on first use
        self._time_reader = config.timestamps
        self._times = None  # built on first use (time_index.py)
        self._time_file_maybe = not create  # a `.timeindex` may exist for these bytes
        self.sidecar = None
        self._bad = set()  # blocks known corrupt (never served)
        self._unreadable = False  # the whole segment is corrupt (its sidecar header is)
        self._issues = []
        self._index_checked = create
        self._fd = -1
        self.recovered = False  # recovery scanned it (at some open)
        self.created_ms = int(time.time() * 1000)  # (or opened: the age segment_ms rolls by)
        if known is not None:
            self.next_offset, self.size = known
            return
        self._open(create=create, recover=not create)

    def _open(self, *, create: bool, recover: bool, changed_ok: bool = False) -> None:
        """Open the files. `recover`: run recovery (after a crash). Else the bytes are
        expected whole, as the handle knows them: if the sizes or the sidecar disagree,
        recovery runs anyway, and a segment it changes is an error (EIO) unless
        `changed_ok` (the active segment of a log closed cleanly: its tail may be cut)."""
        config = self._config
        flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT | os.O_EXCL if create else 0)
        if create:
            # A stale index of a segment deleted earlier must not be mistaken for this one's.
            self.index_path.unlink(missing_ok=True)
            self.time_index_path.unlink(missing_ok=True)
        fd = os.open(self.log_path, flags, 0o644)
        index = None
        try:
            log_size = os.fstat(fd).st_size
            self._fd = fd
            index = self.index = SparseIndex(
                self.index_path, config.index_bytes_initial, log_size, sparse=self.sparse
            )
            coverage = self._open_sidecar(config, log_size, create=create)
        except BaseException:
            self._fd = -1
            os.close(fd)
            if index is not None:
                index.close(trim=False)
                del self.index
            if create:
                self.log_path.unlink(missing_ok=True)
                self.checksum_path.unlink(missing_ok=True)
            raise
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        whole = log_size == self.size and (
            coverage is None or (not coverage.damaged and coverage.covered_end == log_size)
        )
        if recover or (not create and not whole):
            expected = (self.next_offset, self.size)
            try:
                self._recover(log_size, coverage)
            except BaseException:
                self.close(trim=False)
                raise
            self.recovered = True
            if not (recover or changed_ok) and (self.next_offset, self.size) != expected:
                self.close(trim=False)
                raise OSError(errno.EIO, f"{self.log_path} changed on disk while closed")
        elif not create:
            index = self.index  # entries are checked where used; a damaged start is rebuilt
            if index.dropped_entries or (log_size and (not len(index) or index.positions[0])):
                self.rebuild_index()

    @property
    def is_open(self) -> bool:
        return self._fd >= 0

    def open_files(self, *, changed_ok: bool = False) -> None:
        """Open the files of a closed handle (no recovery scan if its bytes are whole, see
        `_open`). What was found wrong before (`issues`) stays; the time index is loaded
        again on use."""
        if self._fd >= 0:
            return
        self._times = None
        self._time_file_maybe = True
        self._open(create=False, recover=False, changed_ok=changed_ok)

    # -- writes --------------------------------------------------------------------------

    def append(
        self, chunk: memoryview, first_offset: int, ends: list[int], lo: int, hi: int, bias: int
    ) -> None:
        """Append the frames `lo..hi-1` of a batch in one write (plus one sidecar write).

        `chunk` holds exactly those frames; `ends[i] - bias` is frame i's end within `chunk`.
        On an OSError the files are cut back and nothing changes.
        """
        assert first_offset == self.next_offset, "frames must continue the segment"
        assert self.sidecar is not None, "appends go to checksummed segments only"
        self._drop_time_file()
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
            self.sidecar.append(base_pos, chunk)
        except OSError:
            os.ftruncate(self._fd, base_pos)
            raise
        for rel, pos in entries:
            index.append(rel, pos)
        if self._times is not None and self.sparse:
            self._times = None  # its frame numbers are not relative offsets: rebuilt on use
        if self._times is not None:
            self._extend_times(chunk, ends, lo, hi, bias, first_offset - self.base_offset, entries)
        self.size = base_pos + total
        self.next_offset = first_offset + (hi - lo)

    def skip_to(self, offset: int) -> None:
        """The segment's next record is at `offset` (>= `next_offset`): the offsets between
        are a gap (a follower copying a range its leader's cleaner compacted), and the
        segment reads as one with gaps (`sparse`) from now on."""
        assert offset >= self.next_offset, (offset, self.next_offset)
        if offset == self.next_offset:
            return
        self.sparse = True
        if self._fd >= 0:
            self.index.sparse = True
        self._times = None  # its frame numbers are not relative offsets: rebuilt on use
        self._drop_time_file()
        self.next_offset = offset

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or above `offset` (base_offset <= offset <= next_offset)."""
        assert self.base_offset <= offset <= self.next_offset
        try:
            pos = self.position_of(offset)
            if pos < self.size:
                self._check_header_at(pos, offset)
        except _IndexMismatch as exc:
            self._repair_index(exc.position, offset)
            try:
                pos = self.position_of(offset)
                if pos < self.size:
                    self._check_header_at(pos, offset)
            except _IndexMismatch as again:
                why = "index and log disagree"
                raise self._corrupt(offset, again.position, again.position, why) from None
        self._drop_time_file()
        self._times = None  # rebuilt on next use
        if self.sidecar is not None and pos < self.sidecar.covered_end:
            self._truncate_sidecar(pos, None)  # first: a crash then leaves log bytes uncovered
        os.ftruncate(self._fd, pos)
        self.index.drop_from_position(pos)
        self.size = pos
        self.next_offset = offset
        c = self.chunk_bytes
        self._bad = {k for k in self._bad if k * c < pos}

    def seal(self) -> None:
        """The segment will take no more appends (the log rolled): compact its sidecar if
        small appends left mostly superseded entries (smaller file, faster open); write its
        time index if it has one. Best effort: on an I/O error the old file stays, which
        describes the same bytes (a missing time index is rebuilt from the log)."""
        self._save_times()
        sidecar = self.sidecar
        if sidecar is None or not sidecar.needs_compaction:
            return
        try:
            sidecar.reset(sidecar.covered_end, sidecar.crcs, sidecar.flushed_position)
        except OSError:
            self.checksum_path.with_name(self.checksum_path.name + ".tmp").unlink(missing_ok=True)

    def flush(self) -> None:
        """fsync the log and its sidecar (both, in parallel: the second one costs little more
        than the first), then record the flushed position in the sidecar."""
        sidecar = self.sidecar
        if sidecar is None:
            os.fdatasync(self._fd)
            return
        pending = _fsync_pool().submit(sidecar.sync)
        try:
            os.fdatasync(self._fd)
        finally:
            pending.result()  # raises the sidecar's OSError, if any
        sidecar.mark_flushed(self.size)

    def sync_target(self, *, mark: bool) -> SyncTarget:
        """This segment's fsync as it is now, to be made outside the log's lock
        (`SyncTarget`): duplicates of its descriptors, valid however the segment is rolled,
        parked, closed or deleted before the fsync runs. OSError (no descriptor left)."""
        assert self._fd >= 0, "a written or recovered segment stays open until synced"
        log_fd = os.dup(self._fd)
        try:
            sidecar_fd = -1 if self.sidecar is None else self.sidecar.dup_fd()
        except BaseException:
            os.close(log_fd)
            raise
        return SyncTarget(self, self.size, log_fd, sidecar_fd, mark)

    def mark_flushed(self, position: int) -> None:
        """Record in the sidecar that the `.log` is durable below `position` (after a
        `SyncTarget` covering it synced); nothing if the segment was closed meanwhile (its
        closing flushed and marked it)."""
        if self.sidecar is not None:
            self.sidecar.mark_flushed(position)

    def sync(self) -> None:
        """fsync the log and its sidecar as they are (after recovery: what it kept)."""
        os.fdatasync(self._fd)
        if self.sidecar is not None:
            self.sidecar.sync()

    # -- reads ---------------------------------------------------------------------------

    def position_of(self, offset: int) -> int:
        """Byte position of the frame of `offset` (`size` for `next_offset`)."""
        if offset >= self.next_offset:
            assert offset == self.next_offset
            return self.size
        sparse = self.sparse
        if sparse:
            return self._sparse_position_of(offset)
        entry, rel, pos = self.index.floor_by_offset(offset - self.base_offset)
        expected = self.base_offset + rel
        if expected == offset:
            return pos  # the caller checks the frame header there (index entries are checked
            # when used, not all up front: a read costs a header compare, not a pass)
        stop = self.index.position_after(entry, self.size)
        buf = os.pread(self._fd, stop - pos, pos)
        p = 0
        while p + HEADER_BYTES <= len(buf):
            found, raw_len = _unpack_header(buf, p)
            if found != expected:
                if p == 0:
                    raise _IndexMismatch(pos)
                break
            if found == offset:
                return pos + p
            p += HEADER_BYTES + (raw_len & LENGTH_MASK)
            expected += 1
        self._verify_range(pos, stop)  # raises if the bytes are corrupt, which explains it
        raise _IndexMismatch(pos)  # intact bytes, no frame of the offset: the index is wrong

    def _sparse_position_of(self, offset: int) -> int:
        """`position_of` in a segment with gaps: the position of the first frame whose
        offset is >= `offset` (`size` if there is none)."""
        index = self.index
        if not len(index) or offset - self.base_offset < index.relative_offsets[0]:
            return 0 if len(index) else self.size
        entry, rel, pos = index.floor_by_offset(offset - self.base_offset)
        if self.base_offset + rel == offset:
            return pos
        stop = index.position_after(entry, self.size)
        buf = os.pread(self._fd, stop - pos, pos)
        p = 0
        expected = self.base_offset + rel
        while p + HEADER_BYTES <= len(buf):
            found, raw_len = _unpack_header(buf, p)
            if found < expected or (p == 0 and found != expected):
                break
            if found >= offset:
                return pos + p
            p += HEADER_BYTES + (raw_len & LENGTH_MASK)
            expected = found + 1
        if p == len(buf):
            return stop  # past the last frame of the interval: the next one is above `offset`
        self._verify_range(pos, stop)
        raise _IndexMismatch(pos)

    def read(
        self, offset: int, max_bytes: int, end_offset: int, *, first: bool
    ) -> tuple[bytes, bool]:
        """Whole frames from `offset`, at most `max_bytes` (at least one frame if `first`),
        stopping before `end_offset`. Returns (frames, reached the segment's or range's end).
        Raises CorruptDataError if any byte of them fails its checksum."""
        try:
            return self._read(offset, max_bytes, end_offset, first)
        except _IndexMismatch as exc:
            self._repair_index(exc.position, offset)
        try:
            return self._read(offset, max_bytes, end_offset, first)
        except _IndexMismatch as exc:
            raise self._corrupt(
                offset, exc.position, exc.position, "index and log disagree"
            ) from None

    def _repair_index(self, position: int, offset: int) -> None:
        """An index entry does not point at the frame it names: if the bytes there are
        intact, the index is wrong (rebuild it from the log); else the data is corrupt."""
        with contextlib.suppress(CorruptDataError):  # marks the damaged blocks, if any
            self._verify_range(0, self.size)
        c = self.chunk_bytes
        if c and {position // c, (position + HEADER_BYTES - 1) // c} & self._bad:
            raise self._corrupt(offset, position, position + HEADER_BYTES, "checksum mismatch")
        self.rebuild_index()

    def _read(
        self, offset: int, max_bytes: int, end_offset: int, first: bool
    ) -> tuple[bytes, bool]:
        start = self.position_of(offset)
        stop = self.size if end_offset >= self.next_offset else self.position_of(end_offset)
        if start >= stop and self.sparse:
            return b"", True  # a gap up to the range's or the segment's end
        if stop - start <= max_bytes:
            data, after = self._read_verified(start, stop)
            self._check_first(data, offset, start)
            if stop < self.size:  # the next frame's header, if the blocks read hold it
                if len(after) < HEADER_BYTES:
                    self._check_header_at(stop, end_offset)
                elif not self._header_fits(_unpack_header(after)[0], end_offset):
                    raise _IndexMismatch(stop)
            return data, True
        limit = start + max_bytes
        rel_q, q = self.index.floor_by_position(limit)
        buf = os.pread(self._fd, max_bytes, start)
        p = max(q - start, 0)
        size = len(buf)
        if p:  # the walk below starts at an index entry: check it holds its frame
            if p + HEADER_BYTES > size:
                self._check_header_at(q, self.base_offset + rel_q)
            elif _unpack_header(buf, p)[0] != self.base_offset + rel_q:
                raise _IndexMismatch(q)
        while p + HEADER_BYTES <= size:
            end = p + HEADER_BYTES + (_unpack_header(buf, p)[1] & LENGTH_MASK)
            if end > size:
                break
            p = end
        if p == 0:
            if not first:
                return b"", False
            length = _unpack_header(os.pread(self._fd, HEADER_BYTES, start))[1] & LENGTH_MASK
            frame = self._read_verified(start, min(start + HEADER_BYTES + length, self.size))[0]
            self._check_first(frame, offset, start)
            return frame, start + len(frame) >= stop
        data = buf[:p]
        self._verify_buffer(start, data)
        self._check_first(data, offset, start)
        return data, False

    def _header_fits(self, found: int, offset: int) -> bool:
        """Whether a frame of offset `found` is the one a position of `offset` names: that
        very offset, or in a segment with gaps the first one present from it."""
        return found == offset or (self.sparse and found > offset)

    def _check_first(self, data: bytes, offset: int, start: int) -> None:
        if len(data) < HEADER_BYTES or not self._header_fits(_unpack_header(data)[0], offset):
            raise _IndexMismatch(start)  # the bytes are verified: the position is wrong

    def _check_header_at(self, position: int, offset: int) -> None:
        header = os.pread(self._fd, HEADER_BYTES, position)
        if len(header) < HEADER_BYTES or not self._header_fits(_unpack_header(header)[0], offset):
            self._verify_range(position, position + HEADER_BYTES)
            raise _IndexMismatch(position)

    def modified_ms(self) -> int:
        st = os.fstat(self._fd) if self._fd >= 0 else os.stat(self.log_path)
        return int(st.st_mtime * 1000)

    # -- lifecycle -----------------------------------------------------------------------

    def close(self, *, trim: bool = True) -> None:
        if self._fd < 0:
            return
        if trim:
            self._save_times()
        try:
            self.index.close(trim=trim)
            if self.sidecar is not None:
                self.sidecar.close()
        finally:
            os.close(self._fd)
            self._fd = -1
            del self.index  # its entries are loaded again on open (memory: open segments only)
            self.sidecar = None
            self._times = None

    def delete(self) -> None:
        self.close(trim=False)
        self.log_path.unlink(missing_ok=True)
        self.index_path.unlink(missing_ok=True)
        self.checksum_path.unlink(missing_ok=True)
        self.time_index_path.unlink(missing_ok=True)


class SyncTarget:
    """One segment's fsync made outside its log's lock: the `.log` bytes below `size` (and
    the sidecar's entries for them) as they were when it was taken, through duplicated
    descriptors (a closed segment's descriptor numbers may be reused by then; a deleted
    file's duplicate stays valid). `mark`: a written segment, whose sidecar gets a flushed
    mark at `size` afterwards (`Segment.mark_flushed`, under the lock)."""

    __slots__ = ("log_fd", "mark", "segment", "sidecar_fd", "size")

    def __init__(self, segment: Segment, size: int, log_fd: int, sidecar_fd: int, mark: bool):
        self.segment = segment
        self.size = size
        self.log_fd = log_fd
        self.sidecar_fd = sidecar_fd
        self.mark = mark

    def sync(self) -> None:
        """fsync both files (in parallel, as `Segment.flush`). OSError on failure."""
        if self.sidecar_fd < 0:
            os.fdatasync(self.log_fd)
            return
        pending = _fsync_pool().submit(os.fdatasync, self.sidecar_fd)
        try:
            os.fdatasync(self.log_fd)
        finally:
            pending.result()

    def close(self) -> None:
        for fd in (self.log_fd, self.sidecar_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.log_fd = self.sidecar_fd = -1


@functools.cache
def _fsync_pool() -> ThreadPoolExecutor:
    """Threads that fsync sidecars while the caller fsyncs the log (os.fdatasync releases
    the GIL); errors come back through the future, nothing runs unsupervised."""
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="replog-fsync")


class _IndexMismatch(Exception):
    """An index-derived position does not hold the frame it should (internal to reads)."""

    def __init__(self, position: int) -> None:
        super().__init__(position)
        self.position = position
