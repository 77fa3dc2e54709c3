"""A partition's ordered list of segments in one directory (seed 003's `Log`).

Files: `{base_offset:020d}.log` / `.idx` / `.crc` triples; the segment with the highest base
offset is the active one. Segments are contiguous: each one's base offset is the previous one's next
offset. Rotation follows seed 001's rule: roll to a new segment *before* a write that would
push the active segment past `segment_bytes_max`, so a segment never exceeds it unless a
single record alone is larger. A batch may span segments; it costs one `write` per segment
it touches (plus one write of its checksums), and on any I/O error the whole batch is rolled
back (nothing partial remains). A segment without checksums (written by an older version)
is never appended to: the log rolls first, so every new byte is checksummed.

Not thread-safe: `PartitionLog` serialises access.
"""

from __future__ import annotations

import errno
import re
from bisect import bisect_right
from collections import Counter
from pathlib import Path

from replog.errors import (
    CorruptDataError,
    ReplogError,
    StorageError,
    StorageFullError,
    TooManyOpenFilesError,
)
from replog.storage.config import StorageConfig
from replog.storage.integrity import IntegrityIssue
from replog.storage.segment import Segment

_LOG_NAME = re.compile(r"(\d{20})\.log")
_SIDE_NAME = re.compile(r"(\d{20})\.(?:idx|crc|timeindex)")


def _newest_ms(seg: Segment) -> int:
    """The segment's newest record timestamp, or its file's mtime when it has none (or its
    bytes cannot be read to find it: retention never fails on a damaged segment)."""
    try:
        newest = seg.newest_timestamp()
    except CorruptDataError:
        newest = None
    return seg.modified_ms() if newest is None else newest


FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
FILES_ERRNOS = (errno.EMFILE, errno.ENFILE)
# Every OSError storage turned into a typed error, by reason (`replog_storage_errors_total`).
ERRORS: Counter[str] = Counter()


def storage_error(exc: OSError, what: str) -> ReplogError:
    """The typed error of an OSError of the disk (an environment fault, never a bug): a full
    disk or quota (STORAGE_FULL), no file descriptor left (TOO_MANY_OPEN_FILES), anything
    else (EIO, ...: STORAGE_ERROR, which takes the partition offline)."""
    err: ReplogError
    if exc.errno in FULL_ERRNOS:
        err = StorageFullError(f"{what}: the disk is full ({exc.strerror})")
    elif exc.errno in FILES_ERRNOS:
        err = TooManyOpenFilesError(
            f"{what}: no file descriptor left ({exc.strerror})", limit="open_files"
        )
    else:
        err = StorageError(f"{what}: {exc}")
    ERRORS[err.reason] += 1
    return err


class SegmentLog:
    def __init__(self, directory: Path, config: StorageConfig) -> None:
        self.directory = directory
        self.config = config
        directory.mkdir(parents=True, exist_ok=True)
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self._dirty: set[Segment] = set()
        bases = sorted(
            int(m.group(1)) for p in directory.iterdir() if (m := _LOG_NAME.fullmatch(p.name))
        )
        for p in directory.iterdir():  # an index or sidecar whose log is gone is a leftover
            m = _SIDE_NAME.fullmatch(p.name)
            leftover = p.name.endswith((".crc.tmp", ".timeindex.tmp"))
            if (m and int(m.group(1)) not in bases) or leftover:
                p.unlink()
        try:
            for base in bases:
                if self.segments and self.segments[-1].next_offset != base:
                    # A gap: only a valid prefix survives; later segments are unreachable.
                    Segment(directory, base, config, create=False).delete()
                    continue
                self._add(Segment(directory, base, config, create=False))
            if not self.segments:
                self._add(Segment(directory, 0, config, create=True))
        except BaseException:
            self.close()
            raise

    def _add(self, segment: Segment) -> None:
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_start_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- writes --------------------------------------------------------------------------

    def append(self, buf: bytes, ends: list[int]) -> None:
        """Append pre-encoded frames that start at the log end offset.

        `ends[i]` is the end position of frame i within `buf`. Rolls segments as needed.
        Raises StorageFullError / StorageError with nothing appended.
        """
        if not ends:
            return
        leo = self.log_end_offset
        segments_before = len(self.segments)
        mv = memoryview(buf)
        limit = self.config.segment_bytes_max
        n = len(ends)
        i = 0
        pos = 0
        try:
            while i < n:
                seg = self.active
                k = bisect_right(ends, pos + (limit - seg.size), i, n)
                if k == i or not seg.checksummed:
                    if seg.size > 0:
                        self._roll()
                        continue
                    k = i + 1  # one record alone larger than a segment gets a segment
                end = ends[k - 1]
                seg.append(mv[pos:end], leo + i, ends, i, k, pos)
                self._dirty.add(seg)
                i, pos = k, end
        except OSError as exc:
            self._rollback(leo, segments_before)
            raise storage_error(exc, f"append to {self.directory}") from exc
        finally:
            mv.release()

    def _roll(self) -> None:
        self.active.seal()
        self._add(Segment(self.directory, self.log_end_offset, self.config, create=True))

    def _rollback(self, leo: int, segments_before: int) -> None:
        while len(self.segments) > segments_before:
            seg = self.segments.pop()
            self._bases.pop()
            self._dirty.discard(seg)
            seg.delete()
        if self.log_end_offset > leo:
            self.active.truncate_to(leo)

    def reset_to(self, offset: int) -> None:
        """Drop every segment and start empty at `offset`. Oldest segments go first, so a crash
        part-way leaves a contiguous suffix (or nothing: an empty log at 0). The lists are
        replaced at the end in one step: a lock-free reader (`log_start_offset`, metrics)
        never sees a log without segments."""
        assert offset >= 0
        for seg in self.segments:
            self._dirty.discard(seg)
            seg.delete()
        segment = Segment(self.directory, offset, self.config, create=True)
        self.segments, self._bases = [segment], [segment.base_offset]

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or above `offset` (log_start_offset <= offset <= LEO)."""
        assert self.log_start_offset <= offset <= self.log_end_offset
        while len(self.segments) > 1 and self.active.base_offset >= offset:
            seg = self.segments.pop()
            self._bases.pop()
            self._dirty.discard(seg)
            seg.delete()
        seg = self.active  # the only segment may be emptied down to its base offset
        seg.truncate_to(offset)
        self._dirty.add(seg)

    def delete_oldest(self, count: int) -> None:
        """Delete the `count` oldest segments (never the active one)."""
        assert count < len(self.segments)
        for seg in self.segments[:count]:
            self._dirty.discard(seg)
            seg.delete()
        del self.segments[:count]
        del self._bases[:count]

    def retention_candidates(
        self, now_ms: int, offset_limit: int, retention_bytes: int | None, retention_ms: int | None
    ) -> int:
        """How many oldest closed segments retention deletes (none at or above `offset_limit`).
        A segment's age is its newest record timestamp where its records have timestamps
        (Kafka's rule: a producer's future timestamp keeps it), else its file's mtime."""
        total = self.size_bytes
        count = 0
        for seg in self.segments[:-1]:
            if seg.next_offset > offset_limit:
                break
            too_big = retention_bytes is not None and total > retention_bytes
            too_old = retention_ms is not None and _newest_ms(seg) < now_ms - retention_ms
            if not (too_big or too_old):
                break
            total -= seg.size
            count += 1
        return count

    def flush(self) -> None:
        """fsync every segment written since the last flush."""
        for seg in list(self._dirty):
            try:
                seg.flush()
            except OSError as exc:
                raise storage_error(exc, f"fsync {seg.log_path}") from exc
            self._dirty.discard(seg)

    @property
    def dirty(self) -> bool:
        return bool(self._dirty)

    # -- reads ---------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, end_offset: int) -> bytes:
        """Whole frames from `offset` up to `max_bytes` (at least one frame), before
        `end_offset`. The caller checks log_start_offset <= offset <= end_offset <= LEO."""
        if offset >= end_offset:
            return b""
        i = bisect_right(self._bases, offset) - 1
        chunks: list[bytes] = []
        budget = max_bytes
        while i < len(self.segments) and offset < end_offset:
            seg = self.segments[i]
            i += 1
            if offset >= seg.next_offset:
                continue
            data, complete = seg.read(offset, budget, end_offset, first=not chunks)
            if data:
                chunks.append(data)
                budget -= len(data)
            if not complete or budget <= 0:
                break
            offset = seg.next_offset
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def offset_for_time(self, timestamp_ms: int, end_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record below `end_offset` whose timestamp is
        >= `timestamp_ms`; None if there is none. Segments whose newest timestamp is older
        are passed over without reading their records."""
        for seg in self.segments:
            if seg.base_offset >= end_offset:
                break
            found = seg.offset_for_time(timestamp_ms)
            if found is not None:
                return found if found[0] < end_offset else None
        return None

    # -- integrity -----------------------------------------------------------------------

    def issues(self) -> list[IntegrityIssue]:
        return [issue for seg in self.segments for issue in seg.issues()]

    def scrub(
        self, base_offset: int, position: int, max_bytes: int
    ) -> tuple[tuple[int, int] | None, int]:
        """Verify about `max_bytes` from `position` of the segment at `base_offset` (or from
        the start of the first one after it, if it is gone). Returns (the cursor to continue
        from, or None once the last segment is done; bytes verified)."""
        i = bisect_right(self._bases, base_offset) - 1
        if i < 0 or self._bases[i] != base_offset:
            i += 1
            position = 0
        if i >= len(self.segments):
            return None, 0
        seg = self.segments[i]
        start = min(position, seg.size)
        position = seg.scrub(start, max_bytes)
        verified = position - start
        if position < seg.size:
            return (seg.base_offset, position), verified
        if i + 1 < len(self.segments):
            return (self.segments[i + 1].base_offset, 0), verified
        return None, verified

    # -- lifecycle -----------------------------------------------------------------------

    def close(self, *, trim: bool = True) -> None:
        for seg in self.segments:
            seg.close(trim=trim)
