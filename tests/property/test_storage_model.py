"""A hypothesis state machine: the segment log against a plain list of records.

Rules append (batch and single, mixed sizes including empty values), append raw frames,
read at random offsets with random budgets, stream the whole log, move the high watermark,
truncate, apply retention, reset to an empty log further on, reopen cleanly and crash (close
without flushing or trimming the index), and flush while an append, a roll, a truncation or
a reset happens during the fsync (it runs outside the log's lock): the flushed offset must
be what the model says (never past what an fsync covered, nor the LEO). After every step
the log must agree with the model, every segment's `.crc` sidecar must cover exactly its
`.log` (with checksums that match, as `replog verify` checks after every reopen), and
nothing may be reported corrupt.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from replog import frames
from replog.errors import OffsetOutOfRangeError
from replog.storage import FlushPolicy, PartitionLog, StorageConfig, checksums
from replog.storage.open_files import FILES_MAX_MIN, OpenFiles
from replog.storage.verify import VerifyReport, verify_partition
from tests.storage_helpers import DuringFsync, read_all

CONFIG = StorageConfig(
    segment_bytes_max=256,
    index_interval_bytes=64,
    index_bytes_initial=24,
    record_bytes_max=300,
    retention_bytes=700,
    flush=FlushPolicy.NEVER,
    checksum_chunk_bytes=48,
)

value_st = st.one_of(
    st.binary(min_size=0, max_size=8),
    st.binary(min_size=20, max_size=60),
    st.binary(min_size=240, max_size=300),  # larger than what is left of any segment
)


class SegmentLogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="replog-prop-"))
        self.log = self.open()
        self.start = 0
        self.records: list[bytes] = []
        self.hw = 0
        self.checkpointed_hw = 0
        self.flushed = 0  # what `flushed_offset` must say

    def open(self) -> PartitionLog:
        return PartitionLog(self.dir, "t", 0, CONFIG)

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def leo(self) -> int:
        return self.start + len(self.records)

    @rule(values=st.lists(value_st, min_size=1, max_size=12))
    def append_batch(self, values: list[bytes]) -> None:
        result = self.log.append(values)
        assert result.base_offset == self.leo
        self.records.extend(values)

    @rule(value=value_st)
    def append_single(self, value: bytes) -> None:
        assert self.log.append([value]).base_offset == self.leo
        self.records.append(value)

    @rule(values=st.lists(value_st, min_size=1, max_size=6))
    def append_frames_like_a_follower(self, values: list[bytes]) -> None:
        result = self.log.append_frames(frames.encode(self.leo, values))
        assert result.last_offset == self.leo + len(values) - 1
        self.records.extend(values)

    @rule(data=st.data(), budget=st.integers(min_value=1, max_value=2000))
    def read_at_random_offset(self, data: st.DataObject, budget: int) -> None:
        offset = data.draw(st.integers(min_value=self.start, max_value=self.leo))
        decoded = frames.decode(self.log.read_uncommitted(offset, budget))
        expected = self.records[offset - self.start :]
        if offset == self.leo:
            assert len(decoded) == 0
            return
        assert 1 <= len(decoded) <= len(expected)
        assert decoded.offsets == list(range(offset, offset + len(decoded)))
        assert decoded.values == expected[: len(decoded)]
        if len(decoded) > 1:
            assert sum(frames.HEADER_BYTES + len(v) for v in decoded.values) <= budget

    @rule(data=st.data())
    def committed_reads_stop_at_the_high_watermark(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(min_value=self.start, max_value=self.leo + 2))
        if offset > self.hw:
            try:
                self.log.read(offset, 10_000)
            except OffsetOutOfRangeError:
                return
            raise AssertionError(f"read({offset}) above HW {self.hw} was served")
        decoded = frames.decode(self.log.read(offset, 10_000))
        assert all(o < self.hw for o in decoded.offsets)
        assert (
            decoded.values
            == self.records[offset - self.start : self.hw - self.start][: len(decoded)]
        )

    @rule(chunk=st.integers(min_value=1, max_value=1500))
    def stream_everything(self, chunk: int) -> None:
        assert read_all(self.log, chunk=chunk) == self.records

    @rule(data=st.data())
    def move_high_watermark(self, data: st.DataObject) -> None:
        self.hw = data.draw(st.integers(min_value=self.hw, max_value=self.leo))
        self.log.set_high_watermark(self.hw)

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        self._truncate(data.draw(st.integers(min_value=self.start, max_value=self.leo)))

    def _truncate(self, offset: int) -> None:
        self.log.truncate_to(offset)
        del self.records[offset - self.start :]
        self.hw = min(self.hw, offset)
        self.checkpointed_hw = min(self.checkpointed_hw, offset)
        self.flushed = min(self.flushed, offset)

    @rule()
    def retention(self) -> None:
        self.log.apply_retention(now_ms=0)
        new_start = self.log.log_start_offset
        assert self.start <= new_start <= max(self.hw, self.start)
        del self.records[: new_start - self.start]
        self.start = new_start

    @rule(ahead=st.integers(min_value=0, max_value=40))
    def reset_past_the_end_like_a_follower_behind_retention(self, ahead: int) -> None:
        offset = self.leo + ahead
        self.log.reset_to(offset)
        self.start, self.records = offset, []
        self.hw = self.checkpointed_hw = self.flushed = offset

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.checkpointed_hw = self.hw
        self.verify_offline()
        self.log = self.open()
        self.flushed = self.leo
        assert self.log.segments_recovered == 0, "a clean stop leaves nothing to recover"

    @rule()
    def crash(self) -> None:
        self.log.crash()
        self.verify_offline()
        self.log = self.open()
        self.flushed = self.leo  # (the page cache kept it: the process crashed, not the disk)
        self.hw = max(min(self.checkpointed_hw, self.leo), self.start)

    @rule()
    def flush_and_checkpoint_like_the_flusher(self) -> None:
        """The recovery point moves to the log end: a crash then recovers only what follows."""
        self.log.flush()
        self.log.checkpoint_high_watermark()
        self.checkpointed_hw = self.hw
        self.flushed = self.leo

    @rule(
        change=st.sampled_from(["append", "roll", "truncate", "reset"]),
        data=st.data(),
        values=st.lists(value_st, min_size=1, max_size=4),
    )
    def flush_while_the_log_changes(
        self, change: str, data: st.DataObject, values: list[bytes]
    ) -> None:
        """The group flusher's flush: the fsync runs outside the lock while the owner
        appends (maybe rolling segments), or a follower's log is truncated or reset."""
        self.append_single(b"w")  # something to fsync: the change runs inside that fsync
        covered = self.leo
        hook = DuringFsync()
        if change == "append":
            hook.change = lambda: self.append_batch(values)
        elif change == "roll":
            hook.change = lambda: self.append_batch([b"r" * 250, b"s" * 250])
        elif change == "truncate":
            offset = data.draw(st.integers(min_value=self.start, max_value=self.leo))
            hook.change = lambda: self._truncate(offset)
        else:
            ahead = data.draw(st.integers(min_value=0, max_value=40))
            hook.change = lambda: self.reset_past_the_end_like_a_follower_behind_retention(ahead)
        real = os.fdatasync
        os.fdatasync = hook
        try:
            self.log.flush()
        finally:
            os.fdatasync = real
        assert hook.ran
        if change in ("append", "roll"):
            self.flushed = max(self.flushed, covered)  # (a truncation's own rule lowered it)

    def verify_offline(self) -> None:
        report = VerifyReport()
        verify_partition(self.dir, report)
        assert report.ok, [str(f) for f in report.findings]
        assert report.records == len(self.records)

    @invariant()
    def every_segment_has_a_sidecar_covering_it_and_nothing_is_corrupt(self) -> None:
        for path in self.dir.glob("*.log"):
            sidecar = path.with_suffix(".crc").read_bytes()
            coverage = checksums.parse(sidecar)
            assert coverage.covered_end == path.stat().st_size
            assert not coverage.damaged and not coverage.lost_blocks
        assert sorted(p.stem for p in self.dir.glob("*.crc")) == sorted(
            p.stem for p in self.dir.glob("*.log")
        )
        assert self.log.integrity_issues() == []

    @invariant()
    def offsets_agree(self) -> None:
        assert self.log.log_start_offset == self.start
        assert self.log.log_end_offset == self.leo
        assert self.log.high_watermark == self.hw
        assert self.log.flushed_offset == self.flushed <= self.leo
        for path in self.dir.glob("*.log"):
            size = path.stat().st_size
            assert size <= CONFIG.segment_bytes_max or size <= 312, "segments respect the limit"


TestSegmentLog = SegmentLogMachine.TestCase


class BudgetedSegmentLogMachine(SegmentLogMachine):
    """The same rules under a node-wide budget of three open segments: reads, rolls,
    retention, truncation and reopens close and open segments all the time (LRU eviction),
    and the log must still agree with the model."""

    def __init__(self) -> None:
        self.files = OpenFiles(FILES_MAX_MIN)
        super().__init__()

    def open(self) -> PartitionLog:
        return PartitionLog(self.dir, "t", 0, CONFIG, self.files)

    @rule()
    def park_like_an_idle_log(self) -> None:
        had_open_files = not self.log.parked
        assert self.log.park() and self.log.parked
        if had_open_files:  # closing files flushes them and checkpoints the HW first
            self.checkpointed_hw = self.hw
            self.flushed = self.leo

    @invariant()
    def the_open_segments_stay_within_the_budget(self) -> None:
        assert self.files.total <= self.files.files_max


TestBudgetedSegmentLog = BudgetedSegmentLogMachine.TestCase
