"""What every part of a segment shares: its files, its state and what it found wrong.

`Segment` (`segment.py`) is built in layers, one module per idea, each a class over the
previous one: this base (names, state, findings), `segment_checksums` (the `.crc` sidecar:
verified reads, truncation), `segment_recovery` (the open after a crash), `segment_scrub`
(the index check and the scrubber's step), `segment_times` (the `.timeindex`), and
`segment` itself (appends, reads, lifecycle). The state is set by `Segment.__init__`.

Findings are kept as `(kind, lo, hi, detail, offsets)` and turned into `IntegrityIssue`s
(`integrity.py`) on demand, clipped to the segment's current size.
"""

from __future__ import annotations

import functools
from bisect import bisect_left
from pathlib import Path

from replog.errors import CorruptDataError
from replog.storage import integrity
from replog.storage.checksums import Sidecar, checksum_file_name
from replog.storage.config import StorageConfig, TimestampReader
from replog.storage.index import SparseIndex
from replog.storage.integrity import IntegrityIssue
from replog.storage.time_index import TimeIndex, time_index_file_name


def log_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def index_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}.idx"


class SegmentBase:
    """The files and state of one segment (see the module doc); no I/O of its own."""

    base_offset: int
    next_offset: int
    size: int  # the `.log` size: its write position
    directory: Path
    index: SparseIndex
    sidecar: Sidecar | None
    _fd: int  # the `.log`, -1 once closed
    _interval: int  # index_interval_bytes
    _time_reader: TimestampReader | None
    _times: TimeIndex | None  # built on first use (time_index.py)
    _time_file_maybe: bool  # a `.timeindex` may exist for these bytes
    _bad: set[int]  # blocks known corrupt (never served)
    _unreadable: bool  # the whole segment is corrupt (its sidecar header is)
    _issues: list[tuple[str, int, int, str, tuple[int, int] | None]]
    _index_checked: bool
    _config: StorageConfig
    # Offsets may have gaps (the log cleaner removed records, `cleaner.py`): frames still
    # ascend, and a read from an offset in a gap starts at the next frame present.
    sparse: bool
    _offset_end: int  # a sparse segment's offsets are below it (the next segment's base)

    # A segment's paths are made when first used: a log of 20,000 segments opened in 1.0 s,
    # more than half of it building four `Path`s per segment that a start never touches.
    @functools.cached_property
    def log_path(self) -> Path:
        return self.directory / log_file_name(self.base_offset)

    @functools.cached_property
    def index_path(self) -> Path:
        return self.directory / index_file_name(self.base_offset)

    @functools.cached_property
    def checksum_path(self) -> Path:
        return self.directory / checksum_file_name(self.base_offset)

    @functools.cached_property
    def time_index_path(self) -> Path:
        return self.directory / time_index_file_name(self.base_offset)

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
        issue = (kind, lo, hi, detail, offsets)
        if issue not in self._issues:  # a segment opened again finds the same things again
            self._issues.append(issue)

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

    @property
    def has_issues(self) -> bool:
        return bool(self._issues or self._bad)

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

    def _corrupt(self, offset: int, lo: int, hi: int, why: str) -> CorruptDataError:
        return CorruptDataError(
            f"corrupt data in {self.log_path} bytes [{lo}, {hi}) near offset {offset}: {why}",
            offset=offset,
            segment=self.log_path.name,
            start_position=lo,
            end_position=hi,
        )
