"""Checking a segment's index against its log, rebuilding it, and the scrubber's step.

The index is checked against the frames it points at on a segment's first read (or
scrub step) and rebuilt from the log if it disagrees while the data there is intact: the
log is the truth, the index derived from it. `scrub` is one bounded step of the background
scrubber (`scrub.py`): it verifies blocks and marks the corrupt ones, never raising.
"""

from __future__ import annotations

import contextlib
import os

from replog.errors import CorruptDataError
from replog.frames import HEADER, HEADER_BYTES
from replog.storage import integrity
from replog.storage.segment_recovery import RecoveredSegment

_unpack_header = HEADER.unpack_from


class ScrubbedSegment(RecoveredSegment):
    """The index-check and scrub part of `Segment` (see the module doc)."""

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
        buf = os.pread(self._fd, self.size, 0)
        if self.size:  # the first frame starts the segment, readable or not
            rel = 0
            if self.sparse and len(buf) >= HEADER_BYTES:  # a cleaned segment's may be later
                rel = _unpack_header(buf, 0)[0] - self.base_offset
                rel = rel if 0 <= rel < self._offset_end - self.base_offset else 0
            index.append(rel, 0)
        pos, expected = self._scan_frames(buf, 0, self.base_offset)
        self._note(integrity.INDEX_REBUILT, 0, self.size, "index disagreed with the log: rebuilt")
        if pos < self.size or (expected != self.next_offset and not self.sparse):
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
