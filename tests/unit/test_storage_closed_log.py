"""A closed partition log never touches a file again: every operation raises LogClosedError.

The server closes a replica's log when its topic is deleted while requests still hold it;
they must get a typed error (the server answers UNKNOWN_TOPIC), never EBADF, a read of a
file descriptor the process has reused for another file, or a write into the directory of a
topic created again under the same name.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from replog.errors import LogClosedError, ReplogError
from replog.storage import PartitionLog
from tests.storage_helpers import TINY, open_log

RACE_ROUNDS = 20
RACE_TIME_S = 10.0


def filled_log(path: Path, records: int = 50) -> PartitionLog:
    log = open_log(path, replace(TINY, retention_bytes=1 << 30))  # retention on, never due
    for i in range(records):
        log.append([b"record-%03d" % i])
    log.set_high_watermark(log.log_end_offset)
    return log


OPERATIONS: dict[str, Callable[[PartitionLog], object]] = {
    "read": lambda log: log.read(0, 1024),
    "read_uncommitted": lambda log: log.read_uncommitted(0, 1024),
    "append": lambda log: log.append([b"late"]),
    "flush": lambda log: log.flush(),
    "checkpoint": lambda log: log.checkpoint_high_watermark(),
    "truncate": lambda log: log.truncate_to(1),
    "reset": lambda log: log.reset_to(5),
    "retention": lambda log: log.apply_retention(0),
    "size": lambda log: log.size_bytes,
    "integrity": lambda log: log.integrity_issues(),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_every_operation_on_a_closed_log_raises_log_closed(tmp_path: Path, operation: str) -> None:
    log = filled_log(tmp_path)
    log.close()
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(LogClosedError):
        OPERATIONS[operation](log)
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "no file written or removed"


def test_a_closed_log_never_reads_a_reused_file_descriptor(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "log")
    log.close()
    # Take the lowest free descriptors, which are the ones the log's files just released.
    other = tmp_path / "other"
    other.write_bytes(b"not a segment " * 1000)
    fds = [os.open(other, os.O_RDONLY) for _ in range(8)]
    try:
        with pytest.raises(LogClosedError):
            log.read(0, 1024)
    finally:
        for fd in fds:
            os.close(fd)


def test_a_closed_log_does_not_write_the_directory_of_a_topic_created_again(
    tmp_path: Path,
) -> None:
    old = filled_log(tmp_path)
    old.close()
    for p in tmp_path.iterdir():  # deleted, then created again under the same path
        p.unlink()
    new = open_log(tmp_path, TINY)
    old.set_high_watermark(old.log_end_offset)  # in memory only
    with pytest.raises(LogClosedError):
        old.checkpoint_high_watermark()
    new.close()
    assert open_log(tmp_path, TINY).high_watermark == 0


def test_reads_and_appends_racing_close_end_with_log_closed_only(tmp_path: Path) -> None:
    deadline = time.monotonic() + RACE_TIME_S
    for round_ in range(RACE_ROUNDS):
        if time.monotonic() > deadline:
            break
        log = filled_log(tmp_path / f"r{round_}")
        errors: list[BaseException] = []
        started = threading.Barrier(5)

        def hammer(
            op: Callable[[PartitionLog], object],
            log: PartitionLog = log,
            started: threading.Barrier = started,
            errors: list[BaseException] = errors,
        ) -> None:
            started.wait()
            for _ in range(10_000):  # bounded: ends at the first error in practice
                try:
                    op(log)
                except ReplogError as exc:
                    errors.append(exc)
                    return

        ops = [OPERATIONS["read"], OPERATIONS["read_uncommitted"], OPERATIONS["append"]]
        ops.append(lambda log: log.read(log.log_start_offset, 64))
        threads = [threading.Thread(target=hammer, args=(op,)) for op in ops]
        for t in threads:
            t.start()
        started.wait()
        time.sleep(0.002 * (round_ % 5))
        log.close()
        for t in threads:
            t.join(RACE_TIME_S)
            assert not t.is_alive()
        assert errors, "every thread ends with an error once the log is closed"
        assert all(isinstance(e, LogClosedError) for e in errors), errors
