"""One partition replica's log: LEO, high watermark, flush (seed 003's `LogManager`).

Directory `{data_dir}/{topic}/partition_{N}/` holds the segment files and:

* `high-watermark`: ASCII decimal + newline, written atomically (checkpoint.py). The high
  watermark is **exclusive**: offsets `< HW` are committed. On open, HW = min(checkpoint, LEO),
  raised to the log start (retention deletes committed records only).
* `recovery-point`: ASCII decimal + newline, replaced by a rename (`checkpoint.write_hint`,
  no fsync: lost or empty after a power failure, it only makes the next recovery longer)
  with the HW checkpoint whenever it moved: every record below it was flushed (its `.log`
  bytes and `.crc` entries fsynced before the file was written). On open, a segment whose
  end (the next segment's base offset) is at or below it is trusted whole: not recovered,
  not even opened until used. Lowered (fsynced; or removed, if it cannot be written)
  *before* a truncation or reset drops records below it.
  Missing, empty or not a number (a log of an older version, a new log before its first
  checkpoint): every segment is recovered, as before.
* `clean-shutdown`: ASCII decimal + newline, the log end offset, written by a clean `close`
  (`write_hint`) after the flush, the checkpoints and the closing of the files. Holding a
  number on open: nothing is recovered (the active segment ends at that offset; if its
  files disagree, it is recovered after all). Removed, and the directory fsynced, before the
  first change to the files after the open, so it never outlives the state it describes.
* `{offset:020d}.snapshot`: the replica's state snapshots (its idempotent producers), written
  by the log's owner (`write_snapshot`); their format and lifecycle are `snapshots.py`'s:
  on open every snapshot above the LEO is deleted, a truncation deletes those above its
  offset first (durably), a reset deletes them all, retention those below the log start.

* `cleaner-sparse-end` and `cleaner-offset-checkpoint`: ASCII decimal + newline each,
  written atomically (fsynced) by the log cleaner (`cleaner.py`). The first before it swaps
  a cleaned segment in: segments that start below it may have offset gaps (read as such,
  `segment_base.sparse`). The second after its last swap: the end of the range it cleaned
  (Kafka's file of that name: the first dirty offset). Missing: 0 (never cleaned). A crash
  in a swap is finished or undone when the log is opened (`swaps.py`).

After a crash, only the segments past the recovery point are recovered (torn tails cut,
indexes rebuilt, as `segment_recovery.py` says); they count as written until the next flush,
which moves the recovery point past them. The open costs a directory listing and a `stat`
per segment, nothing else per segment.

Appends have one writer, the partition's replica driver (`replog.replication.driver`),
one call at a time (the driver batches what arrives meanwhile): an append assigns the next offsets,
encodes its records into one buffer, writes it with one `write` per segment touched and,
under `flush=always`, one `fdatasync` before it returns. A failed append changes nothing.
Appends hold the log's lock like every other operation, so a second caller (a tool, a test,
the scrubber's thread) waits its turn and sees whole appends. `flush` does not hold it for
its fsyncs: it takes the files to sync (duplicated descriptors, valid through a roll, a park
or a deletion: `SegmentLog.sync_targets`) and the LEO they hold under it, fsyncs outside it
while appends go on, then under it again moves the flushed and durable offsets and the
sidecars' flushed marks up to that LEO, unless a truncation or reset came in between (then
nothing moves): the flushed offset never passes what an fsync covered, nor the LEO.

`read` serves committed records only (`[log_start_offset, HW)`); `read_uncommitted` serves up
to LEO (replication). Both return raw frames, whole, never a partial one, and both verify
what they read against the segments' CRC32C sidecars (`checksums.py`): a corrupt range
raises `CorruptDataError` (DATA_LOSS, `CORRUPT_DATA`) and is never served.

Closing is final: every operation that touches a file checks that the log is open under the
lock that `close` holds while it closes the files, and raises `LogClosedError` otherwise. A
closed log never reads, writes or fsyncs a file descriptor (whose number the process may
already have reused for another file), and never writes its directory again (a topic
created again under the same name reuses the path).
`integrity_issues()` / `corrupt_ranges()` say what recovery, reads and the scrubber found;
`scrub_step()` is the unit of work of the background scrubber (`scrub.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from operator import sub
from pathlib import Path

from replog import frames
from replog.errors import (
    EmptyBatchError,
    InvalidArgumentError,
    InvalidFramesError,
    LogClosedError,
    OffsetOutOfRangeError,
    ReplogError,
    StorageError,
    StorageFullError,
    TooManyOpenFilesError,
)
from replog.storage import checkpoint, snapshots
from replog.storage.config import FlushPolicy, StorageConfig
from replog.storage.integrity import CORRUPT, IntegrityIssue
from replog.storage.open_files import OpenFiles, OwnedLock
from replog.storage.pieces import encode_pieces
from replog.storage.segment import Segment, SyncTarget
from replog.storage.segment_log import SegmentLog, storage_error
from replog.storage.space import DiskSpace

HW_FILE = "high-watermark"
RECOVERY_POINT_FILE = "recovery-point"
CLEAN_SHUTDOWN_FILE = "clean-shutdown"
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
CLEANER_SPARSE_FILE = "cleaner-sparse-end"


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int

    @property
    def count(self) -> int:
        return self.last_offset - self.base_offset + 1


class PartitionLog:
    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: StorageConfig,
        files: OpenFiles | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = directory
        self.config = config
        self._files = files  # None: no budget, segments stay open once opened until `close`
        # A node restarted on a full disk frees its reserve before it opens its logs (the
        # first look at the space does: `space`), so that opening them and electing work.
        self._space = DiskSpace.of(directory.parent.parent)
        self._space.check_soon()
        self._lock = OwnedLock()  # the segment log (open_files.py: the LRU parks under it)
        self._closed = False
        recovery_point = checkpoint.read_hint(directory / RECOVERY_POINT_FILE)
        clean_end = checkpoint.read_hint(directory / CLEAN_SHUTDOWN_FILE)
        self._clean_marker = clean_end is not None or (directory / CLEAN_SHUTDOWN_FILE).exists()
        self._cleaned_end = checkpoint.read_int(directory / CLEANER_CHECKPOINT_FILE) or 0
        self._sparse_end = checkpoint.read_int(directory / CLEANER_SPARSE_FILE) or 0
        log = SegmentLog(
            directory,
            config,
            recovery_point=recovery_point,
            clean_end=clean_end,
            files=files,
            lock=self._lock,
            sparse_end=self._sparse_end,
        )
        self._log = log
        self._leo = log.log_end_offset
        try:  # a crash lost the tail a snapshot describes: it must not outlive it
            snapshots.delete_above(directory, self._leo)
        except BaseException:
            log.close()
            raise
        self._flushed_offset = self._leo  # what recovery found is what the disk holds
        # Truncations and resets so far: a `flush` whose fsync ran across one records nothing.
        self._truncations = 0
        # Every offset below this one is on disk (fsynced): below the recovery point, or all
        # of it after a clean close (what recovery scanned is fsynced by the next flush). The
        # next recovery point to checkpoint once it moved.
        durable = self._leo if clean_end is not None else (recovery_point or 0)
        self._durable_offset = min(durable, self._leo)
        self._rp_checkpointed = recovery_point
        checkpointed = checkpoint.read_int(directory / HW_FILE)
        if checkpointed is None and not log.log_end_offset:
            # A new log: the files exist from the start, so that later checkpoints can be
            # made in place on a full disk (`checkpoint.write_text_state`). Not fsynced:
            # its content is what a missing or empty file reads as (HW 0), so a crash that
            # loses it loses nothing (2 fsyncs fewer per new replica).
            try:
                checkpoint.write_hint(directory / HW_FILE, 0)
            except BaseException:
                log.close()
                raise
        checkpointed = checkpointed or 0
        # Retention deletes committed records only, so everything below the log start is
        # committed even if the checkpoint is older than the deletion.
        self._hw = max(min(checkpointed, self._leo), log.log_start_offset)
        self._hw_checkpointed = checkpointed  # what the file says, which may exceed LEO
        # The first I/O error (EIO, ...) met on this log's files: set, the partition's replica
        # goes offline (`replog.replication.driver`), the node keeps serving the others.
        self.io_error: StorageError | None = None
        # Under flush=always: set when a group flusher fsyncs this log (`flush()`), so an
        # append does not (`flushed_offset` lags LEO until the flusher's pass).
        self.flush_deferred = False
        # Called (from any thread) when `io_error` is set: the replica's driver goes offline
        # at once rather than at its next timer.
        self.on_io_error: Callable[[], None] | None = None

    # -- open files (open_files.py) ----------------------------------------------------------

    def _opened(self) -> SegmentLog:
        """Under `_lock`: the segment log (its segments open on use)."""
        self._check_open()
        return self._log

    def _changing(self) -> None:
        """Under `_lock`, before the first change to the files since the open: the
        clean-shutdown marker goes (durably), or a crash after the change would be taken
        for a clean stop and the tail trusted without recovery."""
        if self._clean_marker:
            try:
                checkpoint.remove_if_exists(self.directory / CLEAN_SHUTDOWN_FILE)
                checkpoint.fsync_dir(self.directory)
            except OSError as exc:
                raise self._fault(exc, f"unmark {self.directory}") from exc
            self._clean_marker = False

    def _fault(self, exc: OSError | ReplogError, what: str) -> ReplogError:
        """The typed error of a failed file operation; an I/O error that is neither a full
        disk nor a lack of descriptors is kept in `io_error` (the partition goes offline)."""
        err = storage_error(exc, what) if isinstance(exc, OSError) else exc
        if type(err) is StorageError and self.io_error is None:
            self.io_error = err
            if self.on_io_error is not None:
                self.on_io_error()
        return err

    @property
    def segments_recovered(self) -> int:
        """Segments recovery scanned when this log was opened (0 after a clean close)."""
        return self._log.recovered

    def park(self) -> bool:
        """Close every open file if the log is idle (its lock free) and clean of integrity
        issues (which live in the open segments); each reopens on use."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            log = self._log
            if self._closed or not log.open_segments:
                return True
            if log.issues():
                return False
            try:
                self._flush_locked()
                self._checkpoint_locked()
            except ReplogError:
                return False
            log.release_files()
            if self._files is not None:
                self._files.parked += 1
            return True
        finally:
            self._lock.release()

    @property
    def parked(self) -> bool:
        """No file of the log is open (its active segment reopens on the next use)."""
        return not self._log.open_segments

    def reopen(self) -> None:
        """Open the active segment now (TOO_MANY_OPEN_FILES if no descriptor is left), so
        that a write about to be made does not fail for want of it."""
        with self._lock:
            log = self._opened()
            try:
                log.open_active()
            except OSError as exc:
                raise self._fault(exc, f"reopen {self.directory}") from exc

    def reconfigure(self, config: StorageConfig) -> None:
        """Take `config` (a topic's configs changed): retention, segment rolls and the
        leader's record limit read it from the next pass or append on."""
        with self._lock:
            self.config = self._log.config = config

    # -- state ---------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def durable_offset(self) -> int:
        """Every offset below this one is on disk: the recovery point (the LEO after a clean
        close, 0 when neither is known), moved up by each flush, down by truncations."""
        return self._durable_offset

    @property
    def active_base_offset(self) -> int:
        """The base offset of the active segment (it changes at each roll)."""
        return self._log.active.base_offset

    @property
    def flushed_offset(self) -> int:
        """Every offset below this one has been fsynced."""
        return self._flushed_offset

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        """Under `_lock`: raise LogClosedError once `close` began."""
        if self._closed:
            raise LogClosedError(f"partition {self.topic}/{self.partition} is closed")

    @property
    def size_bytes(self) -> int:
        with self._lock:
            self._check_open()
            return self._log.size_bytes

    @property
    def segment_count(self) -> int:
        return len(self._log.segments)

    def set_high_watermark(self, hw: int) -> None:
        """Move HW (forward, or back only after a truncation; never past LEO)."""
        if not 0 <= hw <= self._leo:
            raise InvalidArgumentError(f"high watermark {hw} outside [0, {self._leo}]")
        self._hw = hw

    def checkpoint_high_watermark(self) -> None:
        with self._lock:
            self._check_open()
            self._checkpoint_locked()

    def _checkpoint_locked(self) -> None:
        hw = self._hw
        if hw != self._hw_checkpointed:
            try:
                self._space.write_vital(partial(checkpoint.write_int, self.directory / HW_FILE, hw))
            except OSError as exc:
                raise self._fault(exc, f"checkpoint {self.directory / HW_FILE}") from exc
            self._hw_checkpointed = hw
        durable = self._durable_offset
        if durable != self._rp_checkpointed:
            try:  # best effort: an older recovery point only makes the next recovery longer
                checkpoint.write_hint(self.directory / RECOVERY_POINT_FILE, durable)
                self._rp_checkpointed = durable
            except OSError:
                pass

    def _lower_recovery_point(self, offset: int) -> None:
        """Before records at or above `offset` are dropped: the recovery point must not
        vouch for segments rewritten past it later (unwritable: the file goes, and the
        next open recovers every segment)."""
        self._durable_offset = min(self._durable_offset, offset)
        rp = self._rp_checkpointed
        if rp is None or rp <= offset:
            return
        path = self.directory / RECOVERY_POINT_FILE
        try:
            checkpoint.write_int(path, offset)
        except OSError:
            try:
                checkpoint.remove_if_exists(path)
                checkpoint.fsync_dir(self.directory)
            except OSError as exc:
                raise self._fault(exc, f"checkpoint {path}") from exc
            self._rp_checkpointed = None
            return
        self._rp_checkpointed = offset

    # -- appends -------------------------------------------------------------------------

    def append(self, values: Sequence[bytes], *, control: bool = False) -> AppendResult:
        """Append records, assigning the next offsets. Blocks for fsync under flush=always."""
        if not values:
            raise EmptyBatchError("an append needs at least one record")
        self.config.check_record_bytes(max(map(len, values)))
        return self._write(partial(frames.encode_with_ends, values=values, control=control))

    def append_pieces(self, pieces: Sequence[tuple[bytes | None, Sequence[bytes]]]) -> AppendResult:
        """Append several runs of records in one write (one fsync under flush=always): each
        piece is an optional control record (a producer batch header) followed by records.
        The result spans every frame written, control records included."""
        if not pieces or not all(values for _, values in pieces):
            raise EmptyBatchError("an append needs at least one record")
        self.config.check_record_bytes(max(max(map(len, values)) for _, values in pieces))
        return self._write(partial(encode_pieces, pieces=pieces))

    def append_frames(self, raw: bytes, *, end_offset: int | None = None) -> AppendResult:
        """Append raw frames as they are (followers): they must start at LEO, contiguous.

        With `end_offset` (a follower's copy of its leader's `[LEO, end_offset)`, the only
        caller that may pass it: client appends get offsets assigned) the frames' offsets
        ascend inside that range with gaps allowed (a range the leader's cleaner compacted;
        none at all when the whole range is a gap), and the LEO becomes `end_offset`.
        Gaps mark the log sparse up to `end_offset` first (`mark_sparse`, fsynced). The
        result's `base_offset` is the old LEO, its `last_offset` `end_offset - 1`."""
        if end_offset is None:
            if not raw:
                raise EmptyBatchError("an append needs at least one frame")
            return self._write(partial(self._check_frames, raw))
        with self._lock:
            leo = self._leo
            try:
                ends, gaps = frames.scan_ascending(raw, leo, end_offset)
            except frames.FrameError as exc:
                raise InvalidFramesError(
                    f"frames are not inside [{leo}, {end_offset}) ascending: {exc}",
                    log_end_offset=leo,
                    position=exc.position,
                ) from None
        if not gaps and leo + len(ends) == end_offset:
            if not ends:
                raise EmptyBatchError("an append needs at least one frame")
            return self._write(lambda _leo: (raw, ends))
        if ends:
            self._check_frame_sizes(ends)
        offsets = [frames.HEADER.unpack_from(raw, e)[0] for e in (0, *ends[:-1])] if ends else []
        with self._lock:
            log = self._opened()
            assert self._leo == leo, "one writer: the replica's driver"
            self._changing()
            if end_offset > self._sparse_end:
                self._write_cleaner_file(CLEANER_SPARSE_FILE, end_offset)
                self._sparse_end = log.sparse_end = end_offset
            try:
                log.append(raw, ends, offsets, end_offset)
            except ReplogError as exc:
                raise self._fault(exc, "append") from None
            self._leo = end_offset
            if self.config.flush is FlushPolicy.ALWAYS:
                self._flush_locked()
            return AppendResult(leo, end_offset - 1)

    def reached(self, data: bytes, offset: int, end_offset: int) -> int:
        """Where a read of `[offset, end_offset)` that returned `data` ends: past its last
        frame, or at `end_offset` when the log holds nothing between the two (a range its
        cleaner compacted; what a follower copies up to, `append_frames`)."""
        reached = frames.next_offset(data, offset)
        if reached >= end_offset or reached >= self._sparse_end:
            return reached  # (no gap above the cleaned range: a record is there)
        rest = self.read_uncommitted(reached, 1, end_offset=end_offset)
        return reached if rest else end_offset

    def _write(self, encode: Callable[[int], tuple[bytes, list[int]]]) -> AppendResult:
        """Append the frames `encode(LEO)` returns (their bytes and the end of each)."""
        with self._lock:
            log = self._opened()  # LogClosedError once `close` began
            leo = self._leo
            data, ends = encode(leo)
            self._changing()
            try:
                self._append_or_shed(log, data, ends)
            except ReplogError as exc:
                raise self._fault(exc, "append") from None
            self._leo = leo + len(ends)
            if self.config.flush is FlushPolicy.ALWAYS and not self.flush_deferred:
                self._flush_locked()
            return AppendResult(leo, self._leo - 1)

    def _check_frames(self, raw: bytes, leo: int) -> tuple[bytes, list[int]]:
        """Raw frames from a leader: they must continue the log at `leo`, none too large."""
        try:
            ends = frames.scan(raw, leo)
        except frames.FrameError as exc:
            raise InvalidFramesError(
                f"frames do not continue the log at offset {leo}: {exc}",
                log_end_offset=leo,
                position=exc.position,
            ) from None
        self._check_frame_sizes(ends)
        return raw, ends

    def _append_or_shed(self, log: SegmentLog, buf: bytes, ends: list[int]) -> None:
        """Out of descriptors rolling a segment (a failed append changes nothing): park every
        other idle log and try once more."""
        try:
            log.append(buf, ends)
        except TooManyOpenFilesError:
            if self._files is None:
                raise
            self._files.park(self._files.others(None))
            log.append(buf, ends)

    def _check_frame_sizes(self, ends: list[int]) -> None:
        widest = max(ends[0], max(map(sub, ends[1:], ends), default=0))
        self.config.check_record_bytes(widest - frames.HEADER_BYTES)

    # -- flush, truncation, retention ------------------------------------------------------

    def flush(self) -> None:
        """fsync everything appended so far, the fsync outside the log's lock (module doc).
        LogClosedError if the log was closed meanwhile (its `close` flushed it)."""
        with self._lock:
            self._check_open()
            leo, truncations = self._leo, self._truncations
            try:
                targets = self._log.sync_targets()
            except ReplogError as exc:
                raise self._fault(exc, "fsync") from None
        try:
            self._sync(targets)
            with self._lock:
                self._check_open()
                if truncations != self._truncations:
                    return
                try:
                    self._log.synced(targets)
                except OSError as exc:
                    raise self._fault(exc, f"fsync {self.directory}") from exc
                self._flushed_offset = max(self._flushed_offset, leo)
                self._durable_offset = max(self._durable_offset, leo)
        finally:
            for target in targets:
                target.close()

    def _sync(self, targets: list[SyncTarget]) -> None:
        """Outside the lock: fsync `targets`; an I/O error is the log's fault (offline)."""
        for target in targets:
            try:
                target.sync()
            except OSError as exc:
                with self._lock:
                    raise self._fault(exc, f"fsync {target.segment.log_path}") from exc

    def _flush_locked(self) -> None:
        try:
            self._log.flush()
        except ReplogError as exc:
            raise self._fault(exc, "fsync") from None
        self._flushed_offset = self._durable_offset = self._leo

    @property
    def needs_flush(self) -> bool:
        return self._log.dirty

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or above `offset`; HW drops with it if it was above."""
        with self._lock:
            log = self._opened()
            if not log.log_start_offset <= offset <= self._leo:
                raise self._out_of_range(offset, self._leo)
            self._changing()
            self._truncations += 1
            self._lower_recovery_point(offset)
            try:
                snapshots.delete_above(self.directory, offset)
                log.truncate_to(offset)
            except OSError as exc:
                raise self._fault(exc, f"truncate {self.directory}") from exc
            self._leo = offset
            self._hw = min(self._hw, offset)
            self._flushed_offset = min(self._flushed_offset, offset)
            if self._hw_checkpointed > self._hw:
                # A checkpoint above the new end would resurrect HW over records appended
                # later in place of the truncated ones: rewrite it before anything else.
                self._checkpoint_locked()

    def reset_to(self, offset: int) -> None:
        """Discard the whole log and start it empty at `offset`, with HW = `offset`.

        For a follower whose log ends below its leader's log start (retention deleted what it
        would fetch next): every offset below the leader's log start is committed, so the
        follower may consider them committed too, though it holds none of them.
        """
        if offset < 0:
            raise InvalidArgumentError(f"offset must be >= 0, got {offset}")
        with self._lock:
            log = self._opened()
            self._changing()
            self._truncations += 1
            self._lower_recovery_point(0)  # a crash part-way leaves any suffix: recover it all
            try:
                snapshots.delete_above(self.directory, -1)
                log.reset_to(offset)
            except OSError as exc:
                raise self._fault(exc, f"reset {self.directory}") from exc
            self._leo = self._flushed_offset = self._durable_offset = self._hw = offset
            self._checkpoint_locked()
            if self._cleaned_end > offset:  # what comes next is dirty again
                self._write_cleaner_file(CLEANER_CHECKPOINT_FILE, offset)
                self._cleaned_end = offset

    def apply_retention(self, now_ms: int) -> int:
        """Delete whole closed segments past the retention limits, below HW. Returns how many."""
        cfg = self.config
        if cfg.retention_bytes is None and cfg.retention_ms is None:
            return 0
        with self._lock:
            log = self._opened()
            count = log.retention_candidates(
                now_ms, self._hw, cfg.retention_bytes, cfg.retention_ms
            )
            if count:
                self._changing()
                try:
                    log.delete_oldest(count)
                    snapshots.delete_below(self.directory, log.log_start_offset)
                except OSError as exc:
                    raise self._fault(exc, f"retention {self.directory}") from exc
            return count

    # -- the log cleaner (cleaner.py) -----------------------------------------------------

    @property
    def cleaned_end(self) -> int:
        """The end of the range the cleaner last cleaned (0: never cleaned)."""
        return self._cleaned_end

    def cleanable_segments(self, newest_ms_max: int | None) -> list[tuple[int, int, int]]:
        """(base offset, end offset, bytes) of the closed segments below HW, oldest first,
        up to the first one with a record newer than `newest_ms_max` (min.compaction.lag.ms)."""
        with self._lock:
            return self._opened().closed_below(self._hw, newest_ms_max)

    def mark_sparse(self, offset: int) -> None:
        """Record (fsynced) that segments below `offset` may get gaps; before a swap."""
        with self._lock:
            self._check_open()
            if offset > self._sparse_end:
                self._write_cleaner_file(CLEANER_SPARSE_FILE, offset)
                self._sparse_end = self._log.sparse_end = offset

    def mark_cleaned(self, offset: int) -> None:
        """Record (fsynced) that the cleaner cleaned up to `offset`; after its swaps."""
        with self._lock:
            self._check_open()
            if offset != self._cleaned_end:
                self._write_cleaner_file(CLEANER_CHECKPOINT_FILE, offset)
                self._cleaned_end = offset

    def _write_cleaner_file(self, name: str, offset: int) -> None:
        self._changing()
        try:
            checkpoint.write_int(self.directory / name, offset)
        except OSError as exc:
            raise self._fault(exc, f"checkpoint {self.directory / name}") from exc

    def swap_cleaned(self, base_offset: int, end_offset: int, cleaned: Segment) -> bool:
        """Put the cleaned copy `cleaned` of the closed segment `[base_offset, end_offset)`
        in its place (`swaps.py`); False (nothing changed) if that segment is gone or changed
        meanwhile (retention, truncation) or is the active one."""
        assert end_offset <= self._sparse_end, "mark_sparse first"
        with self._lock:
            log = self._opened()
            seg = log.segment_at(base_offset)
            if seg is None or seg is log.active or seg.next_offset != end_offset:
                return False
            self._changing()
            try:
                log.swap_cleaned(seg, cleaned)
            except OSError as exc:
                raise self._fault(exc, f"swap a cleaned segment in {self.directory}") from exc
            return True

    # -- state snapshots (snapshots.py) ----------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        """The offsets of the snapshots beside the segments, ascending."""
        with self._lock:
            self._check_open()
            try:
                return snapshots.offsets(self.directory)
            except OSError as exc:
                raise storage_error(exc, f"list {self.directory}") from exc

    def write_snapshot(self, offset: int, payload: bytes) -> None:
        """Write the state of the records below `offset` (the LEO now: the caller's state is
        the log's), atomically; a failure (a full disk) leaves the older snapshots valid."""
        with self._lock:
            self._check_open()
            assert self._log.log_start_offset <= offset <= self._leo, (offset, self._leo)
            try:
                snapshots.write(self.directory, offset, payload, crash_bound=self._rp_checkpointed)
            except OSError as exc:
                raise storage_error(exc, f"snapshot {self.directory}") from exc

    def read_snapshot(self, offset: int) -> bytes:
        """The payload of the snapshot at `offset` (`CorruptDataError` if it is damaged)."""
        with self._lock:
            self._check_open()
            try:
                return snapshots.read(self.directory, offset)
            except OSError as exc:
                raise storage_error(exc, f"read {self.directory}") from exc

    # -- reads ---------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, end_offset: int | None = None) -> bytes:
        """Committed frames from `offset` (in [log_start_offset, HW]); b"" at HW."""
        return self._read(offset, max_bytes, end_offset, self._hw)

    def read_uncommitted(
        self, offset: int, max_bytes: int, *, end_offset: int | None = None
    ) -> bytes:
        """Frames from `offset` up to LEO (replication)."""
        return self._read(offset, max_bytes, end_offset, self._leo)

    def _read(self, offset: int, max_bytes: int, end_offset: int | None, upper: int) -> bytes:
        if max_bytes < 1:
            raise InvalidArgumentError(f"max_bytes must be >= 1, got {max_bytes}")
        max_bytes = min(max_bytes, self.config.read_bytes_max)
        with self._lock:
            log = self._opened()
            if not log.log_start_offset <= offset <= upper:
                raise self._out_of_range(offset, upper)
            end = upper if end_offset is None else min(end_offset, upper)
            try:
                return log.read(offset, max_bytes, end)
            except OSError as exc:
                raise self._fault(exc, f"read {self.directory}") from exc

    def offset_for_time(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first committed record whose timestamp is >=
        `timestamp_ms` (time_index.py); None when no committed record has one."""
        with self._lock:
            log = self._opened()
            try:
                return log.offset_for_time(timestamp_ms, self._hw)
            except OSError as exc:
                raise self._fault(exc, f"read {self.directory}") from exc

    def _out_of_range(self, offset: int, upper: int) -> OffsetOutOfRangeError:
        start = self.log_start_offset
        return OffsetOutOfRangeError(
            f"offset {offset} is outside [{start}, {upper}] of {self.topic}/{self.partition}",
            offset=offset,
            log_start_offset=start,
            high_watermark=self._hw,
            log_end_offset=self._leo,
        )

    # -- integrity -----------------------------------------------------------------------

    def integrity_issues(self) -> list[IntegrityIssue]:
        """Everything found so far: corruption, torn tails cut, indexes rebuilt, damaged
        sidecars, unverified (pre-checksum) segments. See `replog.storage.integrity`."""
        with self._lock:
            self._check_open()
            return self._log.issues()

    def corrupt_ranges(self) -> list[IntegrityIssue]:
        """The ranges that are never served (reads touching them raise CorruptDataError)."""
        return [i for i in self.integrity_issues() if i.kind == CORRUPT]

    def scrub_step(
        self, cursor: tuple[int, int] | None, max_bytes: int
    ) -> tuple[tuple[int, int] | None, int]:
        """Verify about `max_bytes` of segment bytes from `cursor` ((base_offset, position);
        None: the start), holding the partition lock only for that. Returns (the next cursor
        or None when the whole log is done, bytes verified)."""
        with self._lock:
            if self._closed:
                return None, 0
            log = self._opened()
            if cursor is None:
                cursor = (log.log_start_offset, 0)
            try:
                return log.scrub(cursor[0], cursor[1], max_bytes)
            except OSError as exc:
                raise self._fault(exc, f"scrub {self.directory}") from exc

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Flush, checkpoint HW and the recovery point, close the open files (within the
        budget: time independent of the log's size), then mark the clean shutdown."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            errors: list[ReplogError] = []
            clean = self.io_error is None
            try:
                self._flush_locked()
                self._checkpoint_locked()
            except StorageFullError:
                clean = False  # an older HW checkpoint is safe: the replica learns it again
            except ReplogError as exc:
                errors.append(exc)
            self._log.close()
            if clean and not errors and self._rp_checkpointed == self._leo:
                # Best effort: without the marker the next open recovers the tail.
                with contextlib.suppress(OSError):
                    checkpoint.write_hint(self.directory / CLEAN_SHUTDOWN_FILE, self._leo)
        if errors:
            raise errors[0]

    def crash(self) -> None:
        """Close the files as a crash would leave them (tests): no flush, no index trim."""
        with self._lock:
            self._closed = True
            self._log.close(trim=False)


__all__ = ["AppendResult", "PartitionLog", "StorageError"]
