"""A crash at any point of a replica's creation leaves no replica or a valid one.

The steps a new partition's replica takes on a node: its topic directory (`replica_dirs`),
its log (`PartitionLog`: empty segment, the `high-watermark` file written unsynced), its
election (`quorum-state`; the leader's own "I lead" is not written), its epoch history, the
leader's epoch marker and a first acknowledged record. At every fsync of that sequence the
data directory is imaged twice:

* as a process crash leaves it (every write so far, synced or not);
* as a power loss may leave it: each directory holds the entries it had at its last fsync
  (none if never synced), each file the bytes it had at its last fsync (empty if never).

Each image is restored into a fresh directory and opened: either it holds no topic (no
`topic.json`: an unfinished create) or the replica opens, its durable files load, it is
elected and takes an acks=all append, and it holds the first record if that was
acknowledged before the image was taken.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from replog import frames
from replog.replication import Acks, ReplicaConfig, Role
from replog.replication.driver import (
    QUORUM_STATE_FILE,
    ReplicaDriver,
    load_epoch_history,
    load_quorum_state,
)
from replog.server.partitions import replica_dirs
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from replog.storage.names import partition_dir

STORAGE = StorageConfig(segment_bytes_max=4096, index_interval_bytes=256, flush=FlushPolicy.ALWAYS)
DEADLINE_S = 30.0
FIRST = b"first record"


class _Drop:
    def send(self, to: int, message: object) -> None:  # a set of one voter sends nothing
        raise AssertionError(f"a single voter sent {message!r} to {to}")


@dataclass
class _Disk:
    """What the file system under `root` holds, as a crash or a power loss leaves it."""

    root: Path
    synced: dict[int, bytes] = field(default_factory=dict)  # inode -> bytes at last fsync
    entries: dict[Path, dict[str, int]] = field(default_factory=dict)  # dir -> name -> inode
    images: list[tuple[dict[Path, bytes], dict[Path, bytes]]] = field(default_factory=list)

    def fsynced(self, fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if path.is_dir():
            self.entries[path] = {e.name: e.inode() for e in os.scandir(path)}
        else:
            self.synced[os.fstat(fd).st_ino] = path.read_bytes()
        if path.is_relative_to(self.root):
            self.images.append((self._as_is(), self._after_power_loss()))

    def _as_is(self) -> dict[Path, bytes]:
        return {p: p.read_bytes() for p in self.root.rglob("*") if p.is_file()}

    def _after_power_loss(self) -> dict[Path, bytes]:
        out: dict[Path, bytes] = {}

        def walk(directory: Path) -> None:
            for name, inode in self.entries.get(directory, {}).items():
                path = directory / name
                if path.is_dir():
                    walk(path)
                elif stat.S_ISREG(os.stat(path).st_mode) if path.exists() else True:
                    out[path] = self.synced.get(inode, b"")

        walk(self.root)
        return out


def _restore(image: dict[Path, bytes], source: Path, target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for path, data in image.items():
        dest = target / path.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)


def _config() -> ReplicaConfig:
    return ReplicaConfig(
        1, (1,), election_timeout_ms_min=40, election_timeout_ms_max=60,
        fetch_wait_ms_max=10, fetch_retry_ms=30, begin_epoch_retry_ms=30,
    )  # fmt: skip


async def _wait(condition: object) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


async def _create(data_dir: Path, acked: list[int], disk: _Disk) -> None:
    """A new topic's replica, elected, with FIRST appended (`acked`: the image count then)."""
    replica_dirs.create(data_dir, "t", 1, topic_id=1)
    log = PartitionLog(partition_dir(data_dir, "t", 0), "t", 0, STORAGE)
    driver = ReplicaDriver(log, _config(), _Drop(), rng=random.Random(1))
    await driver.start()
    try:
        await _wait(lambda: driver.role is Role.LEADER)
        await driver.append([FIRST], Acks.ALL, DEADLINE_S)
        acked.append(len(disk.images))
    finally:
        await driver.close()
        log.close()


async def _check_image(data_dir: Path, acked: bool) -> str:
    """'none' (no topic), or 'valid' after checking the replica as the docstring says."""
    if "t" not in replica_dirs.scan(data_dir):
        return "none"
    directory = partition_dir(data_dir, "t", 0)
    directory.mkdir(parents=True, exist_ok=True)  # a lost directory is an empty replica
    state, history = load_quorum_state(directory), load_epoch_history(directory)
    assert all(e.epoch <= state.epoch for e in history), (state, history)
    assert state.leader_id is None, "a leader's own leadership is never on disk"
    log = PartitionLog(directory, "t", 0, STORAGE)
    driver = ReplicaDriver(log, _config(), _Drop(), rng=random.Random(2))
    await driver.start()
    try:
        await _wait(lambda: driver.role is Role.LEADER)
        _, last = await driver.append([b"after"], Acks.ALL, DEADLINE_S)
        decoded = frames.decode(log.read_uncommitted(0, 1 << 20, end_offset=last + 1))
        values = decoded.data_records().values
        assert values[-1] == b"after"
        if acked:
            assert FIRST in values, "an acknowledged record was lost"
    finally:
        await driver.close()
        log.close()
    return "valid"


def test_a_crash_at_any_fsync_of_a_replicas_creation_leaves_no_replica_or_a_valid_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    disk = _Disk(data_dir)
    disk.entries[data_dir] = {}
    acked_at: list[int] = []

    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def syncing(fd: int, real: object = real) -> None:
            real(fd)  # type: ignore[operator]
            disk.fsynced(fd)

        monkeypatch.setattr(os, name, syncing)

    asyncio.run(_create(data_dir, acked_at, disk))
    monkeypatch.undo()
    assert len(disk.images) >= 6, "the creation's fsyncs were not seen"
    outcomes = set()
    for i, (as_is, lost) in enumerate(disk.images):
        for image in (as_is, lost):
            target = tmp_path / "restored"
            _restore(image, data_dir, target)
            # the ack came after the fsync that made the record durable: the image of the
            # last fsync before the ack, and every later one, holds it
            acked = i >= acked_at[0] - 1
            outcomes.add(asyncio.run(_check_image(target, acked)))
    assert outcomes == {"none", "valid"}
    assert (data_dir / "t" / "partition_0" / QUORUM_STATE_FILE).exists()


def test_a_vote_granted_in_a_new_epoch_is_one_quorum_state_write_made_before_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import replog.replication.performing as performing
    from replog.replication.messages import VoteRequest, VoteResponse

    events: list[object] = []
    real = performing._write_state_file

    def writing(space: object, path: Path, data: bytes) -> None:
        events.append((path.name, data))
        real(space, path, data)  # type: ignore[arg-type]

    monkeypatch.setattr(performing, "_write_state_file", writing)

    class Recording:
        def send(self, to: int, message: object) -> None:
            events.append(message)

    async def main() -> None:
        log = PartitionLog(tmp_path / "t-0", "t", 0, STORAGE)
        config = ReplicaConfig(
            1, (1, 2, 3), election_timeout_ms_min=60_000, election_timeout_ms_max=60_001,
            fetch_wait_ms_max=10, fetch_retry_ms=30, begin_epoch_retry_ms=30,
        )  # fmt: skip
        driver = ReplicaDriver(log, config, Recording(), rng=random.Random(1))
        await driver.start()
        try:
            await driver.deliver(
                VoteRequest(epoch=1, candidate_id=2, last_epoch=0, log_end_offset=0)
            )
            await _wait(lambda: any(isinstance(e, VoteResponse) for e in events))
        finally:
            await driver.close()
            log.close()
        assert load_quorum_state(tmp_path / "t-0").voted_for == 2

    asyncio.run(main())
    writes = [e for e in events if isinstance(e, tuple) and e[0] == QUORUM_STATE_FILE]
    assert len(writes) == 1, writes
    answer = next(e for e in events if isinstance(e, VoteResponse))
    assert answer.granted
    assert events.index(writes[0]) < events.index(answer), "the vote is durable before it is sent"
