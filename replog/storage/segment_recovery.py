"""Opening a segment after a crash (`Segment(create=False)`): what recovery trusts and cuts.

Recovery trusts neither the index's size nor the log's tail. With a sidecar, it first
verifies every block from the newest flushed position (and from the last index entry) to
the end of the coverage: a failing block at or past the flushed position is a torn write,
cut at the newest entry end in it that still verifies (else at the last whole frame before
the block); a failing block below it is corruption, marked and kept. Then it scans frames
from the last good index entry, up to the verified end, and stops at the first frame whose
offset is not the next one (in a cleaned segment, `sparse`: not a larger one below the
segment's end) or that is cut short (inside a corrupt block it searches for the
next frame instead of cutting committed data). The log is truncated there, the sidecar
rewritten to match, index entries past it dropped and missing ones rebuilt.

A segment without a `.crc` gets the structural recovery above without the checksum steps.
"""

from __future__ import annotations

import os
from bisect import bisect_right

from replog.frames import HEADER, HEADER_BYTES, LENGTH_MASK
from replog.storage import integrity
from replog.storage.checksums import Coverage, crc32c_value
from replog.storage.segment_checksums import ChecksummedSegment

_unpack_header = HEADER.unpack_from
_RESYNC_OFFSETS_MAX = 16  # frames a damaged header may hide before recovery gives up
_RESYNC_TRIES_MAX = 64


class RecoveredSegment(ChecksummedSegment):
    """The recovery part of `Segment` (see the module doc); `_scan_frames` also rebuilds
    the index (`segment_scrub`)."""

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
        sparse = self.sparse
        while True:
            while pos + HEADER_BYTES <= size:
                offset, raw_len = _unpack_header(buf, pos)
                if offset != expected and not (sparse and expected < offset < self._offset_end):
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
                expected = offset + 1
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
