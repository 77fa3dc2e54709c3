"""The log cleaner: Kafka's log compaction of one partition (`cleanup.policy=compact`).

A pass (`clean`) over a partition of an envelope topic (`replog.records`: the key and the
tombstone bit live in each record's envelope) works on its closed segments below the high
watermark, never the active one, and never on a segment holding a record newer than
`min_compaction_lag_ms` (nor any after it). The segments that end after the partition's
`cleaned_end` (`partition_log.CLEANER_CHECKPOINT_FILE`) are its dirty part; a pass runs when
they are at least `min_cleanable_dirty_ratio` of the cleanable bytes (Kafka's rule). Then:

1. the **offset map**: the dirty segments are read in order, and for each key the offset of
   its latest record is kept, up to `offset_map_keys_max` keys (the pass then ends at the
   segment where the map filled: the memory a pass takes is bounded);
2. `mark_sparse(map_end)` (fsynced): the segments below the end of the mapped range may
   now have offset gaps (how they are opened after a crash depends on it);
3. every segment below `map_end` is read again, oldest first, and each record is kept if
   it is a control record (leader-epoch markers, batch headers), or a keyed record that is
   its key's latest (the map says so, or the map has no newer record of it), unless it
   is a tombstone (null value) whose timestamp is older than now - `delete_retention_ms`.
   Records without a key are dropped, as Kafka's cleaner does (a compacted topic refuses
   them on append); a value that is not an envelope is kept (nothing is guessed). A
   segment from which nothing is dropped is left as it is; the others are written again,
   frame for frame, to a cleaned copy that is swapped in (`swaps.py`: crash-safe);
4. `mark_cleaned(map_end)` (fsynced): the dirty part now starts there. A pass cut short
   (a crash, an error) leaves it where it was: the next pass maps the same keys again.

Offsets never change: a cleaned segment keeps its base offset and its end (the next
segment's base) and simply lacks the dropped offsets. Oldest first matters: a crash between
two swaps leaves old values dropped and their tombstone still there, never an old value
brought back. The outcome is a function of the log and `now_ms` alone, so every replica
that cleans the same records at the same horizon keeps the same ones; replicas cleaning at
different times may differ only in tombstones and superseded values, never in the latest
value of a key.

I/O is bounded by a `Throttle` (bytes per second of reads and writes); reads go through
the partition's lock in chunks of `read_chunk_bytes` (as a consumer's would), writes to
the cleaned copy hold no lock, and the swap holds it for a few renames.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from replog.errors import InvalidConfigError, OffsetOutOfRangeError
from replog.frames import (
    CONTROL_FLAG,
    HEADER,
    HEADER_BYTES,
    HEADER_DTYPE,
    LENGTH_MASK,
    FrameError,
    scan,
)
from replog.records import ATTR_KEY, ATTR_NULL_VALUE, FIXED_BYTES, FIXED_DTYPE, VERSION
from replog.storage.config import DAY_MS, MIB, StorageConfig
from replog.storage.partition_log import PartitionLog
from replog.storage.segment import Segment
from replog.storage.swaps import cleaning_dir

_unpack_header = HEADER.unpack_from


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """A compacted topic's cleaner settings (Kafka's names in `docs/operations.md`)."""

    delete_retention_ms: int = DAY_MS  # delete.retention.ms: how long tombstones stay
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    offset_map_keys_max: int = 1_000_000  # keys one pass maps (its memory bound)
    read_chunk_bytes: int = 1 * MIB

    def __post_init__(self) -> None:
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise InvalidConfigError(f"invalid cleaner config: {what}")

        need(self.delete_retention_ms >= 0, "delete_retention_ms must be >= 0")
        need(0.0 <= self.min_cleanable_dirty_ratio <= 1.0, "dirty ratio must be in [0, 1]")
        need(self.min_compaction_lag_ms >= 0, "min_compaction_lag_ms must be >= 0")
        need(self.offset_map_keys_max >= 1, "offset_map_keys_max must be >= 1")
        need(self.read_chunk_bytes >= HEADER_BYTES, "read_chunk_bytes must be >= 12")

    @classmethod
    def of(cls, config: StorageConfig, **node: int) -> CleanerConfig:
        """A log's cleaner settings: its topic's configs (in its `StorageConfig`) and the
        node's limits `node` (offset_map_keys_max, read_chunk_bytes)."""
        return cls(
            delete_retention_ms=config.delete_retention_ms,
            min_cleanable_dirty_ratio=config.min_cleanable_dirty_ratio,
            min_compaction_lag_ms=config.min_compaction_lag_ms,
            **node,
        )


@dataclass(slots=True)
class CleanResult:
    """What one pass did."""

    cleaned_end: int  # the partition's cleaned_end after the pass
    segments_rewritten: int = 0
    bytes_read: int = 0
    bytes_before: int = 0  # of the segments rewritten
    bytes_after: int = 0
    records_dropped: int = 0


class Throttle:
    """At most `bytes_per_second` of cleaner I/O on average (None: unbounded): `spend`
    sleeps when the bytes so far are ahead of the budget."""

    def __init__(
        self,
        bytes_per_second: int | None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if bytes_per_second is not None and bytes_per_second < 1:
            raise InvalidConfigError("cleaner bytes_per_second must be >= 1")
        self._rate = bytes_per_second
        self._clock = clock
        self._sleep = sleep
        self._start = clock()
        self._spent = 0

    def spend(self, nbytes: int) -> None:
        if self._rate is None:
            return
        self._spent += nbytes
        ahead_s = self._spent / self._rate - (self._clock() - self._start)
        if ahead_s > 0:
            self._sleep(ahead_s)


# A frame header and an envelope's fixed part, side by side (32 bytes, packed).
_COLUMNS = np.dtype(HEADER_DTYPE.descr + FIXED_DTYPE.descr)
assert _COLUMNS.itemsize == HEADER_BYTES + FIXED_BYTES
_SPAN = np.arange(_COLUMNS.itemsize)


class _Chunk:
    """The frames of one log read as columns (numpy, no Python step per frame but for the
    keys): `offsets`, `starts`, `ends`, and for each frame whether it is a control record,
    an envelope, keyed, a tombstone, its timestamp, and the keys of the keyed ones."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        try:
            ends = np.array(scan(buf), dtype=np.int64)  # consecutive offsets: numpy's path
        except FrameError:
            ends = np.array(_walk_ends(buf), dtype=np.int64)  # a segment with gaps
        starts = np.empty_like(ends)
        starts[:1] = 0
        starts[1:] = ends[:-1]
        padded = np.frombuffer(buf + bytes(_COLUMNS.itemsize), dtype=np.uint8)
        cols = padded[starts[:, None] + _SPAN].copy().view(_COLUMNS).reshape(-1)
        length = cols["length"].astype(np.int64)
        value_bytes = length & LENGTH_MASK
        self.offsets = cols["offset"].astype(np.int64)
        self.starts, self.ends = starts, ends
        self.control = (length & CONTROL_FLAG) != 0
        self.envelope = (
            ~self.control
            & (value_bytes >= FIXED_BYTES)
            & (cols["version"] == VERSION)
            & (FIXED_BYTES + cols["key_length"].astype(np.int64) <= value_bytes)
        )
        self.keyed = self.envelope & ((cols["attributes"] & ATTR_KEY) != 0)
        self.tombstone = self.envelope & ((cols["attributes"] & ATTR_NULL_VALUE) != 0)
        self.ts = cols["ts"]
        keyed = np.flatnonzero(self.keyed)
        key_starts = (starts[keyed] + HEADER_BYTES + FIXED_BYTES).tolist()
        key_ends = (np.array(key_starts, dtype=np.int64) + cols["key_length"][keyed]).tolist()
        self.keyed_at = keyed
        self.keys: list[bytes] = list(map(buf.__getitem__, map(slice, key_starts, key_ends)))

    @property
    def last_offset(self) -> int:
        return int(self.offsets[-1])


def _walk_ends(buf: bytes) -> list[int]:
    """End of each whole frame of `buf` (a log read: whole frames, offsets ascending)."""
    out = []
    pos, size = 0, len(buf)
    while pos + HEADER_BYTES <= size:
        _, raw_len = _unpack_header(buf, pos)
        pos += HEADER_BYTES + (raw_len & LENGTH_MASK)
        assert pos <= size, "log reads return whole frames"
        out.append(pos)
    return out


def _chunks(
    log: PartitionLog, base: int, end: int, config: CleanerConfig, throttle: Throttle
) -> Iterator[_Chunk]:
    """The frames of `[base, end)`, a read at a time (verified against the checksums)."""
    offset = base
    while offset < end:
        buf = log.read(offset, config.read_chunk_bytes, end_offset=end)
        if not buf:
            return
        throttle.spend(len(buf))
        chunk = _Chunk(buf)
        yield chunk
        offset = chunk.last_offset + 1


def dirty_ratio(segments: list[tuple[int, int, int]], cleaned_end: int) -> float:
    """Bytes of the segments ending after `cleaned_end` over all of them (0.0 when empty)."""
    total = sum(size for _, _, size in segments)
    dirty = sum(size for _, end, size in segments if end > cleaned_end)
    return dirty / total if total else 0.0


def clean(
    log: PartitionLog, config: CleanerConfig, now_ms: int, throttle: Throttle | None = None
) -> CleanResult | None:
    """One pass over `log` (see the module doc); None when it is not due (too little
    dirty). Raises OffsetOutOfRangeError never: a segment deleted meanwhile ends the pass."""
    throttle = throttle or Throttle(None)
    segments = log.cleanable_segments(
        now_ms - config.min_compaction_lag_ms if config.min_compaction_lag_ms else None
    )
    cleaned_end = log.cleaned_end
    dirty = [s for s in segments if s[1] > cleaned_end]
    if not dirty or dirty_ratio(segments, cleaned_end) < config.min_cleanable_dirty_ratio:
        return None
    result = CleanResult(cleaned_end)
    try:
        latest, map_end = _offset_map(log, dirty, config, throttle, result)
        log.mark_sparse(map_end)
        horizon_ms = now_ms - config.delete_retention_ms
        for base, end, size in segments:
            if base >= map_end:
                break
            _clean_segment(log, (base, end, size), latest, horizon_ms, config, throttle, result)
    except OffsetOutOfRangeError:
        return result  # retention deleted a segment under the pass: the next one starts again
    log.mark_cleaned(map_end)
    result.cleaned_end = map_end
    return result


def _offset_map(
    log: PartitionLog,
    dirty: list[tuple[int, int, int]],
    config: CleanerConfig,
    throttle: Throttle,
    result: CleanResult,
) -> tuple[dict[bytes, int], int]:
    """Each key's latest offset in the dirty segments, and where the mapped range ends."""
    latest: dict[bytes, int] = {}
    map_end = dirty[0][0]
    for base, end, _ in dirty:
        for chunk in _chunks(log, base, end, config, throttle):
            result.bytes_read += len(chunk.buf)
            _map_chunk(chunk, latest)
        map_end = end
        if len(latest) >= config.offset_map_keys_max:
            break
    return latest, map_end


def _map_chunk(chunk: _Chunk, latest: dict[bytes, int]) -> None:
    latest.update(zip(chunk.keys, chunk.offsets[chunk.keyed_at].tolist(), strict=True))


def map_keys(buf: bytes, latest: dict[bytes, int]) -> None:
    """Step 1 for one log read `buf` (whole frames, offsets ascending, gaps allowed): each
    keyed record's offset into `latest` (key -> offset), the later one winning. With
    `kept_offsets`, the pure rule of a pass, for models of the log (the simulator's)."""
    if buf:
        _map_chunk(_Chunk(buf), latest)


def kept_offsets(buf: bytes, latest: dict[bytes, int], horizon_ms: int) -> list[int]:
    """Step 3 for one log read `buf`: the offsets of the frames a pass keeps, given the
    offset map `latest` and the tombstone horizon (now - `delete_retention_ms`)."""
    if not buf:
        return []
    chunk = _Chunk(buf)
    kept: list[int] = chunk.offsets[_kept(chunk, latest, horizon_ms)].tolist()
    return kept


def _kept(chunk: _Chunk, latest: dict[bytes, int], horizon_ms: int) -> np.ndarray:
    """Which frames of `chunk` a pass keeps (the rule of the module doc's step 3): control
    records, values that are not envelopes, and each key's latest record unless it is an
    expired tombstone; records without a key are dropped."""
    keep: np.ndarray = chunk.control | ~chunk.envelope
    at = chunk.keyed_at
    offsets = chunk.offsets[at]
    newest = np.fromiter(
        map(latest.get, chunk.keys, offsets.tolist()), dtype=np.int64, count=len(at)
    )
    expired = chunk.tombstone[at] & (chunk.ts[at] < horizon_ms)
    keep[at] = (newest <= offsets) & ~expired
    return keep


def _clean_segment(
    log: PartitionLog,
    segment: tuple[int, int, int],
    latest: dict[bytes, int],
    horizon_ms: int,
    config: CleanerConfig,
    throttle: Throttle,
    result: CleanResult,
) -> None:
    """Write the cleaned copy of one segment and swap it in, if it drops anything."""
    base, end, size = segment
    directory = cleaning_dir(log.directory)
    copy = Segment(directory, base, log.config, create=True, sparse=True, offset_end=end)
    dropped = 0
    try:
        for chunk in _chunks(log, base, end, config, throttle):
            result.bytes_read += len(chunk.buf)
            kept = np.flatnonzero(_kept(chunk, latest, horizon_ms))
            dropped += len(chunk.offsets) - len(kept)
            offsets = chunk.offsets[kept]
            breaks = np.flatnonzero(np.diff(offsets) != 1) + 1  # runs of consecutive offsets
            for run in np.split(kept, breaks) if len(kept) else ():
                _append_run(copy, chunk, run, throttle)
        if not dropped:
            copy.delete()
            return
        copy.next_offset = end
        copy.flush()
        copy.close()
        if not log.swap_cleaned(base, end, copy):
            copy.delete()
            return
    except BaseException:
        copy.delete()
        raise
    result.segments_rewritten += 1
    result.bytes_before += size
    result.bytes_after += copy.size
    result.records_dropped += dropped


def _append_run(copy: Segment, chunk: _Chunk, run: np.ndarray, throttle: Throttle) -> None:
    """Append frames `run` of `chunk` (consecutive offsets, adjacent) to the cleaned copy."""
    first = int(chunk.offsets[run[0]])
    lo, hi = int(chunk.starts[run[0]]), int(chunk.ends[run[-1]])
    ends = (chunk.ends[run] - lo).tolist()
    copy.next_offset = first  # over the gap the dropped records leave
    with memoryview(chunk.buf) as view:
        copy.append(view[lo:hi], first, ends, 0, len(ends), 0)
    throttle.spend(hi - lo)
