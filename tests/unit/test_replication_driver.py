"""The replication driver runs the core against real segment logs (in-process network)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from replog import frames
from replog.errors import NotLeaderError, ShuttingDownError, StorageFullError
from replog.replication import Acks, Message, ReplicaConfig, Role
from replog.replication.driver import ReplicaDriver
from replog.replication.producers import BatchHeader
from replog.storage import FlushPolicy, PartitionLog, StorageConfig

VOTERS = (1, 2, 3)
STORAGE = StorageConfig(segment_bytes_max=4096, index_interval_bytes=256, flush=FlushPolicy.ALWAYS)
DEADLINE_S = 30.0


class LocalNetwork:
    """Delivers messages between drivers of one event loop, in order per destination;
    `cut` nodes neither send nor receive."""

    def __init__(self) -> None:
        self.drivers: dict[int, ReplicaDriver] = {}
        self.cut: set[int] = set()
        self._queues: dict[int, asyncio.Queue[Message]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def transport(self, me: int) -> Transport:
        return Transport(self, me)

    def attach(self, node: int, driver: ReplicaDriver) -> None:
        self.drivers[node] = driver
        if node not in self._queues:
            self._queues[node] = asyncio.Queue()
            self._tasks.append(asyncio.create_task(self._pump(node)))

    async def _pump(self, node: int) -> None:
        while True:
            message = await self._queues[node].get()
            driver = self.drivers.get(node)
            if driver is not None and node not in self.cut:
                await driver.deliver(message)

    def send(self, sender: int, to: int, message: Message) -> None:
        if sender in self.cut or to in self.cut or to not in self._queues:
            return
        self._queues[to].put_nowait(message)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class Transport:
    def __init__(self, network: LocalNetwork, me: int) -> None:
        self.network, self.me = network, me

    def send(self, to: int, message: Message) -> None:
        self.network.send(self.me, to, message)


class Cluster:
    def __init__(self, root: Path, election_ms: tuple[int, int] = (300, 600)) -> None:
        self.root = root
        self.election_ms = election_ms
        self.network = LocalNetwork()
        self.logs: dict[int, PartitionLog] = {}
        self.drivers: dict[int, ReplicaDriver] = {}

    async def start(self, node: int) -> None:
        log = PartitionLog(self.root / f"node{node}", "t", 0, STORAGE)
        config = ReplicaConfig(
            node, VOTERS, election_timeout_ms_min=self.election_ms[0],
            election_timeout_ms_max=self.election_ms[1], fetch_wait_ms_max=100,
            fetch_retry_ms=200, begin_epoch_retry_ms=100,
        )  # fmt: skip
        driver = ReplicaDriver(
            log, config, self.network.transport(node), rng=random.Random(node), tick_ms=20
        )
        self.logs[node], self.drivers[node] = log, driver
        self.network.attach(node, driver)
        await driver.start()

    async def crash(self, node: int) -> None:
        driver = self.drivers.pop(node)
        self.network.drivers.pop(node, None)
        await driver.close()
        self.logs.pop(node).crash()

    async def leader(self) -> int:
        return await wait_for(lambda: self._leader())

    def _leader(self) -> int | None:
        leaders = [n for n, d in self.drivers.items() if d.role is Role.LEADER]
        return leaders[0] if len(leaders) == 1 and leaders[0] not in self.network.cut else None

    async def close(self) -> None:
        for node in list(self.drivers):
            await self.crash(node)
        await self.network.close()


async def wait_for(condition: Callable[[], object]) -> object:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not (value := condition()):
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)
    return value


def run(
    test: Callable[[Cluster], Awaitable[None]],
    root: Path,
    election_ms: tuple[int, int] = (300, 600),
) -> None:
    """`test` on a 3-replica cluster; `election_ms` (the election timeout's range) longer
    for a test that needs one leader throughout: all replicas share one event loop, and on
    a loaded machine a stall longer than the timeout elects again mid-test."""

    async def main() -> None:
        cluster = Cluster(root, election_ms)
        try:
            for node in VOTERS:
                await cluster.start(node)
            await test(cluster)
        finally:
            await cluster.close()

    asyncio.run(main())


def data_values(log: PartitionLog, upto: int) -> list[bytes]:
    values: list[bytes] = []
    offset = log.log_start_offset
    while offset < upto:
        decoded = frames.decode(log.read_uncommitted(offset, 1 << 20, end_offset=upto))
        values += decoded.data_records().values
        offset = decoded.offsets[-1] + 1
    return values


def test_three_replicas_elect_a_leader_and_commit_on_a_majority(tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.leader()
        driver = cluster.drivers[leader]
        base, last = await driver.append([b"a", b"b", b"c"], Acks.ALL, DEADLINE_S)
        assert last - base == 2
        assert cluster.logs[leader].high_watermark > last
        await wait_for(lambda: all(log.log_end_offset > last for log in cluster.logs.values()))
        for node, log in cluster.logs.items():
            assert data_values(log, last + 1) == [b"a", b"b", b"c"], node
        follower = next(n for n in VOTERS if n != leader)
        with pytest.raises(NotLeaderError) as err:
            await cluster.drivers[follower].append([b"x"], Acks.ALL, DEADLINE_S)
        assert err.value.leader_id == leader

    run(scenario, tmp_path)


def test_a_new_leader_keeps_every_acknowledged_record_after_the_leader_crashes(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: Cluster) -> None:
        first = await cluster.leader()
        acked: list[bytes] = []
        for i in range(20):
            batch = [b"%d-%d" % (i, j) for j in range(50)]
            await cluster.drivers[first].append(batch, Acks.ALL, DEADLINE_S)
            acked += batch
        await cluster.crash(first)
        second = await cluster.leader()
        assert second != first
        assert cluster.drivers[second].epoch > 0
        await cluster.drivers[second].append([b"after"], Acks.ALL, DEADLINE_S)
        log = cluster.logs[second]
        assert data_values(log, log.high_watermark) == [*acked, b"after"]
        await cluster.start(first)  # the old leader rejoins as a follower and catches up
        await wait_for(lambda: cluster.logs[first].log_end_offset == log.log_end_offset)
        assert data_values(cluster.logs[first], log.log_end_offset) == [*acked, b"after"]

    run(scenario, tmp_path)


def test_a_cut_off_leader_steps_down_and_the_majority_moves_on(tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        first = await cluster.leader()
        await cluster.drivers[first].append([b"before"], Acks.ALL, DEADLINE_S)
        cluster.network.cut.add(first)
        await wait_for(lambda: cluster.drivers[first].role is not Role.LEADER)
        second = await cluster.leader()
        assert second != first
        await cluster.drivers[second].append([b"during"], Acks.ALL, DEADLINE_S)
        cluster.network.cut.clear()
        leo = cluster.logs[second].log_end_offset
        await wait_for(lambda: cluster.logs[first].log_end_offset >= leo)
        assert data_values(cluster.logs[first], leo) == [b"before", b"during"]

    run(scenario, tmp_path)


def test_elections_and_leaderships_are_counted_for_the_metrics(tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        first = await cluster.leader()
        assert cluster.drivers[first].leaderships == 1
        assert cluster.drivers[first].elections >= 1  # it was a candidate first
        await cluster.crash(first)
        second = await cluster.leader()
        assert cluster.drivers[second].leaderships == 1
        assert sum(d.elections for d in cluster.drivers.values()) >= 1

    run(scenario, tmp_path)


def _single_voter(tmp_path: Path, flush: FlushPolicy) -> tuple[PartitionLog, ReplicaDriver]:
    storage = StorageConfig(segment_bytes_max=4096, index_interval_bytes=256, flush=flush)
    log = PartitionLog(tmp_path / "solo", "t", 0, storage)
    config = ReplicaConfig(1, (1,), flush_always=flush is FlushPolicy.ALWAYS)
    return log, ReplicaDriver(log, config, Transport(LocalNetwork(), 1), rng=random.Random(1))


@contextlib.asynccontextmanager
async def _leading(
    tmp_path: Path, flush: FlushPolicy, first: bytes
) -> AsyncIterator[tuple[PartitionLog, ReplicaDriver]]:
    """A single voter that leads, with `first` appended (acks=all); closed on exit."""
    log, driver = _single_voter(tmp_path, flush)
    await driver.start()
    try:
        await wait_for(lambda: driver.role is Role.LEADER)
        await driver.append([first], Acks.ALL, DEADLINE_S)
        yield log, driver
    finally:
        await driver.close()
        log.close()


@pytest.mark.parametrize("flush", [FlushPolicy.ALWAYS, FlushPolicy.INTERVAL], ids=str)
def test_a_failed_log_write_fails_the_waiting_appends_and_rebuilds_the_core_from_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush: FlushPolicy
) -> None:
    async def main() -> None:
        async with _leading(tmp_path, flush, b"before") as (log, driver):
            real = log.append

            def full(values: object, **kwargs: object) -> object:
                raise StorageFullError("no space left on device")

            monkeypatch.setattr(log, "append", full)
            with pytest.raises(StorageFullError):
                await driver.append([b"lost"], Acks.ALL, DEADLINE_S)
            # the owner rebuilds the core: at once, or right after the caller that took its
            # turn (`ReplicaDriver._append_here`) failed
            await wait_for(lambda: driver.rebuilds == 1 and driver.idle)
            assert driver.replica.log_end_offset == log.log_end_offset  # not ahead of disk
            monkeypatch.setattr(log, "append", real)
            await wait_for(lambda: driver.role is Role.LEADER)  # the rebuilt core leads again
            base, _ = await driver.append([b"after"], Acks.ALL, DEADLINE_S)
            assert data_values(log, base + 1) == [b"before", b"after"]

    asyncio.run(main())


def test_a_broken_invariant_ends_the_owner_loudly_and_callers_get_shutting_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        log, driver = _single_voter(tmp_path, FlushPolicy.ALWAYS)
        died: list[BaseException] = []

        def spawn(coro: Any, name: str) -> asyncio.Task[None]:
            task = asyncio.get_running_loop().create_task(coro, name=name)
            task.add_done_callback(
                lambda t: died.append(t.exception()) if not t.cancelled() else None
            )
            return task

        driver._spawn = spawn
        await driver.start()
        try:
            await wait_for(lambda: driver.role is Role.LEADER)

            def bug(*args: object, **kwargs: object) -> list[object]:
                raise AssertionError("a broken invariant")

            monkeypatch.setattr(driver.replica, "append", bug)
            with pytest.raises(ShuttingDownError):
                await driver.append([b"x"], Acks.ALL, DEADLINE_S)
            await wait_for(lambda: died)
            assert isinstance(died[0], AssertionError)  # the supervisor sees the bug
            with pytest.raises(ShuttingDownError, match="broken invariant"):
                await driver.append([b"y"], Acks.ALL, DEADLINE_S)
        finally:
            await driver.close()
            log.close()

    asyncio.run(main())


def test_an_append_whose_caller_gives_up_is_still_performed_and_nothing_is_left_unobserved(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        log, driver = _single_voter(tmp_path, FlushPolicy.ALWAYS)
        await driver.start()
        try:
            await wait_for(lambda: driver.role is Role.LEADER)
            task = asyncio.create_task(driver.append([b"abandoned"], Acks.ALL, DEADLINE_S))
            await asyncio.sleep(0)  # submitted
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await wait_for(lambda: driver.idle)
            assert not driver._acks, "the abandoned waiter was cleaned up"
            await driver.append([b"next"], Acks.ALL, DEADLINE_S)
            assert data_values(log, log.high_watermark) == [b"abandoned", b"next"]
        finally:
            await driver.close()
            log.close()

    asyncio.run(main())


def test_a_follower_that_discards_a_corrupt_log_fetches_it_again_from_the_leader(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.leader()
        acked: list[bytes] = []
        for i in range(10):
            batch = [b"%d-%d" % (i, j) for j in range(20)]
            await cluster.drivers[leader].append(batch, Acks.ALL, DEADLINE_S)
            acked += batch
        follower = next(n for n in VOTERS if n != leader)
        assert not await cluster.drivers[leader].repair(), "a leader never discards its log"
        leo = cluster.logs[leader].log_end_offset
        await wait_for(lambda: cluster.logs[follower].log_end_offset == leo)
        assert await cluster.drivers[follower].repair()
        assert cluster.drivers[follower].repairs == 1
        await cluster.drivers[leader].append([b"after"], Acks.ALL, DEADLINE_S)
        end = cluster.logs[leader].log_end_offset
        await wait_for(lambda: cluster.logs[follower].log_end_offset == end)
        assert data_values(cluster.logs[follower], end) == [*acked, b"after"]
        assert cluster.drivers[follower].epoch == cluster.drivers[leader].epoch

    run(scenario, tmp_path)


@pytest.mark.parametrize("flush", [FlushPolicy.ALWAYS, FlushPolicy.INTERVAL], ids=str)
def test_an_append_while_the_owner_waits_is_written_in_the_callers_own_step(
    tmp_path: Path, flush: FlushPolicy
) -> None:
    """No fsync to wait for: the caller takes the parked owner's turn (core step and log
    write with no await between them), saving two event-loop passes. With flush=always the
    owner writes it (in a thread), as before."""

    async def main() -> None:
        async with _leading(tmp_path, flush, b"first") as (log, driver):
            await wait_for(lambda: driver.idle)
            end = log.log_end_offset
            task = asyncio.create_task(driver.append([b"x", b"y"], Acks.ALL, DEADLINE_S))
            await asyncio.sleep(0)  # one pass of the loop: the task's first step ran
            written_at_once = log.log_end_offset == end + 2
            assert written_at_once is (flush is not FlushPolicy.ALWAYS)
            base, last = await task
            assert (base, last) == (end, end + 1)
            assert data_values(log, last + 1) == [b"first", b"x", b"y"]
            assert driver.idle and driver.replica.log_end_offset == log.log_end_offset

    asyncio.run(main())


def test_an_answer_past_an_unknown_boundary_never_splits_an_idempotent_batch(
    tmp_path: Path,
) -> None:
    """A restarted leader knows no batch ends in the tail it inherited (here: frames written
    to its log before the driver existed). An answer whose read stops inside an idempotent
    batch ends before the batch's header, or carries the whole batch when it starts there:
    never the header with part of its records (a follower elected with that half would
    commit it, and the producer's retry would be taken for a duplicate)."""
    storage = StorageConfig(segment_bytes_max=1 << 20, index_interval_bytes=256)
    log = PartitionLog(tmp_path / "tail", "t", 0, storage)
    header = BatchHeader(7, 0, 0, 3, 1_700_000_000_000).encode()
    values = [b"p" * 40]
    log.append_frames(frames.encode(0, [b"a" * 40]))
    log.append_frames(frames.encode(1, [header], control=True))
    log.append_frames(frames.encode(2, values * 3))
    log.append_frames(frames.encode(5, [b"z" * 40]))
    frame = len(frames.encode(0, [b"a" * 40]))
    config = ReplicaConfig(1, (1, 2))
    driver = ReplicaDriver(
        log, config, Transport(LocalNetwork(), 1), rng=random.Random(1), fetch_bytes_max=3 * frame
    )
    try:
        # a read from 0 stops inside the batch (0, the header, one record): ends before it
        first = driver._read_batches(0, 6)
        assert frames.decode(first).offsets == [0]
        # from the header: the whole batch, past the fetch size (within the answer bound)
        second = driver._read_batches(1, 6)
        assert frames.decode(second).offsets == [1, 2, 3, 4]
    finally:
        log.close()
