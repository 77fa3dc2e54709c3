"""A full disk (ENOSPC) fails the append cleanly; the log stays readable and appendable.

Runs on a small tmpfs mounted by the test (needs root and mount permission).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from replog.errors import ReplogError, StorageError, StorageFullError, TooManyOpenFilesError
from replog.storage import FlushPolicy, StorageConfig, checkpoint
from replog.storage.segment import Segment
from replog.storage.segment_log import ERRORS, storage_error
from replog.storage.space import DiskSpace
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


# -- issue 25: a full disk is a state (storage.space, checkpoint, index) ----------------------


def fill(path: Path) -> None:
    """Write to `path` until the file system has not one byte left."""
    with path.open("ab", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(bytes(4096))
    with path.open("ab", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"x")


def test_a_state_file_is_overwritten_in_place_on_a_disk_without_a_byte_left(
    small_disk: Path,
) -> None:
    state = small_disk / "quorum-state"
    checkpoint.write_text_state(state, b'{"epoch": 1, "voted_for": null, "leader_id": null}')
    fill(small_disk / "ballast")
    with pytest.raises(OSError):  # a new file cannot be made: the rename way fails
        checkpoint.write_atomic(small_disk / "other", b"x")
    checkpoint.write_text_state(state, b'{"epoch": 2, "voted_for": 3, "leader_id": null}')
    assert json.loads(state.read_bytes()) == {"epoch": 2, "voted_for": 3, "leader_id": None}
    checkpoint.write_text_state(state, b'{"epoch": 3}')  # shorter: padded with spaces
    assert json.loads(state.read_bytes()) == {"epoch": 3}
    assert not (small_disk / "quorum-state.tmp").exists()
    with pytest.raises(OSError):  # no file to overwrite: nothing to do but fail
        checkpoint.write_text_state(small_disk / "missing", b"1\n")


def test_a_high_watermark_checkpoint_is_made_on_a_full_disk(small_disk: Path) -> None:
    log = open_log(small_disk / "t" / "partition_0", CONFIG)
    log.append([b"a", b"b"])
    fill(small_disk / "ballast")
    log.set_high_watermark(2)
    log.checkpoint_high_watermark()  # the file exists from the log's creation: in place
    log.close()
    assert checkpoint.read_int(small_disk / "t" / "partition_0" / "high-watermark") == 2


def test_the_disk_space_keeps_a_reserve_and_says_when_the_disk_is_full(small_disk: Path) -> None:
    space = DiskSpace(small_disk)
    space.enable_reserve()
    assert space.reserve_bytes == 128 * 1024 // 32
    assert space.reserve_path.stat().st_size == space.reserve_bytes  # allocated
    assert not space.full and space.room_for(100)
    assert not space.room_for(10 * 1024 * 1024)  # would eat into the reserve
    fill(small_disk / "ballast")
    space.check()
    assert space.full and not space.room_for(1) and space.times_full == 1
    assert space.reserve_path.exists()  # kept until a write that matters needs it
    wrote: list[bytes] = []

    def vital() -> None:
        checkpoint.write_atomic(small_disk / "vote", b"{}")
        wrote.append(b"{}")

    space.write_vital(vital)  # ENOSPC: the reserve goes, and the write is made
    assert wrote == [b"{}"] and not space.reserve_path.exists()
    (small_disk / "ballast").unlink()  # space is freed
    space.check()
    assert not space.full and space.reserve_path.exists()


def test_an_append_sees_a_disk_filled_since_the_last_full_check(small_disk: Path) -> None:
    """Between two full checks (0.5 s) an append re-reads the free space alone (statvfs, at
    most every 1 ms): a disk another file filled is seen before the write all the same, and
    a reserve file removed behind the node's back is noticed at the next full check."""
    space = DiskSpace(small_disk)
    now = [1e6]
    space._clock = lambda: now[0]  # type: ignore[method-assign]
    space.enable_reserve()
    assert space.room_for(100)
    fill(small_disk / "ballast")
    assert space.room_for(100)  # read within the last 1 ms: not looked at again
    now[0] += 0.002
    assert not space.room_for(1) and space.full and space.times_full == 1
    (small_disk / "ballast").unlink()
    now[0] += 0.002
    assert space.room_for(100) and not space.full  # room again: the full check's verdict
    space.reserve_path.unlink()  # an operator removed it
    now[0] += 0.002
    assert space.room_for(100) and not space.reserve_path.exists()  # statvfs alone
    now[0] += 1.0
    assert space.room_for(100) and space.reserve_path.exists()  # the full check took it again


def test_a_node_restarted_on_a_full_disk_frees_its_reserve_at_its_first_look(
    small_disk: Path,
) -> None:
    first = DiskSpace(small_disk)
    first.enable_reserve()
    fill(small_disk / "ballast")
    restarted = DiskSpace(small_disk)  # a new process: the reserve file is from the last run
    assert restarted.reserve_bytes == first.reserve_bytes
    assert restarted.full  # the first look
    assert not restarted.reserve_path.exists()  # room to open logs and elect leaders
    checkpoint.write_atomic(small_disk / "vote", b"{}")


def test_an_index_reopens_on_a_full_disk_with_the_room_it_has(small_disk: Path) -> None:
    log = open_log(small_disk / "p", CONFIG)
    for i in range(20):
        log.append([bytes([i]) * 300])
    log.close()  # trims the indexes
    fill(small_disk / "ballast")
    reopened = open_log(small_disk / "p", CONFIG)  # no fallocate room: opens all the same
    assert read_all(reopened, chunk=100_000) == [bytes([i]) * 300 for i in range(20)]
    reopened.close()


@pytest.mark.parametrize(
    ("err", "cls", "reason"),
    [
        (errno.ENOSPC, StorageFullError, "STORAGE_FULL"),
        (errno.EDQUOT, StorageFullError, "STORAGE_FULL"),
        (errno.EMFILE, TooManyOpenFilesError, "TOO_MANY_OPEN_FILES"),
        (errno.ENFILE, TooManyOpenFilesError, "TOO_MANY_OPEN_FILES"),
        (errno.EIO, StorageError, "STORAGE_ERROR"),
    ],
)
def test_each_os_error_of_the_disk_is_a_typed_error_and_counted(
    err: int, cls: type[ReplogError], reason: str
) -> None:
    before = ERRORS[reason]
    typed = storage_error(OSError(err, os.strerror(err)), "write x")
    assert type(typed) is cls and typed.reason == reason and typed.retriable
    assert ERRORS[reason] == before + 1


def test_an_io_error_marks_the_log_and_other_errors_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "p", CONFIG)
    log.append([b"a"])
    real = Segment.append

    def fail(errno_: int) -> None:
        def append(self: Segment, *args: object, **kwargs: object) -> None:
            raise OSError(errno_, os.strerror(errno_))

        monkeypatch.setattr(Segment, "append", append)

    fail(errno.ENOSPC)
    with pytest.raises(StorageFullError):
        log.append([b"b"])
    assert log.io_error is None
    fail(errno.EIO)
    with pytest.raises(StorageError):
        log.append([b"b"])
    assert isinstance(log.io_error, StorageError)
    monkeypatch.setattr(Segment, "append", real)
    assert read_all(log) == [b"a"]
    log.close()
