"""A partition's ordered list of segments in one directory (seed 003's `Log`).

Files: `{base_offset:020d}.log` / `.idx` / `.crc` triples; the segment with the highest base
offset is the active one. Segments are contiguous: each one's base offset is the previous
one's next offset. Rotation follows seed 001's rule: roll to a new segment *before* a write
that would push the active segment past `segment_bytes_max`, so a segment never exceeds it
unless a single record alone is larger (and before any write once it is `segment_ms` old).
A batch may span segments; it costs one `write` per segment
it touches (plus one write of its checksums), and on any I/O error the whole batch is rolled
back (nothing partial remains). A segment without checksums (written by an older version)
is never appended to: the log rolls first, so every new byte is checksummed.

Not thread-safe: `PartitionLog` serialises access.
"""

from __future__ import annotations

import errno
import os
import re
import time
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

from replog.errors import (
    CorruptDataError,
    ReplogError,
    StorageError,
    StorageFullError,
    TooManyOpenFilesError,
)
from replog.frames import OFFSET_MAX
from replog.storage import swaps
from replog.storage.config import StorageConfig
from replog.storage.integrity import IntegrityIssue
from replog.storage.open_files import FILES_PER_SEGMENT, OpenFiles, OwnedLock
from replog.storage.segment import Segment, SyncTarget

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
# Segments recovered (scanned) when logs were opened, process-wide (tests, metrics).
RECOVERIES: Counter[str] = Counter()


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


def _open_active(seg: Segment) -> Segment:
    seg.open_files(changed_ok=True)
    return seg


class _OpenSegment:
    """The node-wide LRU's entry (`open_files.py`) for one open segment of a log."""

    __slots__ = ("log", "segment")

    def __init__(self, log: SegmentLog, segment: Segment) -> None:
        self.log = log
        self.segment = segment

    def park(self) -> bool:
        return self.log._park(self)


def _segment_sizes(directory: Path) -> dict[int, int]:
    """Base offset -> size of each segment's log file in `directory`, once a swap of the
    cleaner that a crash cut is finished or discarded and leftovers (an index or sidecar
    whose log is gone, temporary files) are deleted. One listing of the directory (two
    after a crash in a swap)."""
    with os.scandir(directory) as listing:
        names = [(e.name, e) for e in listing]
    if any(swaps.is_cleaner_leftover(name) for name, _ in names):
        swaps.recover(directory)  # a swap a crash cut: finished or discarded first
        with os.scandir(directory) as listing:
            names = [(e.name, e) for e in listing]
    sizes: dict[int, int] = {}
    for name, entry in names:
        if m := _LOG_NAME.fullmatch(name):
            sizes[int(m.group(1))] = entry.stat().st_size
    for name, _ in names:  # an index or sidecar whose log is gone is a leftover
        m = _SIDE_NAME.fullmatch(name)
        leftover = name.endswith((".crc.tmp", ".timeindex.tmp"))
        if (m and int(m.group(1)) not in sizes) or leftover:
            (directory / name).unlink()
    return sizes


class SegmentLog:
    def __init__(
        self,
        directory: Path,
        config: StorageConfig,
        *,
        recovery_point: int | None = None,
        clean_end: int | None = None,
        files: OpenFiles | None = None,
        lock: OwnedLock | None = None,
        sparse_end: int = 0,
    ) -> None:
        """Open the log in `directory`. Segments that end at or below `recovery_point`
        (every byte below it was flushed) are not recovered, nor opened: their handles are
        opened on first use. With `clean_end` (the log end offset a clean close recorded)
        nothing is recovered. `files` is the node's open-file budget and `lock` the lock
        its owner holds around every call (a segment is closed by the LRU only under it).
        Segments that start below `sparse_end` may have offset gaps (the log cleaner's,
        `cleaner.py`); a swap of a cleaned segment that a crash interrupted is finished or
        discarded first."""
        self.directory = directory
        self.sparse_end = sparse_end
        self.config = config
        self._files = files
        self._lock = lock
        self._entries: dict[Segment, _OpenSegment] = {}  # the open segments
        directory.mkdir(parents=True, exist_ok=True)
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self._dirty: set[Segment] = set()
        self._unsynced: set[Segment] = set()  # recovered at open, not fsynced since
        self.recovered = 0  # segments recovered (scanned) by this open
        sizes = _segment_sizes(directory)
        bases = sorted(sizes)
        trusted_end = clean_end if clean_end is not None else recovery_point
        try:
            for i, base in enumerate(bases):
                if self.segments and self.segments[-1].next_offset != base:
                    # A gap: only a valid prefix survives; later segments are unreachable.
                    Segment(directory, base, config, create=False, known=(base, 0)).delete()
                    continue
                last = i == len(bases) - 1
                end = clean_end if last else bases[i + 1]
                # (the active one too: a follower's, copying a range its leader compacted)
                sparse = base < sparse_end
                opening = partial(
                    Segment,
                    directory,
                    base,
                    config,
                    create=False,
                    sparse=sparse,
                    offset_end=bases[i + 1] if sparse and not last else OFFSET_MAX,
                )
                if end is not None and trusted_end is not None and base <= end <= trusted_end:
                    self._add(opening(known=(end, sizes[base])))
                    continue
                seg = self._opening(opening)
                if sparse and not last:  # its last records may be gone: it ends at the next
                    seg.next_offset = bases[i + 1]
                self.recovered += 1
                RECOVERIES["segments"] += 1
                self._add(seg)
                self._adopt(seg)
                # Its bytes may be in the page cache only: fsynced by the next flush, after
                # which the recovery point may move past it.
                self._unsynced.add(seg)
            if not self.segments:
                self._add(self._new_segment(0))
            active = self.active
            if not active.is_open:  # closed cleanly: whole unless the files say otherwise
                self._opening(partial(_open_active, active))
                self.recovered += active.recovered
                RECOVERIES["segments"] += active.recovered
                self._adopt(active)
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

    # -- open files ------------------------------------------------------------------------

    def _new_segment(self, base_offset: int) -> Segment:
        seg = self._opening(lambda: Segment(self.directory, base_offset, self.config, create=True))
        self._adopt(seg)
        return seg

    def _opening(self, open_: Callable[[], Segment]) -> Segment:
        """`open_()`; out of descriptors (EMFILE), park every other idle open segment of the
        node first and try once more."""
        try:
            return open_()
        except OSError as exc:
            if exc.errno not in FILES_ERRNOS or self._files is None:
                raise
            self._files.park(self._files.others(None))
            return open_()

    def _adopt(self, seg: Segment) -> None:
        """Count the just opened `seg` in the budget (parking the least recently used)."""
        entry = _OpenSegment(self, seg)
        self._entries[seg] = entry
        if self._files is not None:
            self._files.park(self._files.use(entry, FILES_PER_SEGMENT))

    def use(self, seg: Segment) -> Segment:
        """`seg`, opened if it was closed, counted as just used."""
        entry = self._entries.get(seg)
        if entry is None:

            def reopen() -> Segment:
                seg.open_files()
                return seg

            self._adopt(self._opening(reopen))
        elif self._files is not None and not self._files.touch(entry):
            self._files.park(self._files.use(entry, FILES_PER_SEGMENT))
        return seg

    def _forget(self, seg: Segment) -> None:
        """`seg` is being closed or deleted: out of the budget and the dirty set."""
        self._dirty.discard(seg)
        self._unsynced.discard(seg)
        entry = self._entries.pop(seg, None)
        if entry is not None and self._files is not None:
            self._files.release(entry)

    def _park(self, entry: _OpenSegment) -> bool:
        """For the LRU: close the segment of `entry` if no other thread is inside this log
        (its owner's lock is free, or held by this very thread, which is between two uses
        of segments) and nothing found wrong lives in it; a written one is fsynced first."""
        lock = self._lock
        if lock is None:
            return False
        acquired = lock.try_acquire()
        if acquired is None:
            return False  # busy in another thread: a reader may be inside this segment
        try:
            seg = entry.segment
            if self._entries.get(seg) is not entry:
                return True  # closed meanwhile
            if seg.has_issues:
                return False  # findings live in the open segment
            try:
                if seg in self._dirty:
                    seg.flush()
                elif seg in self._unsynced:
                    seg.sync()
            except OSError:
                return False
            self._forget(seg)
            seg.close()
            return True
        finally:
            if acquired:
                lock.release()

    def release_files(self) -> None:
        """Close every open segment (the caller flushed); each reopens on use."""
        for seg in list(self._entries):
            self._forget(seg)
            seg.close()

    @property
    def open_segments(self) -> int:
        return len(self._entries)

    def open_active(self) -> None:
        self.use(self.active)

    # -- writes --------------------------------------------------------------------------

    def append(
        self, buf: bytes, ends: list[int], offsets: list[int] | None = None, end: int = 0
    ) -> None:
        """Append pre-encoded frames that start at the log end offset.

        `ends[i]` is the end position of frame i within `buf`. Rolls segments as needed.
        Raises StorageFullError / StorageError with nothing appended.

        With `offsets` (each frame's offset: ascending from the log end, gaps allowed; a
        follower copying a range its leader's cleaner compacted) the log then ends at `end`:
        each run of consecutive offsets is appended as above, the active segment skipping
        the gap before it (`Segment.skip_to`: it reads as sparse; the caller marked it so
        on disk, `PartitionLog`); a gap at the end rolls a new segment at `end`, so that
        the log end survives a crash (a segment's end is the next one's base offset).
        """
        if not ends and offsets is None:
            return
        leo = self.log_end_offset
        segments_before = len(self.segments)
        mv = memoryview(buf)
        try:
            active = self.active
            if active.size and time.time() * 1000 - active.created_ms >= self.config.segment_ms:
                self._roll()  # old enough (segment.ms): closed, so that it may be cleaned
            if offsets is None:
                self._append_run(mv, ends, 0, len(ends), leo)
            else:
                for lo, hi in _runs(offsets):
                    self.use(self.active).skip_to(offsets[lo])
                    self._append_run(mv, ends, lo, hi, offsets[lo])
                if end > self.log_end_offset:
                    active = self.use(self.active)
                    active.skip_to(end)
                    self._dirty.add(active)
                    self._roll()
        except OSError as exc:
            self._rollback(leo, segments_before)
            raise storage_error(exc, f"append to {self.directory}") from exc
        finally:
            mv.release()

    def _append_run(self, mv: memoryview, ends: list[int], lo: int, n: int, first: int) -> None:
        """Frames `lo..n-1` of a batch, at consecutive offsets from `first`."""
        limit = self.config.segment_bytes_max
        i = lo
        pos = ends[lo - 1] if lo else 0
        while i < n:
            seg = self.use(self.active)
            k = bisect_right(ends, pos + (limit - seg.size), i, n)
            if k == i or not seg.checksummed:
                if seg.size > 0:
                    self._roll()
                    continue
                k = i + 1  # one record alone larger than a segment gets a segment
            end = ends[k - 1]
            seg.append(mv[pos:end], first + (i - lo), ends, i, k, pos)
            self._dirty.add(seg)
            i, pos = k, end

    def _roll(self) -> None:
        self.use(self.active).seal()
        self._add(self._new_segment(self.log_end_offset))

    def _rollback(self, leo: int, segments_before: int) -> None:
        while len(self.segments) > segments_before:
            seg = self.segments.pop()
            self._bases.pop()
            self._forget(seg)
            seg.delete()
        if self.log_end_offset > leo:
            self.use(self.active).truncate_to(leo)

    def reset_to(self, offset: int) -> None:
        """Drop every segment and start empty at `offset`. Oldest segments go first, so a crash
        part-way leaves a contiguous suffix (or nothing: an empty log at 0). The lists are
        replaced at the end in one step: a lock-free reader (`log_start_offset`, metrics)
        never sees a log without segments."""
        assert offset >= 0
        for seg in self.segments:
            self._forget(seg)
            seg.delete()
        segment = self._new_segment(offset)
        self.segments, self._bases = [segment], [segment.base_offset]

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or above `offset` (log_start_offset <= offset <= LEO)."""
        assert self.log_start_offset <= offset <= self.log_end_offset
        # A cleaned segment never becomes the last one (its end offset would be lost): the
        # one after it is emptied instead.
        while len(self.segments) > 1 and (
            self.active.base_offset > offset
            or (self.active.base_offset == offset and not self.segments[-2].sparse)
        ):
            seg = self.segments.pop()
            self._bases.pop()
            self._forget(seg)
            seg.delete()
        seg = self.use(self.active)  # the only segment may be emptied down to its base offset
        seg.truncate_to(offset)
        self._dirty.add(seg)

    def delete_oldest(self, count: int) -> None:
        """Delete the `count` oldest segments (never the active one)."""
        assert count < len(self.segments)
        for seg in self.segments[:count]:
            self._forget(seg)
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
            too_old = retention_ms is not None and _newest_ms(self.use(seg)) < now_ms - retention_ms
            if not (too_big or too_old):
                break
            total -= seg.size
            count += 1
        return count

    def flush(self) -> None:
        """fsync every segment written since the last flush."""
        for seg in list(self._dirty):
            try:
                seg.flush()  # a written segment stays open until flushed (`_park`)
            except OSError as exc:
                raise storage_error(exc, f"fsync {seg.log_path}") from exc
            self._dirty.discard(seg)
        for seg in list(self._unsynced):
            try:
                seg.sync()
            except OSError as exc:
                raise storage_error(exc, f"fsync {seg.log_path}") from exc
            self._unsynced.discard(seg)

    def sync_targets(self) -> list[SyncTarget]:
        """Under the lock: the fsyncs that make every byte written so far durable, to be
        made outside it (`Segment.sync_target`); StorageError (nothing taken) if a
        descriptor cannot be duplicated. The segments stay dirty until `synced`."""
        targets: list[SyncTarget] = []
        try:
            for seg in self._dirty:
                targets.append(seg.sync_target(mark=True))
            for seg in self._unsynced - self._dirty:
                targets.append(seg.sync_target(mark=False))
        except OSError as exc:
            for target in targets:
                target.close()
            raise storage_error(exc, f"fsync {self.directory}") from exc
        return targets

    def synced(self, targets: list[SyncTarget]) -> None:
        """Under the lock, after every one of `targets` synced and with no truncation or
        reset since they were taken: mark the sidecars flushed where they were, and a
        segment clean unless it was written meanwhile (a segment's size only grows without
        a truncation; a failed append's rollback restores it exactly). A segment closed or
        deleted meanwhile was flushed by its closing, or is gone: nothing to do. OSError
        from a sidecar's mark."""
        for target in targets:
            seg = target.segment
            self._unsynced.discard(seg)
            if not target.mark:
                continue
            seg.mark_flushed(target.size)
            if seg.size == target.size:
                self._dirty.discard(seg)

    @property
    def dirty(self) -> bool:
        return bool(self._dirty or self._unsynced)

    def segment_at(self, base_offset: int) -> Segment | None:
        i = bisect_right(self._bases, base_offset) - 1
        return self.segments[i] if i >= 0 and self._bases[i] == base_offset else None

    def closed_below(
        self, offset_limit: int, newest_ms_max: int | None
    ) -> list[tuple[int, int, int]]:
        """(base, end, bytes) of the closed segments ending at or below `offset_limit`, up to
        the first one whose newest record (or file, `_newest_ms`) is after `newest_ms_max`
        (None: no such limit, and no segment is opened)."""
        out = []
        for seg in self.segments[:-1]:
            if seg.next_offset > offset_limit:
                break
            if newest_ms_max is not None and _newest_ms(self.use(seg)) > newest_ms_max:
                break
            out.append((seg.base_offset, seg.next_offset, seg.size))
        return out

    def swap_cleaned(self, seg: Segment, cleaned: Segment) -> None:
        """Put the cleaned copy `cleaned` (closed, flushed, in `swaps.cleaning_dir`) in the
        place of `seg`, a closed segment of this log (see `swaps.py`). On an OSError before
        the commit point nothing changed; after it, the new files are in place."""
        i = self.segments.index(seg)
        assert i < len(self.segments) - 1, "the active segment is never cleaned"
        assert (cleaned.base_offset, cleaned.next_offset) == (seg.base_offset, seg.next_offset)
        self._forget(seg)
        seg.close()
        swaps.swap_in(self.directory, seg.base_offset)
        new = Segment(
            self.directory,
            seg.base_offset,
            self.config,
            create=False,
            known=(cleaned.next_offset, cleaned.size),
            sparse=True,
            offset_end=self.segments[i + 1].base_offset,
        )
        self.segments[i] = new

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
            data, complete = self.use(seg).read(offset, budget, end_offset, first=not chunks)
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
            found = self.use(seg).offset_for_time(timestamp_ms)
            if found is not None:
                return found if found[0] < end_offset else None
        return None

    # -- integrity -----------------------------------------------------------------------

    def issues(self) -> list[IntegrityIssue]:
        """Findings live in open segments (one with findings is never closed by the LRU)."""
        open_ = sorted(self._entries, key=lambda seg: seg.base_offset)
        return [issue for seg in open_ for issue in seg.issues()]

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
        seg = self.use(self.segments[i])
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
        """Close the open segments: time proportional to those (within the budget), never to
        the whole log."""
        for seg in list(self._entries):
            self._forget(seg)
            seg.close(trim=trim)


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    """(lo, hi) of each run of consecutive offsets in ascending `offsets`."""
    breaks = [i for i in range(1, len(offsets)) if offsets[i] != offsets[i - 1] + 1]
    bounds = [0, *breaks, len(offsets)]
    return [(bounds[j], bounds[j + 1]) for j in range(len(bounds) - 1) if bounds[j] < bounds[j + 1]]
