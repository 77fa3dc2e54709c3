"""Offsets by time in storage (`time_index.py`, `segment.py`): time retention by record
timestamps, stale `.timeindex` files never trusted, truncation, partitions without times."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from replog import records
from replog.storage import FlushPolicy, PartitionLog, StorageConfig

CONFIG = StorageConfig(
    segment_bytes_max=200,
    index_interval_bytes=64,
    index_bytes_initial=24,
    record_bytes_max=100,
    flush=FlushPolicy.NEVER,
    timestamps=records.frame_timestamps,
)
HOUR_MS = 3_600_000


def _append(log: PartitionLog, stamps: list[int], value: bytes = b"v" * 40) -> None:
    """One record per timestamp (72 bytes each with the default value: 2 per segment)."""
    for ts in stamps:
        log.append([records.encode(value, timestamp_ms=ts)])
    log.set_high_watermark(log.log_end_offset)


def test_time_retention_uses_record_timestamps_not_file_times(tmp_path: Path) -> None:
    config = dataclasses.replace(CONFIG, retention_ms=HOUR_MS)
    log = PartitionLog(tmp_path / "p", "t", 0, config)
    now_ms = 1_800_000_000_000
    old, future = now_ms - 3 * HOUR_MS, now_ms + HOUR_MS
    _append(log, [old] * 6 + [future] * 6 + [now_ms] * 3)
    bases = [s.base_offset for s in log._opened().segments]
    assert len(bases) >= 5
    deleted = log.apply_retention(now_ms)
    # The segments of old records go, though their files were written a moment ago; one
    # with a future timestamp stops retention there (Kafka's rule).
    assert deleted == 3
    assert log.log_start_offset == 6
    assert log.offset_for_time(old) == (6, future)
    log.close()


def test_a_stale_time_index_file_is_rebuilt_not_trusted(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    log = PartitionLog(directory, "t", 0, CONFIG)
    _append(log, [10, 20], b"small")  # 37-byte records: all in one segment
    assert log.offset_for_time(15) == (1, 20)
    log.close()
    (path,) = directory.glob("*.timeindex")
    stale = path.read_bytes()
    log = PartitionLog(directory, "t", 0, CONFIG)
    _append(log, [30], b"small")  # the append deletes the file first
    assert not path.exists()
    log.crash()
    path.write_bytes(stale)  # as if the delete had been lost: it describes 2 records
    log = PartitionLog(directory, "t", 0, CONFIG)
    log.set_high_watermark(log.log_end_offset)
    assert log.offset_for_time(25) == (2, 30)
    log.close()


def test_records_replaced_after_a_truncation_are_found_by_their_new_times(
    tmp_path: Path,
) -> None:
    log = PartitionLog(tmp_path / "p", "t", 0, CONFIG)
    _append(log, [100, 200, 300])
    assert log.offset_for_time(250) == (2, 300)
    log.truncate_to(0)  # a follower dropping what a new leader does not have
    _append(log, [5, 7])
    assert log.offset_for_time(250) is None
    assert log.offset_for_time(6) == (1, 7)
    assert log.offset_for_time(0) == (0, 5)
    log.close()


def test_only_committed_records_answer(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "p", "t", 0, CONFIG)
    _append(log, [1, 2])
    log.append([records.encode(b"x", timestamp_ms=50)])  # above the high watermark
    assert log.offset_for_time(40) is None
    log.set_high_watermark(3)
    assert log.offset_for_time(40) == (2, 50)
    log.close()


def test_a_partition_without_timestamps_has_no_time_index(tmp_path: Path) -> None:
    config = dataclasses.replace(CONFIG, timestamps=None)
    directory = tmp_path / "p"
    log = PartitionLog(directory, "t", 0, config)
    _append(log, [10])
    assert log.offset_for_time(0) is None
    log.close()
    assert not list(directory.glob("*.timeindex"))
    assert all(not name.endswith(".tmp") for name in os.listdir(directory))
