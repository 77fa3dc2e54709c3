"""CreateTopic on a full disk is RESOURCE_EXHAUSTED STORAGE_FULL, like Append, and leaves
nothing behind: no topic in the metadata, no directory. Once space returns, it works.

The data directory is on a small tmpfs mounted by the test (needs root and mount permission;
skipped otherwise), filled up by a ballast file.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.errors import StorageFullError
from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration

DISK_SIZE = "16m"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(mount_point)],
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


def fill(path: Path) -> None:
    """Write zeros to `path` until the file system is full."""
    chunk = bytes(64 * 1024)
    with path.open("wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(chunk)


def test_create_topic_on_a_full_disk_is_storage_full_and_creates_nothing(
    small_disk: Path, tmp_path: Path
) -> None:
    data = small_disk / "data"
    server = ServerProcess(data, tmp_path).start()
    ballast = small_disk / "ballast"
    try:
        with Client(server.address, timeout_s=15, retry=RetryPolicy(attempts_max=1)) as client:
            client.create_topic("before", 1)
            fill(ballast)
            with pytest.raises(StorageFullError) as info:
                client.create_topic("orders", 3)
            err = info.value
            assert err.code == "RESOURCE_EXHAUSTED" and err.reason == "STORAGE_FULL"
            assert err.retriable
            assert client.list_topics() == {"before": 1}
            assert not (data / "orders").exists()
            ballast.unlink()  # space returns: the same create works, and serves at once
            client.create_topic("orders", 3)
            assert client.list_topics() == {"before": 1, "orders": 3}
            assert client.append("orders", 2, [b"x"]).base_offset == 2  # marker, header
    finally:
        server.kill()
