"""A full disk (ENOSPC) fails the append cleanly; the log stays readable and appendable.

Runs on a small tmpfs mounted by the test (needs root and mount permission).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from replog.errors import StorageFullError
from replog.storage import FlushPolicy, StorageConfig
from tests.storage_helpers import open_log, read_all

CONFIG = StorageConfig(
    segment_bytes_max=16 * 1024,
    index_interval_bytes=256,
    index_bytes_initial=4096,
    record_bytes_max=8192,
    flush=FlushPolicy.ALWAYS,
)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_a_full_disk_fails_the_append_and_the_log_recovers_when_space_returns(
    small_disk: Path,
) -> None:
    ballast = small_disk / "ballast"
    ballast.write_bytes(bytes(32 * 1024))  # someone else's file, deleted later
    log = open_log(small_disk / "p", CONFIG)
    written: list[bytes] = []
    with pytest.raises(StorageFullError):
        for i in range(200):  # 200 x 4 KiB is far more than the 128 KiB disk
            batch = [bytes([i % 256]) * 4000]
            log.append(batch)
            written.extend(batch)
    assert log.log_end_offset == len(written)
    assert read_all(log, chunk=100_000) == written
    ballast.unlink()  # space returns
    result = log.append([b"after space returned"])
    assert result.base_offset == len(written)
    log.close()
    reopened = open_log(small_disk / "p", CONFIG)
    assert read_all(reopened, chunk=100_000) == [*written, b"after space returned"]
    reopened.close()


def test_a_batch_that_does_not_fit_leaves_no_partial_write(small_disk: Path) -> None:
    log = open_log(small_disk / "p", CONFIG)
    log.append([b"small"])
    with pytest.raises(StorageFullError):
        log.append([b"x" * 4000] * 100)  # spans many segments; runs out midway
    assert log.log_end_offset == 1
    assert read_all(log) == [b"small"]
    sizes = sum(p.stat().st_size for p in (small_disk / "p").glob("*.log"))
    assert sizes == 17, "rolled-back segments are gone"
    assert log.append([b"next"]).base_offset == 1
    assert read_all(log) == [b"small", b"next"]
