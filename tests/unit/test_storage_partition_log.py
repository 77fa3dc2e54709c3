"""PartitionLog: LEO, the exclusive high watermark, its checkpoint, flush."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from replog import frames
from replog.errors import InvalidArgumentError, OffsetOutOfRangeError, ShuttingDownError
from replog.storage import FlushPolicy, StorageConfig
from tests.storage_helpers import TINY, open_log, read_all


def test_an_empty_log_has_nothing_committed(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    assert log.read(0, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)


def test_append_assigns_dense_offsets_and_advances_leo(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.append([b"a", b"b"])
    second = log.append([b"c"])
    assert (first.base_offset, first.last_offset, first.count) == (0, 1, 2)
    assert (second.base_offset, second.last_offset) == (2, 2)
    assert log.log_end_offset == 3


def test_consumers_read_only_below_the_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append([b"a", b"b", b"c"])
    assert log.read(0, 100) == b"", "nothing is committed yet"
    with pytest.raises(OffsetOutOfRangeError) as err:
        log.read(2, 100)
    assert (err.value.offset, err.value.high_watermark) == (2, 0)
    log.set_high_watermark(2)
    assert frames.decode(log.read(0, 100)).values == [b"a", b"b"]
    assert log.read(2, 100) == b"", "offset == HW is the tail: nothing to read yet"
    assert frames.decode(log.read_uncommitted(2, 100)).values == [b"c"]


def test_the_high_watermark_never_passes_leo(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append([b"a"])
    with pytest.raises(InvalidArgumentError):
        log.set_high_watermark(2)
    with pytest.raises(InvalidArgumentError):
        log.read(0, 0)


def test_truncation_pulls_the_high_watermark_down(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append([b"a", b"b", b"c"])
    log.set_high_watermark(3)
    log.truncate_to(1)
    assert (log.log_end_offset, log.high_watermark) == (1, 1)


def test_the_high_watermark_checkpoint_survives_a_restart(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append([b"a", b"b", b"c"])
    log.set_high_watermark(2)
    log.close()
    assert (tmp_path / "high-watermark").read_text() == "2\n"
    reopened = open_log(tmp_path)
    assert reopened.high_watermark == 2
    assert reopened.log_end_offset == 3


def test_on_open_the_high_watermark_is_at_most_leo(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append([b"a", b"b", b"c"])
    log.set_high_watermark(3)
    log.checkpoint_high_watermark()
    log.truncate_to(1)  # e.g. the tail was lost in a crash after the checkpoint
    log.crash()
    assert open_log(tmp_path).high_watermark == 1


def test_a_garbled_checkpoint_reads_as_nothing_committed(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append([b"a"])
    log.close()
    (tmp_path / "high-watermark").write_bytes(b"\x00garbage")
    assert open_log(tmp_path).high_watermark == 0


def test_a_closed_log_refuses_appends(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.close()
    with pytest.raises(ShuttingDownError):
        log.append([b"late"])


def test_flush_always_fsyncs_before_acknowledging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = StorageConfig(flush=FlushPolicy.ALWAYS)
    log = open_log(tmp_path, config)
    synced: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real(fd))[1])
    log.append([b"a"])
    assert len(synced) == 2, "the segment and its checksum sidecar, once each"
    assert log.flushed_offset == 1


def test_flush_never_leaves_fsync_to_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path)
    synced: list[int] = []
    monkeypatch.setattr(os, "fdatasync", synced.append)
    log.append([b"a"])
    assert synced == [] and log.flushed_offset == 0 and log.needs_flush
    log.flush()
    assert len(synced) == 2 and log.flushed_offset == 1 and not log.needs_flush


def test_a_tiny_config_still_reads_everything_back(tmp_path: Path) -> None:
    log = open_log(tmp_path, TINY)
    vals = [bytes([i]) * (i % 61) for i in range(200)]
    for i in range(0, 200, 3):
        log.append(vals[i : i + 3])
    log.set_high_watermark(200)
    assert read_all(log, uncommitted=False) == vals


def test_a_reset_log_starts_empty_at_the_given_offset_and_stays_so_after_reopen(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    for i in range(0, 30, 3):
        log.append([b"x%02d" % (i + k) for k in range(3)])  # tiny segments: several files
    assert log.segment_count > 1
    log.reset_to(45)  # the leader's log starts at 45: nothing below it can be fetched
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (45, 45, 45)
    assert log.segment_count == 1
    assert sorted(p.name for p in tmp_path.glob("*.log")) == [f"{45:020d}.log"]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    assert log.append([b"y"]).base_offset == 45
    log.close()

    log = open_log(tmp_path)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (45, 46, 45)
    assert frames.decode(log.read_uncommitted(45, 100)).values == [b"y"]
    log.close()
