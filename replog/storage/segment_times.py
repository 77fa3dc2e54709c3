"""A segment's time index in use (`.timeindex`, format in `time_index.py`).

For a partition whose records have timestamps, the time index is built from the log on
first use (a lookup, or time-based retention) unless a `.timeindex` file describes these
bytes, kept up to date by appends, written when the segment is sealed or closed cleanly
and deleted before the segment changes (an append or a truncation).
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from replog.frames import HEADER, HEADER_BYTES, LENGTH_MASK, FrameError, scan
from replog.storage.config import NO_TIMESTAMP
from replog.storage.segment_scrub import ScrubbedSegment
from replog.storage.time_index import TimeIndex, build

_unpack_header = HEADER.unpack_from


class TimedSegment(ScrubbedSegment):
    """The time-index part of `Segment` (see the module doc)."""

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
                starts, frame_rels = self._starts(data, self.base_offset)
                stamps = self._time_reader(data, np.array(starts, dtype=np.int64))
                present = set(frame_rels)
                loaded = build(stamps, frame_rels, [r for r in rels if r in present])
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
            starts, frame_rels = self._starts(data, self.base_offset + rel)
            stamps = reader(data, np.array(starts, dtype=np.int64))
            hit = np.flatnonzero(stamps >= timestamp_ms)
            if len(hit):
                j = int(hit[0])
                return self.base_offset + rel + frame_rels[j], int(stamps[j])
            # Not in its interval: only if the index is wrong; the rest of the segment then.
            rel += frame_rels[-1] + 1 if frame_rels else 0
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

    def _starts(self, data: bytes, first_offset: int) -> tuple[list[int], list[int]]:
        """(start positions, offsets relative to `first_offset`) of the whole frames at the
        beginning of `data`; in a segment with gaps (`sparse`) by a walk of the headers."""
        if not self.sparse:
            starts = _frame_starts(data, first_offset)
            return starts, list(range(len(starts)))
        starts, rels, pos, size = [], [], 0, len(data)
        previous = first_offset - 1
        while pos + HEADER_BYTES <= size:
            offset, raw_len = _unpack_header(data, pos)
            end = pos + HEADER_BYTES + (raw_len & LENGTH_MASK)
            if offset <= previous or end > size:
                break
            starts.append(pos)
            rels.append(offset - first_offset)
            previous, pos = offset, end
        return starts, rels

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
