"""PartitionLog.flush fsyncs outside the log's lock: what happens to the log while an fsync
runs (an append, a roll, a truncation, a reset, retention, a park, a close) never lets the
flushed offset pass what the fsync covered, nor the LEO.

Each test slows the first `.log` fsync of a flush down with a hook that performs the change
in another thread and waits for it: were the lock held during the fsync, the change would
not finish (the hook asserts that it does).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from replog.errors import LogClosedError
from replog.storage import FlushPolicy, PartitionLog, StorageConfig, checksums
from replog.storage.open_files import FILES_MAX_MIN, OpenFiles
from tests.storage_helpers import TINY, DuringFsync, open_log, read_all


@pytest.fixture
def during(monkeypatch: pytest.MonkeyPatch) -> Iterator[DuringFsync]:
    hook = DuringFsync()
    monkeypatch.setattr(os, "fdatasync", hook)
    yield hook


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _flushed_marks(log: PartitionLog) -> dict[str, int]:
    return {
        p.stem: checksums.parse(p.read_bytes()).flushed_position
        for p in sorted(log.directory.glob("*.crc"))
    }


def test_appends_made_during_the_fsync_stay_unflushed_until_the_next_flush(
    tmp_path: Path, during: DuringFsync
) -> None:
    log = open_log(tmp_path)
    log.append([b"a", b"b"])
    during.change = lambda: log.append([b"c", b"d", b"e"])
    fds = _open_fds()
    log.flush()
    assert during.ran
    assert (log.flushed_offset, log.durable_offset, log.log_end_offset) == (2, 2, 5)
    assert log.needs_flush, "the segment was written during the fsync"
    assert _open_fds() == fds, "the duplicated descriptors are closed"
    log.flush()
    assert (log.flushed_offset, log.needs_flush) == (5, False)
    assert read_all(log) == [b"a", b"b", b"c", b"d", b"e"]


def test_a_roll_during_the_fsync_keeps_the_rolled_segment_flushed_and_marked(
    tmp_path: Path, during: DuringFsync
) -> None:
    log = open_log(tmp_path)  # 256-byte segments
    log.append([b"x" * 100])
    size_before = (tmp_path / f"{0:020d}.log").stat().st_size
    during.change = lambda: log.append([b"y" * 200, b"z" * 200])  # two rolls
    log.flush()
    assert log.segment_count == 3
    assert (log.flushed_offset, log.log_end_offset) == (1, 3)
    assert _flushed_marks(log)[f"{0:020d}"] == size_before, "the fsynced bytes are marked"
    log.flush()
    assert log.flushed_offset == 3 and not log.needs_flush
    log.close()
    log = open_log(tmp_path)
    assert read_all(log) == [b"x" * 100, b"y" * 200, b"z" * 200]
    log.close()


def test_a_truncation_during_the_fsync_keeps_the_flushed_offset_below_it(
    tmp_path: Path, during: DuringFsync
) -> None:
    log = open_log(tmp_path)
    log.append([b"a"])
    log.flush()
    log.append([b"b", b"c", b"d", b"e"])

    def truncate_and_write_past() -> None:  # the LEO ends above the one the fsync covers
        log.truncate_to(2)
        log.append([b"F", b"G", b"H", b"I", b"J"])

    during.change = truncate_and_write_past
    log.flush()
    assert log.log_end_offset == 7
    assert log.flushed_offset == 1, "not past the truncation: offsets 2.. are new records"
    assert log.durable_offset <= 2 and log.needs_flush
    log.flush()
    assert log.flushed_offset == 7
    assert read_all(log) == [b"a", b"b", b"F", b"G", b"H", b"I", b"J"]


def test_a_truncation_during_the_fsync_leaves_the_flushed_offset_where_it_was(
    tmp_path: Path, during: DuringFsync
) -> None:
    log = open_log(tmp_path)
    log.append([b"a", b"b", b"c"])
    during.change = lambda: log.truncate_to(1)
    log.flush()
    assert (log.flushed_offset, log.log_end_offset) == (0, 1), "never past the LEO"
    log.flush()
    assert (log.flushed_offset, log.needs_flush) == (1, False)


def test_a_reset_during_the_fsync_keeps_the_flushed_offset_at_the_new_start(
    tmp_path: Path, during: DuringFsync
) -> None:
    log = open_log(tmp_path)
    log.append([b"a", b"b", b"c"])
    during.change = lambda: log.reset_to(10)
    log.flush()
    assert (log.log_start_offset, log.log_end_offset, log.flushed_offset) == (10, 10, 10)
    log.append([b"k"])
    log.flush()
    assert log.flushed_offset == 11


def test_retention_deleting_the_segment_being_fsynced_does_no_harm(
    tmp_path: Path, during: DuringFsync
) -> None:
    config = StorageConfig(
        segment_bytes_max=256,
        index_interval_bytes=64,
        index_bytes_initial=24,
        record_bytes_max=1000,
        retention_bytes=300,
        flush=FlushPolicy.NEVER,
    )
    log = open_log(tmp_path, config)
    log.append([b"o" * 200])
    log.append([b"p" * 200])  # rolls: the first segment is closed, written, not fsynced
    log.append([b"q" * 200])
    log.set_high_watermark(3)
    during.change = lambda: log.apply_retention(now_ms=0)
    log.flush()
    assert log.log_start_offset == 2, "retention deleted both fsynced segments meanwhile"
    assert not (tmp_path / f"{0:020d}.log").exists()
    assert log.flushed_offset == 3 and not log.needs_flush
    assert read_all(log) == [b"q" * 200]


def test_a_segment_parked_during_the_fsync_is_flushed_by_the_park(
    tmp_path: Path, during: DuringFsync
) -> None:
    log = PartitionLog(tmp_path, "t", 0, TINY, OpenFiles(FILES_MAX_MIN))
    log.append([b"a", b"b"])
    during.change = lambda: None if log.park() else pytest.fail("not parked")
    log.flush()
    assert log.parked and log.flushed_offset == 2 and not log.needs_flush
    log.append([b"c"])
    log.flush()
    assert log.flushed_offset == 3
    assert read_all(log) == [b"a", b"b", b"c"]
    log.close()


def test_a_log_closed_during_the_fsync_says_so_and_keeps_what_close_flushed(
    tmp_path: Path, during: DuringFsync
) -> None:
    log = open_log(tmp_path)
    log.append([b"a", b"b"])
    fds = _open_fds()
    during.change = log.close
    with pytest.raises(LogClosedError):
        log.flush()
    assert _open_fds() < fds, "the log's files and the duplicates are closed"
    log = open_log(tmp_path)
    assert log.segments_recovered == 0 and read_all(log) == [b"a", b"b"]
    log.close()
