"""A hypothesis state machine: the log cleaner against a last-value-per-key model.

Rules append keyed records, tombstones and records without a key (all committed), let time
pass, run cleaning passes, run passes cut by a crash at any rename of a swap, reopen
cleanly and crash. The model knows every record ever appended and which offsets must be
present: a pass that cleaned up to `cleaned_end` keeps, below it, exactly each key's latest
record (a tombstone only while younger than `delete_retention_ms`), and nothing at or above
it changes. After every step a read from offset 0 returns exactly the present records,
offsets ascending and unchanged, byte for byte; a pass cut by a crash leaves a log between
the one before and the one after it, and no key's latest value is lost.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from replog import frames, records
from replog.storage import FlushPolicy, PartitionLog, StorageConfig, checksums, swaps
from replog.storage.cleaner import CleanerConfig, clean
from replog.storage.open_files import FILES_MAX_MIN, OpenFiles
from tests.storage_helpers import as_after_a_crash

CONFIG = StorageConfig(
    segment_bytes_max=160,
    index_interval_bytes=40,
    index_bytes_initial=24,
    record_bytes_max=300,
    flush=FlushPolicy.NEVER,
    checksum_chunk_bytes=32,
)
RETENTION_MS = 1000
REAL_RENAME, REAL_REPLACE = os.rename, os.replace
REAL_FSYNC, REAL_FDATASYNC = os.fsync, os.fdatasync


def _no_sync(fd: int) -> None:
    pass


CLEANER = CleanerConfig(min_cleanable_dirty_ratio=0.0, delete_retention_ms=RETENTION_MS)

key_st = st.one_of(st.sampled_from([b"a", b"b", b"c", b"d"]), st.none())
record_st = st.tuples(key_st, st.one_of(st.none(), st.binary(max_size=20)))


class CleanerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # In-process crashes lose nothing fsync would keep: fsyncs only cost time here.
        os.fsync = os.fdatasync = _no_sync  # type: ignore[assignment]
        self.dir = Path(tempfile.mkdtemp(prefix="replog-cleaner-"))
        self.log = self.open()
        self.now = 1_000_000
        self.appended: list[tuple[bytes | None, bytes | None, int]] = []  # by offset
        self.present: set[int] = set()

    def open(self) -> PartitionLog:
        return PartitionLog(self.dir, "t", 0, CONFIG)

    def teardown(self) -> None:
        os.fsync, os.fdatasync = REAL_FSYNC, REAL_FDATASYNC
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def frame_value(self, offset: int) -> bytes:
        key, value, ts = self.appended[offset]
        return records.encode(value, key=key, timestamp_ms=ts)

    @rule(batch=st.lists(record_st, min_size=1, max_size=6))
    def append(self, batch: list[tuple[bytes | None, bytes | None]]) -> None:
        base = self.log.log_end_offset
        self.log.append([records.encode(v, key=k, timestamp_ms=self.now) for k, v in batch])
        self.log.set_high_watermark(self.log.log_end_offset)
        for i, (key, value) in enumerate(batch):
            self.appended.append((key, value, self.now))
            self.present.add(base + i)

    @rule(batch=st.lists(record_st, min_size=1, max_size=8))
    def an_uncommitted_tail_is_truncated(
        self, batch: list[tuple[bytes | None, bytes | None]]
    ) -> None:
        hw = self.log.high_watermark
        self.log.append([records.encode(v, key=k, timestamp_ms=self.now) for k, v in batch])
        self.log.truncate_to(hw)  # a new leader's log ends at the HW: the tail goes
        assert self.log.log_end_offset == hw

    @rule(ms=st.integers(min_value=0, max_value=1500))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    def expected_after(self, cleaned_end: int) -> set[int]:
        latest: dict[bytes | None, int] = {}
        for offset in range(cleaned_end):
            latest[self.appended[offset][0]] = offset
        horizon = self.now - RETENTION_MS
        kept = set()
        for offset in self.present:
            key, value, ts = self.appended[offset]
            if offset >= cleaned_end or (
                key is not None and latest[key] == offset and not (value is None and ts < horizon)
            ):
                kept.add(offset)
        return kept

    @rule()
    def a_pass(self) -> None:
        result = clean(self.log, CLEANER, self.now)
        if result is not None:
            assert result.cleaned_end == self.log.cleaned_end <= self.log.high_watermark
            self.present = self.expected_after(result.cleaned_end)

    @rule(step=st.integers(min_value=1, max_value=30))
    def a_pass_cut_by_a_crash(self, step: int) -> None:
        self.log.flush()
        self.log.checkpoint_high_watermark()
        before = set(self.present)
        cleanable = self.log.cleanable_segments(None)
        intended_end = cleanable[-1][1] if cleanable else 0  # where this pass would end
        calls = [0]

        def failing(src: Path, dst: Path) -> None:  # every rename: swaps' and checkpoints'
            calls[0] += 1
            if calls[0] == step:
                raise OSError(5, "injected crash")
            REAL_REPLACE(src, dst)

        swaps.os.rename = swaps.os.replace = failing  # type: ignore[assignment]
        try:
            result = clean(self.log, CLEANER, self.now)
        except Exception:
            result = None
        finally:
            swaps.os.rename, swaps.os.replace = REAL_RENAME, REAL_REPLACE
        self.log.crash()
        as_after_a_crash(self.dir)
        self.log = self.open()
        seen = {offset for offset, _ in self.read_all()}
        assert self.expected_after(intended_end) <= seen <= before
        if result is not None:
            assert seen == self.expected_after(result.cleaned_end)
        self.present = seen

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = self.open()

    @rule()
    def crash(self) -> None:
        self.log.flush()
        self.log.checkpoint_high_watermark()
        self.log.crash()
        as_after_a_crash(self.dir)
        self.log = self.open()

    def read_all(self) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        offset = 0
        while offset < self.log.high_watermark:
            batch = frames.decode(self.log.read(offset, 70))
            assert batch.offsets and batch.offsets[0] >= offset
            out += batch.rows
            offset = batch.offsets[-1] + 1
        return out

    @invariant()
    def a_read_from_zero_returns_exactly_the_present_records(self) -> None:
        rows = self.read_all()
        assert [o for o, _ in rows] == sorted(self.present)
        for offset, value in rows:
            assert value == self.frame_value(offset)
        assert self.log.log_end_offset == len(self.appended)

    @invariant()
    def every_segment_has_a_sidecar_covering_it_and_nothing_is_corrupt(self) -> None:
        for path in self.dir.glob("*.log"):
            coverage = checksums.parse(path.with_suffix(".crc").read_bytes())
            assert coverage.covered_end == path.stat().st_size
            assert not coverage.damaged and not coverage.lost_blocks
        assert self.log.integrity_issues() == []

    @invariant()
    def no_keys_latest_value_is_lost(self) -> None:
        latest: dict[bytes, int] = {}
        for offset, (key, _, _) in enumerate(self.appended):
            if key is not None:
                latest[key] = offset
        for offset in latest.values():
            if self.appended[offset][1] is not None:
                assert offset in self.present


class BudgetedCleanerMachine(CleanerMachine):
    """The same rules under a node-wide budget of a few open segments: cleaned segments are
    closed and opened again all the time (LRU eviction), and idle logs are parked."""

    def __init__(self) -> None:
        self.files = OpenFiles(FILES_MAX_MIN)
        super().__init__()

    def open(self) -> PartitionLog:
        return PartitionLog(self.dir, "t", 0, CONFIG, self.files)

    @rule()
    def park_like_an_idle_log(self) -> None:
        assert self.log.park() and self.log.parked

    @invariant()
    def the_open_segments_stay_within_the_budget(self) -> None:
        assert self.files.total <= self.files.files_max


TestCleaner = CleanerMachine.TestCase
TestCleaner.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)
TestBudgetedCleaner = BudgetedCleanerMachine.TestCase
TestBudgetedCleaner.settings = settings(max_examples=30, stateful_step_count=30, deadline=None)
