"""Group commit under flush=always: one node-level flusher fsyncs the logs of many
partitions together, and no acknowledgement precedes the fsync that covers it.

Every `os.fdatasync` of a `.log` file is instrumented: it is slowed down (so that appends
pile up while a pass runs) and, once the real sync returned, it records how many bytes of
that file it covered (the size when it began). When an append is acknowledged, the bytes
of the partition's log up to its last record must already be covered on its leader
(acks=leader) or on a majority of the voters (acks=all). Not necessarily on the leader
for acks=all: a log's fsync no longer holds its lock, so followers may fetch and fsync a
write while the leader's own fsync of it still runs, and two followers are a majority
(Raft's rule; the leader counts only its fsynced offset, so it is one of the majority
only once its fsync returned).
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from replog.errors import AckTimeoutError, StorageError
from replog.replication import Acks, ReplicaConfig, Role
from replog.replication.driver import ReplicaDriver
from replog.server.partitions.flusher import GroupFlusher
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from tests.unit.test_replication_driver import LocalNetwork

# one segment per log: a record's end is its position in the one `.log` file
STORAGE = StorageConfig(segment_bytes_max=1 << 26, flush=FlushPolicy.ALWAYS)
PARTITIONS = 4
APPENDERS = 6  # per partition, each appending one record at a time
APPENDS = 5  # per appender
SLOW_FSYNC_S = 0.01
DEADLINE_S = 60.0


class SyncedBytes:
    """The bytes of each `.log` file that some fsync has covered."""

    def __init__(self) -> None:
        self.covered: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.running = 0  # `.log` fsyncs in progress
        self.overlap_max = 0  # the most of them ever in progress at once
        self._lock = threading.Lock()

    def wrap(self, real: Callable[[int], None]) -> Callable[[int], None]:
        def syncing(fd: int) -> None:
            path = os.readlink(f"/proc/self/fd/{fd}")
            size = os.fstat(fd).st_size
            if not path.endswith(".log"):
                real(fd)
                return
            with self._lock:
                self.running += 1
                self.overlap_max = max(self.overlap_max, self.running)
            time.sleep(SLOW_FSYNC_S)
            real(fd)
            with self._lock:
                self.running -= 1
                self.calls[path] = self.calls.get(path, 0) + 1
                self.covered[path] = max(self.covered.get(path, 0), size)

        return syncing

    def holds(self, log: PartitionLog, last_offset: int) -> bool:
        """Whether an fsync covered `log`'s records up to `last_offset`."""
        [segment] = list(log.directory.glob("*.log"))
        end = len(log.read_uncommitted(0, 1 << 30, end_offset=last_offset + 1))
        return self.covered.get(str(segment), 0) >= end


async def _wait(condition: Callable[[], object]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


# length: one scenario told top to bottom (setup, faults, checks); split, it would hide the story
@pytest.mark.parametrize("voters", [1, 3])
def test_appends_to_many_partitions_share_fsyncs_and_no_ack_precedes_its_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, voters: int
) -> None:
    synced = SyncedBytes()
    monkeypatch.setattr(os, "fdatasync", synced.wrap(os.fdatasync))
    ids = tuple(range(1, voters + 1))

    async def main() -> None:
        flusher = GroupFlusher()
        runner = asyncio.create_task(flusher.run())
        networks = [LocalNetwork() for _ in range(PARTITIONS)]
        logs: dict[tuple[int, int], PartitionLog] = {}
        drivers: dict[tuple[int, int], ReplicaDriver] = {}
        for p, network in enumerate(networks):
            for node in ids:
                log = PartitionLog(tmp_path / f"node{node}" / f"t-{p}", "t", p, STORAGE)
                log.flush_deferred = True
                config = ReplicaConfig(
                    node, ids, election_timeout_ms_min=300, election_timeout_ms_max=600,
                    fetch_wait_ms_max=100, fetch_retry_ms=200, begin_epoch_retry_ms=100,
                )  # fmt: skip
                driver = ReplicaDriver(
                    log, config, network.transport(node), rng=random.Random(node), tick_ms=20
                )
                driver.group_flush = flusher
                logs[p, node], drivers[p, node] = log, driver
                network.attach(node, driver)
                await driver.start()
        try:
            leaders: dict[int, int] = {}
            for p in range(PARTITIONS):

                def led(p: int = p) -> bool:
                    found = [n for n in ids if drivers[p, n].role is Role.LEADER]
                    if len(found) == 1:
                        leaders[p] = found[0]
                    return len(found) == 1

                await _wait(led)
            leader_segments = [
                str(next(logs[p, leaders[p]].directory.glob("*.log"))) for p in range(PARTITIONS)
            ]
            syncs_before = sum(synced.calls.get(path, 0) for path in leader_segments)
            checked: list[bool] = []

            async def appender(p: int, i: int) -> None:
                leader = leaders[p]
                acks = Acks.ALL if i % 2 == 0 else Acks.LEADER
                for j in range(APPENDS):
                    _, last = await drivers[p, leader].append([b"v%d-%d" % (i, j)], acks, 30.0)
                    on_leader = synced.holds(logs[p, leader], last)
                    holding = sum(
                        synced.holds(logs[p, n], last)
                        for n in ids
                        if logs[p, n].log_end_offset > last
                    )
                    majority = holding >= voters // 2 + 1
                    checked.append(on_leader if acks is Acks.LEADER else majority)

            await asyncio.gather(
                *(appender(p, i) for p in range(PARTITIONS) for i in range(APPENDERS))
            )
            appends = PARTITIONS * APPENDERS * APPENDS
            assert len(checked) == appends
            assert all(checked), f"{checked.count(False)} acks came before their fsync"
            # grouped: the leaders' logs took fewer fsyncs than appends (appends of several
            # clients shared one), and fsyncs of different logs ran together
            syncs = sum(synced.calls.get(path, 0) for path in leader_segments) - syncs_before
            assert syncs < appends, (syncs, appends)
            assert synced.overlap_max >= 2, "the logs' fsyncs never ran together"
        finally:
            for driver in drivers.values():
                await driver.close()
            for log in logs.values():
                log.close()
            for network in networks:
                await network.close()
            runner.cancel()
            flusher.close()

    asyncio.run(main())


def test_without_the_flushers_fsync_nothing_is_acknowledged_and_a_rebuilt_core_flushes_first(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        flusher = GroupFlusher()
        flusher.close()  # no fsync comes: every request is ignored
        log = PartitionLog(tmp_path / "node1" / "t-0", "t", 0, STORAGE)
        log.flush_deferred = True
        config = ReplicaConfig(1, (1,))
        driver = ReplicaDriver(log, config, LocalNetwork().transport(1), rng=random.Random(1))
        driver.group_flush = flusher
        try:
            await driver.start()
            await _wait(lambda: driver.role is Role.LEADER)
            for acks in (Acks.ALL, Acks.LEADER):
                with pytest.raises(AckTimeoutError):
                    await driver.append([b"unsynced"], acks, 0.3)
            assert log.flushed_offset < log.log_end_offset
            # a core rebuilt after a failed log operation takes the log for flushed: the
            # driver fsyncs it first
            await driver._retry_rebuild(StorageError("a failed write (test)"))
            assert log.flushed_offset == log.log_end_offset
            assert driver.replica.flushed_offset <= log.flushed_offset
        finally:
            await driver.close()
            log.close()
            flusher.close()

    asyncio.run(main())


def test_a_flush_asked_for_after_the_flusher_closed_is_ignored_and_its_task_lives_on(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        flusher = GroupFlusher()
        runner = asyncio.create_task(flusher.run())
        log = PartitionLog(tmp_path / "node1" / "t-0", "t", 0, STORAGE)
        log.flush_deferred = True
        log.append([b"x"])
        flusher.close()  # the node's replicas stopped; a retry may still come
        flusher.request(log, lambda: pytest.fail("a closed flusher fsynced"))
        await asyncio.sleep(0.05)
        assert not runner.done(), "the flusher's task died"
        runner.cancel()
        log.close()  # it flushes what it holds as it closes
        assert log.flushed_offset == log.log_end_offset == 1

    asyncio.run(main())


def test_appends_that_come_while_their_logs_fsync_runs_wait_and_become_one_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    real = os.fdatasync

    def gated(fd: int) -> None:
        if gate_armed[0] and os.readlink(f"/proc/self/fd/{fd}").endswith(".log"):
            assert gate.wait(DEADLINE_S), "the test never opened the gate"
        real(fd)

    gate_armed = [False]
    monkeypatch.setattr(os, "fdatasync", gated)

    async def main() -> None:
        flusher = GroupFlusher()
        runner = asyncio.create_task(flusher.run())
        log = PartitionLog(tmp_path / "node1" / "t-0", "t", 0, STORAGE)
        log.flush_deferred = True
        driver = ReplicaDriver(log, ReplicaConfig(1, (1,)), LocalNetwork().transport(1))
        driver.group_flush = flusher
        try:
            await driver.start()
            await _wait(lambda: driver.role is Role.LEADER and log.flushed_offset > 0)
            gate_armed[0] = True
            first = asyncio.create_task(driver.append([b"first"], Acks.LEADER, 30.0))
            await _wait(lambda: flusher.flushing(log))  # its fsync runs (held at the gate)
            leo, writes = log.log_end_offset, driver.log_writes
            later = [
                asyncio.create_task(driver.append([b"later%d" % i], Acks.LEADER, 30.0))
                for i in range(5)
            ]
            for _ in range(10):
                await asyncio.sleep(0.01)  # (the owner is free to take them: it does not)
            assert (log.log_end_offset, driver.log_writes) == (leo, writes), "not held"
            assert not first.done(), "acknowledged before its fsync returned"
            gate.set()
            await first
            offsets = [await task for task in later]
            assert driver.log_writes == writes + 1, "the held appends became one write"
            assert [base for base, _ in offsets] == list(range(leo, leo + 5))
            assert log.flushed_offset >= leo + 5
        finally:
            gate.set()
            await driver.close()
            log.close()
            runner.cancel()
            flusher.close()

    asyncio.run(main())
