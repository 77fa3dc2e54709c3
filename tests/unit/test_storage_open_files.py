"""A node keeps a bounded number of storage files open: idle partition logs are parked
(files closed) and reopened on use, with every record and offset intact."""

from __future__ import annotations

import os
from pathlib import Path

from replog.storage import PartitionLog
from replog.storage.open_files import FILES_PER_SEGMENT, OpenFiles, files_max_for
from tests.storage_helpers import TINY, open_log, read_all

LOGS = 12
BUDGET = 4 * FILES_PER_SEGMENT  # room for a few single-segment logs


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def budgeted(tmp_path: Path, files: OpenFiles, i: int) -> PartitionLog:
    return PartitionLog(tmp_path / f"p{i}", "t", i, TINY, files)


def test_many_logs_stay_within_the_budget_and_keep_every_record(tmp_path: Path) -> None:
    baseline = open_fds()
    files = OpenFiles(BUDGET)
    logs = [budgeted(tmp_path, files, i) for i in range(LOGS)]
    model: list[list[bytes]] = [[] for _ in range(LOGS)]
    for round_ in range(20):  # round robin: every log is parked and reopened many times
        for i, log in enumerate(logs):
            value = b"p%d-r%d" % (i, round_)
            log.append([value])
            model[i].append(value)
            log.set_high_watermark(log.log_end_offset)
            # A log in use may exceed the budget alone.
            held = open_fds() - baseline
            assert held <= BUDGET + FILES_PER_SEGMENT * log.segment_count, held
    assert files.parked > LOGS
    assert sum(log.parked for log in logs) >= LOGS - BUDGET // FILES_PER_SEGMENT
    for i, log in enumerate(logs):
        assert read_all(log, uncommitted=False) == model[i]
        assert log.high_watermark == log.log_end_offset == len(model[i])
    for log in logs:
        log.close()
    assert files.total == 0 and len(files) == 0
    # <=: a descriptor of the process that was open at the start (another test's) may have
    # been closed since; none of ours is left.
    assert open_fds() <= baseline
    for i in range(LOGS):  # a parked log closed cleanly: it reopens with its HW
        again = open_log(tmp_path / f"p{i}")
        assert again.high_watermark == len(model[i])
        assert read_all(again, uncommitted=False) == model[i]
        again.close()


def test_a_parked_log_answers_offsets_and_sizes_without_opening_files(tmp_path: Path) -> None:
    files = OpenFiles(BUDGET)
    log = budgeted(tmp_path, files, 0)
    for i in range(30):
        log.append([b"x%d" % i])
    size, segments, start = log.size_bytes, log.segment_count, log.log_start_offset
    assert log.park() and log.parked and files.total == 0
    baseline = open_fds()
    assert (log.size_bytes, log.segment_count, log.log_start_offset) == (size, segments, start)
    assert log.log_end_offset == 30 and not log.needs_flush and log.integrity_issues() == []
    assert open_fds() <= baseline  # opened nothing (another test's descriptor may close)
    assert log.read_uncommitted(0, 1 << 20)  # reopens
    assert not log.parked and files.total == FILES_PER_SEGMENT * segments
    log.close()


def test_a_busy_log_is_not_parked(tmp_path: Path) -> None:
    files = OpenFiles(BUDGET)
    log = budgeted(tmp_path, files, 0)
    with log._lock:  # another thread is in the middle of an operation
        assert not log.park()
    assert log.park()
    log.close()


def test_the_default_budget_is_half_the_descriptor_limit() -> None:
    assert files_max_for(1024) == 512
    assert files_max_for(10) >= FILES_PER_SEGMENT * 3
