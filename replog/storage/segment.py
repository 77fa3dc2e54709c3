"""One segment: `{base_offset:020d}.log` (frames, see `replog.frames`), its sparse index
(`.idx`, see `index.py`), its CRC32C sidecar (`.crc`, see `checksums.py`) and, for a
partition whose records have timestamps, its time index (`.timeindex`, see
`time_index.py`: built from the log on first use, kept up to date by appends, written when
the segment is sealed or closed cleanly and deleted before the segment changes).

The `.log` file holds frames for offsets `base_offset .. next_offset - 1`, back to back, with
nothing else: its size is the write position. Appends are one `write` per call (callers pass
a whole pre-encoded batch) followed by one `write` of the sidecar's entries for it; reads
are one `pread` of the needed byte range, located through the index, then a short
in-memory scan (at most one index interval).

Reads verify: every block of `chunk_bytes` that the returned range touches is checked
against its CRC32C as a whole (the bytes of the first and last block outside the range are
read too), with one C call per block, none per record. A mismatch marks the block corrupt
and raises `CorruptDataError`; a corrupt block is never served again by this process. The
index is checked against the frames it points at on a segment's first read and rebuilt from
the log if it disagrees.

Recovery (`create=False`) trusts neither the index's size nor the log's tail. With a
sidecar, it first verifies every block from the newest flushed position (and from the last
index entry) to the end of the coverage: a failing block at or past the flushed position is
a torn write, cut at the newest entry end in it that still verifies (else at the last whole
frame before the block); a failing block below it is corruption, marked and kept. Then it
scans frames from the last good index entry, up to the verified end, and stops at the first
frame whose offset is not the next one or that is cut short (inside a corrupt block it
searches for the next frame instead of cutting committed data). The log is truncated there,
the sidecar rewritten to match, index entries past it dropped and missing ones rebuilt.

A segment without a `.crc` (written before checksums existed) opens and reads unverified
and is reported (`unverified`); the log rolls to a new, checksummed segment before
appending to it. Its recovery is the structural one above without the checksum steps.
"""

from __future__ import annotations

import contextlib
import functools
import os
from bisect import bisect_left, bisect_right
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from replog.errors import CorruptDataError
from replog.frames import HEADER, HEADER_BYTES, LENGTH_MASK, FrameError, scan
from replog.storage import integrity
from replog.storage.checksums import (
    Coverage,
    Sidecar,
    SidecarHeaderError,
    checksum_file_name,
    combine,
    crc32c_extend,
    crc32c_value,
    shift,
)
from replog.storage.config import NO_TIMESTAMP, StorageConfig
from replog.storage.index import SparseIndex
from replog.storage.integrity import IntegrityIssue
from replog.storage.time_index import TimeIndex, build, time_index_file_name

_unpack_header = HEADER.unpack_from
_RESYNC_OFFSETS_MAX = 16  # frames a damaged header may hide before recovery gives up
_RESYNC_TRIES_MAX = 64


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
        self.checksum_path = directory / checksum_file_name(base_offset)
        self.time_index_path = directory / time_index_file_name(base_offset)
        self._time_reader = config.timestamps
        self._times: TimeIndex | None = None  # built on first use (time_index.py)
        self._time_file_maybe = not create  # a `.timeindex` may exist for these bytes
        self.sidecar: Sidecar | None = None
        self._bad: set[int] = set()  # blocks known corrupt (never served)
        self._unreadable = False  # the whole segment is corrupt (its sidecar header is)
        self._issues: list[tuple[str, int, int, str, tuple[int, int] | None]] = []
        self._index_checked = create
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | (os.O_EXCL if create else 0)
        if create:
            # A stale index of a segment deleted earlier must not be mistaken for this one's.
            self.index_path.unlink(missing_ok=True)
            self.time_index_path.unlink(missing_ok=True)
        self._fd = os.open(self.log_path, flags, 0o644)
        try:
            log_size = os.fstat(self._fd).st_size
            self.index = SparseIndex(self.index_path, config.index_bytes_initial, log_size)
            coverage = self._open_sidecar(config, log_size, create=create)
        except BaseException:
            os.close(self._fd)
            if create:
                self.log_path.unlink(missing_ok=True)
                self.checksum_path.unlink(missing_ok=True)
            raise
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        if not create:
            try:
                self._recover(log_size, coverage)
            except BaseException:
                self.close(trim=False)
                raise

    def _open_sidecar(
        self, config: StorageConfig, log_size: int, *, create: bool
    ) -> Coverage | None:
        if create or (log_size == 0 and not self._sidecar_usable()):
            self.sidecar = Sidecar.create(self.checksum_path, config.checksum_chunk_bytes)
            return None
        if not self.checksum_path.exists():
            self._note(integrity.UNVERIFIED, 0, log_size, "no .crc: written before checksums")
            return None
        try:
            self.sidecar, coverage = Sidecar.open(self.checksum_path)
        except SidecarHeaderError as exc:
            self._unreadable = True
            self._note(integrity.CORRUPT, 0, log_size, f"{self.checksum_path.name}: {exc}")
            return None
        return coverage

    def _sidecar_usable(self) -> bool:
        try:
            Sidecar.open(self.checksum_path)[0].close()
        except (OSError, SidecarHeaderError):
            return False
        return True

    @property
    def checksummed(self) -> bool:
        """Whether appends to this segment get checksums (False: legacy or damaged sidecar)."""
        sidecar = self.sidecar
        return sidecar is not None and not (sidecar.crcs and sidecar.crcs[-1] is None)

    @property
    def chunk_bytes(self) -> int:
        return self.sidecar.chunk_bytes if self.sidecar is not None else 0

    # -- findings ------------------------------------------------------------------------

    def _note(
        self, kind: str, lo: int, hi: int, detail: str, offsets: tuple[int, int] | None = None
    ) -> None:
        self._issues.append((kind, lo, hi, detail, offsets))

    def _mark_bad(self, block: int, detail: str) -> None:
        if block in self._bad:
            return
        self._bad.add(block)
        c = self.chunk_bytes
        self._note(integrity.CORRUPT, block * c, (block + 1) * c, detail)

    def issues(self) -> list[IntegrityIssue]:
        out = []
        for kind, lo, hi, detail, offsets in self._issues:
            hi = min(hi, max(self.size, lo))
            first, end = offsets if offsets is not None else self.offsets_between(lo, hi)
            out.append(IntegrityIssue(kind, self.log_path.name, lo, hi, first, end, detail))
        return out

    def corrupt_blocks(self) -> list[int]:
        return sorted(self._bad)

    def offsets_between(self, lo: int, hi: int) -> tuple[int, int]:
        """Offsets of the records that may have a byte in `[lo, hi)` (index granularity)."""
        index = self.index
        if not len(index) or lo >= self.size:
            return self.next_offset, self.next_offset
        rel, _ = index.floor_by_position(lo)
        j = bisect_left(index.positions, hi)
        end = self.base_offset + index.relative_offsets[j] if j < len(index) else self.next_offset
        return self.base_offset + rel, max(end, self.base_offset + rel + 1)

    # -- recovery ------------------------------------------------------------------------

    def _recover(self, log_size: int, coverage: Coverage | None) -> None:
        index = self.index
        sidecar = self.sidecar
        limit = log_size
        if sidecar is not None and coverage is not None:
            limit = min(log_size, coverage.covered_end)
            if coverage.damaged:
                kind = integrity.TORN_TAIL if coverage.torn_tail else integrity.SIDECAR_DAMAGED
                what = f"{self.checksum_path.name}: entries {coverage.damaged[:8]} invalid"
                self._note(kind, 0, 0, what, (self.base_offset, self.base_offset))
            flushed = min(coverage.flushed_position, log_size)
            if flushed > coverage.covered_end and sidecar.chunk_bytes:
                # Flushed bytes past the coverage: their entries were lost, not torn off.
                c = sidecar.chunk_bytes
                for k in range(coverage.covered_end // c, -(-flushed // c)):
                    coverage.accept_chunk(min((k + 1) * c, flushed), 0)
                    coverage.crcs[k] = None
                    coverage.lost_blocks.append(k)
                coverage.history = [h for h in coverage.history if h[0] <= sidecar.covered_end]
                sidecar.crcs = list(coverage.crcs)
                sidecar.covered_end = coverage.covered_end
                sidecar.flushed_position = flushed
                limit = min(log_size, coverage.covered_end)
            for k in sorted(set(coverage.lost_blocks)):
                self._mark_bad(k, "checksum lost (sidecar entry damaged)")
        verified_end = limit
        while True:
            start_pos, expected = self._last_good_index_entry(verified_end)
            if sidecar is None or coverage is None:
                break
            verified_end = self._verify_tail(coverage, log_size, start_pos)
            if verified_end >= start_pos:
                break  # else the torn part reaches below the last index entry: again
        buf = os.pread(self._fd, verified_end - start_pos, start_pos)
        pos, expected = self._scan_frames(buf, start_pos, expected)
        valid_end = start_pos + pos
        index.drop_from_position(valid_end)
        if sidecar is not None and valid_end < sidecar.covered_end:
            self._truncate_sidecar(valid_end, coverage)
        if valid_end < log_size:
            self._note(
                integrity.TORN_TAIL,
                valid_end,
                valid_end,
                f"recovery cut {log_size - valid_end} bytes at position {valid_end}",
                (expected, expected),
            )
            os.ftruncate(self._fd, valid_end)
        self.size = valid_end
        self.next_offset = expected
        c = self.chunk_bytes
        self._bad = {k for k in self._bad if k * c < valid_end}  # cut blocks stay reported
        if index.dropped_entries:
            self._note(
                integrity.INDEX_REBUILT,
                0,
                0,
                f"{index.dropped_entries} index entries were invalid: rebuilt from the log",
                (self.base_offset, self.base_offset),
            )

    def _last_good_index_entry(self, limit: int) -> tuple[int, int]:
        """Drop index entries at or past `limit` and those that do not point at the frame they
        name, from the end; return (position, offset) of the last one left (or the start)."""
        index = self.index
        index.drop_from_position(limit)
        while len(index):
            rel, pos = index.relative_offsets[-1], index.positions[-1]
            header = os.pread(self._fd, HEADER_BYTES, pos)
            if len(header) == HEADER_BYTES and _unpack_header(header)[0] == self.base_offset + rel:
                return pos, self.base_offset + rel
            index.truncate_entries(len(index) - 1)
            index.dropped_entries += 1
        return 0, self.base_offset

    def _verify_tail(self, cov: Coverage, log_size: int, scan_start: int) -> int:
        """Verify blocks from the flushed position (or `scan_start`) on; return the end of the
        verified bytes: a torn tail is left out, corruption below the flushed position is
        marked and kept."""
        c = cov.chunk_bytes
        end = cov.covered_end
        # Below `flushed` a failing block is corruption; at or past it, a torn write. Without
        # a flushed entry (flush=never, or none yet) only the last index interval may be torn.
        flushed = min(cov.flushed_position, end) if cov.flushed_position else scan_start
        limit = min(log_size, end)
        first = min(flushed, scan_start) // c
        base = first * c
        if base >= end:
            return limit
        buf = os.pread(self._fd, limit - base, base)
        ends = [e for e, _ in cov.history]
        for k in range(first, (end - 1) // c + 1):
            lo, hi = k * c, min((k + 1) * c, end)
            crc = cov.crcs[k]
            if crc is not None and hi <= limit and crc32c_value(buf[lo - base : hi - base]) == crc:
                continue
            if hi <= flushed:  # durable bytes changed: corruption, kept and reported
                self._mark_bad(k, "checksum mismatch in flushed data (found by recovery)")
                continue
            # A torn write: the newest entry end in this block that still verifies.
            i = bisect_right(ends, min(hi, limit))
            while i > 0 and ends[i - 1] > lo and ends[i - 1] >= flushed:
                i -= 1
                e, e_crc = cov.history[i]
                if crc32c_value(buf[lo - base : e - base]) == e_crc:
                    return e
            if lo < flushed:  # the flushed part of this block fails too: keep it, marked
                self._mark_bad(k, "checksum mismatch in flushed data (found by recovery)")
                return flushed
            return lo
        return limit

    def _scan_frames(self, buf: bytes, start_pos: int, expected: int) -> tuple[int, int]:
        """Walk frames of `buf` (log bytes from `start_pos`), adding index entries; return
        (end of the last good frame within `buf`, the offset after it).

        Where the walk breaks inside corrupt blocks (a damaged header), it goes back to the
        first frame that touched them and searches for the next frame (`_resync`) instead of
        cutting there: damaged frames stay in place, marked, and are never served."""
        index = self.index
        size = len(buf)
        pos = 0
        last_indexed = index.positions[-1] if len(index) else None
        c = self.chunk_bytes
        bad = self._bad
        suspect: tuple[int, int, int] | None = None  # first frame touching a corrupt block
        last_touching = (0, expected, len(index))  # the last one (pos, offset, index entries)
        while True:
            while pos + HEADER_BYTES <= size:
                offset, raw_len = _unpack_header(buf, pos)
                if offset != expected:
                    break
                end = pos + HEADER_BYTES + (raw_len & LENGTH_MASK)
                if end > size:
                    break
                record_pos = start_pos + pos
                if bad:
                    blocks = range(record_pos // c, (start_pos + end - 1) // c + 1)
                    if any(k in bad for k in blocks):
                        last_touching = pos, expected, len(index)
                        if suspect is None:
                            suspect = last_touching
                    else:
                        suspect = None
                if last_indexed is None or record_pos - last_indexed >= self._interval:
                    if last_indexed is None or record_pos > last_indexed:
                        index.reserve(1)
                        index.append(offset - self.base_offset, record_pos)
                    last_indexed = record_pos
                pos = end
                expected += 1
            at = start_pos + pos
            header_bad = bool(bad) and any(
                k in bad for k in range(at // c, (at + HEADER_BYTES - 1) // c + 1)
            )
            if pos >= size or not (header_bad or suspect is not None):
                return pos, expected
            found = _resync(buf, pos, expected, size)
            if found is None and pos + HEADER_BYTES <= size:
                if _unpack_header(buf, pos)[0] == expected or _frame_ends_at(buf, pos, size):
                    # This frame's length (or offset) is damaged and no frame follows it.
                    found = size, expected + 1
                elif suspect is not None:  # no frame here: a damaged length led here
                    back, back_expected, entries = suspect
                    found = _resync(buf, back, back_expected, size)
                    if found is None:  # the last frame parsed is the damaged one
                        back, back_expected, entries = last_touching
                        found = size, back_expected + 1
                    index.truncate_entries(entries)
                    last_indexed = index.positions[-1] if len(index) else None
                else:
                    found = size, expected + 1
            elif found is None and suspect is not None:  # a damaged length led to the end
                back, back_expected, entries = last_touching
                found = size, back_expected + 1
                index.truncate_entries(entries)
                last_indexed = index.positions[-1] if len(index) else None
            suspect = None
            if found is None:
                self._note(
                    integrity.CORRUPT,
                    start_pos + pos,
                    start_pos + size,
                    "recovery could not find frames past a damaged header: cut",
                    (expected, expected),
                )
                return pos, expected
            pos, expected = found

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
        if self._times is not None:
            self._extend_times(chunk, ends, lo, hi, bias, first_offset - self.base_offset, entries)
        self.size = base_pos + total
        self.next_offset = first_offset + (hi - lo)

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

    def _truncate_sidecar(self, pos: int, coverage: Coverage | None) -> None:
        """Rewrite the sidecar to cover `[0, pos)`; the CRC of the block cut at `pos` is
        recomputed from the log after its known-good bytes are verified."""
        sidecar = self.sidecar
        assert sidecar is not None
        c = sidecar.chunk_bytes
        crcs = list(sidecar.crcs)
        k, inside = divmod(pos, c)
        if inside and k not in self._bad:
            ref_end, ref_crc = min((k + 1) * c, sidecar.covered_end), crcs[k]
            if coverage is not None:  # recovery: the newest history entry at or past `pos`
                i = bisect_left([e for e, _ in coverage.history], pos)
                if i < len(coverage.history) and (coverage.history[i][0] - 1) // c == k:
                    ref_end, ref_crc = coverage.history[i]
            data = os.pread(self._fd, ref_end - k * c, k * c)
            if ref_crc is not None and crc32c_value(data) == ref_crc:
                crcs[k] = crc32c_value(data[:inside])
            else:
                self._mark_bad(k, "checksum mismatch in a block cut by truncation")
                crcs[k] = None
        sidecar.reset(pos, crcs, sidecar.flushed_position)

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

    # -- reads ---------------------------------------------------------------------------

    def position_of(self, offset: int) -> int:
        """Byte position of the frame of `offset` (`size` for `next_offset`)."""
        if offset >= self.next_offset:
            assert offset == self.next_offset
            return self.size
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
        if stop - start <= max_bytes:
            data, after = self._read_verified(start, stop)
            self._check_first(data, offset, start)
            if stop < self.size:  # the next frame's header, if the blocks read hold it
                if len(after) < HEADER_BYTES:
                    self._check_header_at(stop, end_offset)
                elif _unpack_header(after)[0] != end_offset:
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

    def _check_first(self, data: bytes, offset: int, start: int) -> None:
        if len(data) < HEADER_BYTES or _unpack_header(data)[0] != offset:
            raise _IndexMismatch(start)  # the bytes are verified: the position is wrong

    def _check_header_at(self, position: int, offset: int) -> None:
        header = os.pread(self._fd, HEADER_BYTES, position)
        if len(header) < HEADER_BYTES or _unpack_header(header)[0] != offset:
            self._verify_range(position, position + HEADER_BYTES)
            raise _IndexMismatch(position)

    def _corrupt(self, offset: int, lo: int, hi: int, why: str) -> CorruptDataError:
        return CorruptDataError(
            f"corrupt data in {self.log_path} bytes [{lo}, {hi}) near offset {offset}: {why}",
            offset=offset,
            segment=self.log_path.name,
            start_position=lo,
            end_position=hi,
        )

    def _read_verified(self, start: int, stop: int) -> tuple[bytes, bytes]:
        """`pread` of `[start, stop)`, every block it touches verified as a whole; also
        returns the verified bytes read past `stop` (up to 12, possibly none)."""
        sidecar = self.sidecar
        if sidecar is None or stop <= start:
            if self._unreadable:
                raise self._corrupt(self.base_offset, 0, self.size, "its .crc header is damaged")
            return os.pread(self._fd, stop - start, start), b""
        c = sidecar.chunk_bytes
        if stop - start < 4 * c:  # small: one pread of the covering blocks, then a slice
            lo, hi = start // c * c, min(((stop - 1) // c + 1) * c, sidecar.covered_end)
            buf = os.pread(self._fd, hi - lo, lo)
            self._verify_buffer(lo, buf)
            return buf[start - lo : stop - lo], buf[stop - lo : stop - lo + HEADER_BYTES]
        data = os.pread(self._fd, stop - start, start)
        self._verify_buffer(start, data)
        return data, b""

    def _verify_buffer(self, at: int, buf: bytes) -> None:
        """Verify every block touched by `buf` (log bytes from `at`): the bytes of the first
        and last block outside it are read separately, so `buf` is never copied."""
        sidecar = self.sidecar
        if sidecar is None or not buf:
            if self._unreadable:
                raise self._corrupt(self.base_offset, 0, self.size, "its .crc header is damaged")
            return
        c = sidecar.chunk_bytes
        stop = at + len(buf)
        k0, k1 = at // c, (stop - 1) // c
        lo, hi = k0 * c, min((k1 + 1) * c, sidecar.covered_end)
        whole_block = k0 == k1 and at == lo and stop == hi and k0 < len(sidecar.crcs)
        if whole_block and crc32c_value(buf) == sidecar.crcs[k0] and k0 not in self._bad:
            return  # the common small read: one block, read whole
        head = os.pread(self._fd, at - lo, lo) if at > lo else b""
        tail = os.pread(self._fd, hi - stop, stop) if hi > stop else b""
        if len(head) != at - lo or len(tail) != max(hi - stop, 0):
            self._check_blocks(k0, [-1] * (k1 - k0 + 1))
        value, extend = crc32c_value, crc32c_extend
        crcs = sidecar.crcs
        if k1 - k0 >= 2 and k1 < len(crcs):
            # One pass over the bytes, no copy; the expected CRC combines the stored ones.
            computed_all = extend(extend(value(head), buf), tail)
            last = hi - k1 * c
            if last == c:
                expected = combine(crcs, c, k0, k1)
            else:
                prefix, last_crc = combine(crcs, c, k0, k1 - 1), crcs[k1]
                expected = None
                if prefix is not None and last_crc is not None:
                    expected = shift(prefix, last) ^ last_crc
            if expected == computed_all and not (
                self._bad and self._bad.intersection(range(k0, k1 + 1))
            ):
                return
        # Block by block (google-crc32c takes bytes only: slices copy, ~1 us per 16 KiB).
        mv = buf
        if k0 == k1:
            computed = [extend(extend(value(head), mv), tail)]
        else:
            first_end = lo + c - at
            last_start = k1 * c - at
            computed = [extend(value(head), mv[:first_end])]
            starts = range(first_end, last_start, c)
            cuts = map(slice, starts, range(first_end + c, last_start + 1, c))
            computed += map(value, map(mv.__getitem__, cuts))
            computed.append(extend(value(mv[last_start:]), tail))
        self._check_blocks(k0, computed)

    def _check_blocks(self, first: int, computed: list[int]) -> None:
        sidecar = self.sidecar
        assert sidecar is not None
        stored = sidecar.crcs[first : first + len(computed)]
        if computed == stored and not (
            self._bad and self._bad.intersection(range(first, first + len(computed)))
        ):
            return
        c = sidecar.chunk_bytes
        for k, (got, want) in enumerate(zip(computed, stored, strict=False), first):
            if k in self._bad:
                continue
            if want is None:
                self._mark_bad(k, "checksum lost (sidecar entry damaged)")
            elif got != want:
                got &= 0xFFFF_FFFF
                self._mark_bad(k, f"CRC32C mismatch: stored {want:08x}, computed {got:08x}")
        for k in range(first + len(stored), first + len(computed)):
            self._mark_bad(k, "no checksum for these bytes")
        bad = sorted(self._bad.intersection(range(first, first + len(computed))))
        lo, hi = bad[0] * c, min((bad[-1] + 1) * c, self.size)
        offset = self.offsets_between(lo, hi)[0]
        raise self._corrupt(offset, lo, hi, "checksum mismatch")

    def _verify_range(self, lo: int, hi: int) -> None:
        if self.sidecar is not None and hi > lo:
            self._verify_buffer(lo, os.pread(self._fd, hi - lo, lo))

    def check_index(self) -> None:
        """Check every index entry against the frame header it points at; rebuild the index
        from the log if one disagrees while the data there is intact (the log is the truth,
        the index derived from it)."""
        self._index_checked = True
        index = self.index
        base = self.base_offset
        read = os.pread
        fd = self._fd
        wrong = []
        for rel, pos in zip(index.relative_offsets, index.positions, strict=True):
            header = read(fd, HEADER_BYTES, pos)
            if len(header) < HEADER_BYTES or _unpack_header(header)[0] != base + rel:
                wrong.append(pos)
        if not wrong and (not len(index) or index.positions[0] == 0):
            return
        with contextlib.suppress(CorruptDataError):  # marks the damaged blocks, if any
            self._verify_range(0, self.size)
        c = self.chunk_bytes
        if wrong and c and all({p // c, (p + HEADER_BYTES - 1) // c} & self._bad for p in wrong):
            return  # the frames are damaged, not the index
        self.rebuild_index()

    def rebuild_index(self) -> None:
        self._times = None  # its entries follow the offset index's: rebuilt on next use
        index = self.index
        index.truncate_entries(0)
        index.reserve(1)
        if self.size:
            index.append(0, 0)  # the first frame starts the segment, readable or not
        buf = os.pread(self._fd, self.size, 0)
        pos, expected = self._scan_frames(buf, 0, self.base_offset)
        self._note(integrity.INDEX_REBUILT, 0, self.size, "index disagreed with the log: rebuilt")
        if pos < self.size or expected != self.next_offset:
            self._note(
                integrity.CORRUPT, pos, self.size, "frames end early while rebuilding the index"
            )

    def scrub(self, position: int, max_bytes: int) -> int:
        """Verify the blocks from the one holding `position`, about `max_bytes` of them;
        return where to continue (`size` when done). Corrupt blocks are marked, not raised."""
        if not self._index_checked:
            self.check_index()
        sidecar = self.sidecar
        if sidecar is None or position >= self.size:
            return self.size
        c = sidecar.chunk_bytes
        lo = position // c * c
        hi = min(self.size, lo + max(c, max_bytes // c * c))
        with contextlib.suppress(CorruptDataError):  # marked; reads will refuse it
            self._verify_buffer(lo, os.pread(self._fd, hi - lo, lo))
        return hi

    def modified_ms(self) -> int:
        return int(os.fstat(self._fd).st_mtime * 1000)

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

    def delete(self) -> None:
        self.close(trim=False)
        self.log_path.unlink(missing_ok=True)
        self.index_path.unlink(missing_ok=True)
        self.checksum_path.unlink(missing_ok=True)
        self.time_index_path.unlink(missing_ok=True)

    # -- time index (time_index.py) -------------------------------------------------------

    def times(self) -> TimeIndex | None:
        """This segment's time index (None: its records have no timestamps), built from
        the log on first use unless a `.timeindex` file describes these bytes. Raises
        CorruptDataError if the bytes it must read fail their checksums."""
        if self._time_reader is None:
            return None
        if self._times is None:
            if not self._index_checked:
                self.check_index()
            rels = self.index.relative_offsets
            loaded = None
            if self._time_file_maybe:
                loaded = TimeIndex.load(self.time_index_path, self.size, rels)
            if loaded is None:
                data = self._read_verified(0, self.size)[0]
                starts = _frame_starts(data, self.base_offset)
                count = len(starts)
                stamps = self._time_reader(data, np.array(starts, dtype=np.int64))
                loaded = build(stamps, range(count), [r for r in rels if r < count])
                self._times = loaded
                self._save_times()
            self._times = loaded
        return self._times

    def newest_timestamp(self) -> int | None:
        """The largest record timestamp in the segment; None when it has none."""
        times = self.times()
        if times is None or times.max_timestamp == NO_TIMESTAMP:
            return None
        return times.max_timestamp

    def offset_for_time(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp is >= `timestamp_ms`;
        None if the segment has none. Reads one index interval (time_index.py)."""
        times = self.times()
        if times is None or times.max_timestamp < timestamp_ms or self.size == 0:
            return None
        reader = self._time_reader
        assert reader is not None
        i = times.entry_below(timestamp_ms)
        rel = times.relative_offsets[i] if times.relative_offsets else 0
        entry = bisect_left(self.index.relative_offsets, rel)
        pos = self.index.positions[entry] if len(self.index) else 0
        stop = self.index.position_after(entry, self.size)
        while pos < self.size:
            data = self._read_verified(pos, stop)[0]
            starts = _frame_starts(data, self.base_offset + rel)
            stamps = reader(data, np.array(starts, dtype=np.int64))
            hit = np.flatnonzero(stamps >= timestamp_ms)
            if len(hit):
                j = int(hit[0])
                return self.base_offset + rel + j, int(stamps[j])
            # Not in its interval: only if the index is wrong; the rest of the segment then.
            rel += len(starts)
            pos, stop = stop, self.size
        return None

    def _extend_times(
        self,
        chunk: memoryview,
        ends: list[int],
        lo: int,
        hi: int,
        bias: int,
        first_rel: int,
        entries: list[tuple[int, int]],
    ) -> None:
        """Keep a built time index up to date with frames `lo..hi-1` just appended."""
        times, reader = self._times, self._time_reader
        assert times is not None and reader is not None
        starts = np.empty(hi - lo, dtype=np.int64)
        starts[0] = 0
        starts[1:] = np.fromiter(ends[lo : hi - 1], dtype=np.int64, count=hi - lo - 1) - bias
        stamps = reader(chunk, starts)
        times.extend(stamps, [(rel, rel) for rel, _ in entries], first_rel)

    def _save_times(self) -> None:
        """Write the built time index if no file describes these bytes (best effort)."""
        if self._times is None or self._time_file_maybe or self._fd < 0:
            return
        try:
            self._times.write(self.time_index_path, self.size)
        except OSError:
            self.time_index_path.with_name(self.time_index_path.name + ".tmp").unlink(
                missing_ok=True
            )
            return
        self._time_file_maybe = True

    def _drop_time_file(self) -> None:
        """Before the segment's bytes change: its `.timeindex` would describe old bytes."""
        if self._time_file_maybe:
            self.time_index_path.unlink(missing_ok=True)
            self._time_file_maybe = False


def _frame_starts(data: bytes, first_offset: int) -> list[int]:
    """Start positions of the whole frames at the beginning of `data` (up to a frame that
    is cut short or out of sequence: damage is the checksums' business, not this walk's)."""
    try:
        ends = scan(data, first_offset)
    except FrameError as exc:
        ends = scan(data[: exc.position], first_offset) if exc.position else []
    return [0, *ends[:-1]] if ends else []


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


def _frame_ends_at(buf: bytes, pos: int, size: int) -> bool:
    """Whether the bytes at `pos` read as one frame header whose frame ends exactly at `size`."""
    if pos + HEADER_BYTES > size:
        return False
    length: int = _unpack_header(buf, pos)[1] & LENGTH_MASK
    return pos + HEADER_BYTES + length == size


def _resync(buf: bytes, pos: int, expected: int, size: int) -> tuple[int, int] | None:
    """After a damaged header at `pos`: the position and offset of the next frame whose chain
    of consecutive offsets runs to the end of `buf` (None if there is none)."""
    tries = 0
    for skip in range(1, _RESYNC_OFFSETS_MAX + 1):
        needle = (expected + skip).to_bytes(8, "big")
        at = buf.find(needle, pos + 1)
        while at >= 0 and tries < _RESYNC_TRIES_MAX:
            tries += 1
            p, want = at, expected + skip
            while p + HEADER_BYTES <= size:
                offset, raw_len = _unpack_header(buf, p)
                end = p + HEADER_BYTES + (raw_len & LENGTH_MASK)
                if offset != want or end > size:
                    break
                p, want = end, want + 1
            if p == size:
                return at, expected + skip
            at = buf.find(needle, at + 1)
    return None
