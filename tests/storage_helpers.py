"""Shared helpers for storage tests: tiny configs, a whole-log reader, a change made while
a flush's fsync runs."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from replog import frames
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from replog.storage.partition_log import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE

TINY = StorageConfig(
    segment_bytes_max=256,
    index_interval_bytes=64,
    index_bytes_initial=24,
    record_bytes_max=1000,
    flush=FlushPolicy.NEVER,
)


def as_after_a_crash(directory: Path) -> None:
    """Make a cleanly closed log's directory look as a crash before any checkpoint leaves
    it (no clean-shutdown marker, no recovery point): the next open recovers every segment.
    For tests that damage files to stand for what a crash leaves on disk."""
    (directory / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    (directory / RECOVERY_POINT_FILE).unlink(missing_ok=True)


def open_log(directory: Path, config: StorageConfig = TINY) -> PartitionLog:
    return PartitionLog(directory, "t", 0, config)


def read_all(log: PartitionLog, *, uncommitted: bool = True, chunk: int = 100) -> list[bytes]:
    """Every value from log_start_offset, read in chunks of about `chunk` bytes."""
    read = log.read_uncommitted if uncommitted else log.read
    upper = log.log_end_offset if uncommitted else log.high_watermark
    values: list[bytes] = []
    offset = log.log_start_offset
    while offset < upper:
        batch = frames.decode(read(offset, chunk))
        assert batch.offsets[0] == offset, "reads start exactly at the requested offset"
        assert batch.offsets == list(range(offset, offset + len(batch))), "offsets are dense"
        values.extend(batch.values)
        offset += len(batch)
    return values


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


CHANGE_DEADLINE_S = 60.0


class DuringFsync:
    """Runs `change` once, inside the first `.log` fsync, before the real one, in another
    thread that it waits for: were the log's lock held during the fsync, the change would
    not finish (asserted)."""

    def __init__(self) -> None:
        self.change: Callable[[], None] | None = None  # set again for another flush
        self.ran = False
        self._real = os.fdatasync
        self._guard = threading.Lock()

    def __call__(self, fd: int) -> None:
        """Put in place of `os.fdatasync` (`monkeypatch.setattr(os, "fdatasync", hook)`)."""
        change = None
        if self.change is not None and os.readlink(f"/proc/self/fd/{fd}").endswith(".log"):
            with self._guard:
                change, self.change = self.change, None
        if change is not None:
            errors: list[BaseException] = []

            def run() -> None:
                try:
                    change()
                except BaseException as exc:  # reported below, in the flushing thread
                    errors.append(exc)

            worker = threading.Thread(target=run)
            worker.start()
            worker.join(CHANGE_DEADLINE_S)
            assert not worker.is_alive(), "the change waited for the fsync: lock held"
            assert not errors, errors
            self.ran = True
        self._real(fd)
