"""Cancelling the task that triggered an input never leaves a replica's state ahead of its log.

gRPC asyncio cancels an RPC handler when its peer dies or its deadline passes. Here every
caller of a driver (the task delivering a replication message, a client's `append`) is
cancelled while the owner performs that input's outputs: at each await point of each output
path (log append, follower append, control record, truncation, quorum-state and
epoch-history files, retention), for leaders and followers, under flush=always and
flush=interval. Extra await points are added where the driver writes inline (flush=interval
appends), so that even a future await there is covered.

After each run: every replica's core agrees with its log (LEO and HW), the owner tasks are
alive, every acks=all append that was acknowledged is in the final leader's log, replication
still works (a new acks=all append commits) and the replicas are byte-identical below the HW.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest

from replog.errors import ReplogError
from replog.replication import Acks, Message, ReplicaConfig, Role
from replog.replication.driver import ReplicaDriver
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from tests.unit.test_replication_driver import DEADLINE_S, wait_for

T = TypeVar("T")
VOTERS = (1, 2, 3)


def _kind(fn: Callable[[], Any]) -> str:
    """A name for the output a blocking call performs (a partial of a storage call, or a
    bound method of the driver)."""
    if not isinstance(fn, partial):
        return getattr(fn, "__name__", "?")
    name = getattr(fn.func, "__name__", "?")
    if name == "append" and fn.keywords.get("control"):
        return "control"
    if name == "write_atomic":
        return Path(fn.args[0]).name
    if name == "_write_state_file":  # the driver's durable-state files (space, path, data)
        return Path(fn.args[1]).name
    return name


class Harness:
    """Counts the owner's await points and cancels every caller of that node at the ones
    chosen by `stride`/`phase`."""

    def __init__(self, stride: int, phase: int) -> None:
        self.stride, self.phase = stride, phase
        self.count = 0
        self.callers: dict[int, set[asyncio.Task[Any]]] = {n: set() for n in VOTERS}
        self.hits: Counter[tuple[str, str]] = Counter()

    async def gate(self, driver: ReplicaDriver, fn: Callable[[], Any]) -> None:
        self.count += 1
        if self.count % self.stride == self.phase:
            node = driver.config.replica_id
            victims = [t for t in self.callers[node] if not t.done()]
            for task in victims:
                task.cancel()
            if victims:
                self.hits[(_kind(fn), driver.role.value)] += 1
        await asyncio.sleep(0)  # a cancellation point, whether or not the driver has one

    def track(self, node: int, task: asyncio.Task[Any]) -> None:
        self.callers[node].add(task)
        task.add_done_callback(self.callers[node].discard)


class GatedDriver(ReplicaDriver):
    harness: Harness

    async def _io(self, fn: Callable[[], T]) -> T:
        await self.harness.gate(self, fn)
        return await super()._io(fn)

    async def _write(self, fn: Callable[[], T]) -> T:
        await self.harness.gate(self, fn)
        return await super()._write(fn)


class Network:
    """In-order delivery per destination; each message is delivered by its own task (as a
    gRPC handler would be), which the harness may cancel."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.drivers: dict[int, ReplicaDriver] = {}
        self.cut: set[int] = set()
        self.queues = {n: asyncio.Queue[Message]() for n in VOTERS}
        self.pumps = [asyncio.create_task(self._pump(n)) for n in VOTERS]

    async def _pump(self, node: int) -> None:
        while True:
            message = await self.queues[node].get()
            driver = self.drivers.get(node)
            if driver is None or node in self.cut:
                continue
            task = asyncio.create_task(driver.deliver(message))
            self.harness.track(node, task)
            await asyncio.wait([task])  # a cancelled delivery does not stop the pump

    def transport(self, me: int) -> Any:
        network = self

        class _Transport:
            def send(self, to: int, message: Message) -> None:
                if me not in network.cut and to not in network.cut:
                    network.queues[to].put_nowait(message)

        return _Transport()

    async def close(self) -> None:
        for task in self.pumps:
            task.cancel()
        await asyncio.gather(*self.pumps, return_exceptions=True)


class Cluster:
    def __init__(self, root: Path, flush: FlushPolicy, harness: Harness) -> None:
        self.root, self.flush, self.harness = root, flush, harness
        self.network = Network(harness)
        self.logs: dict[int, PartitionLog] = {}
        self.drivers: dict[int, GatedDriver] = {}
        self.acked: list[bytes] = []

    async def start(self, node: int) -> None:
        storage = StorageConfig(segment_bytes_max=2048, index_interval_bytes=128, flush=self.flush)
        log = PartitionLog(self.root / f"node{node}", "t", 0, storage)
        config = ReplicaConfig(
            node, VOTERS, election_timeout_ms_min=300, election_timeout_ms_max=600,
            fetch_wait_ms_max=50, fetch_retry_ms=100, begin_epoch_retry_ms=50,
            flush_always=self.flush is FlushPolicy.ALWAYS,
        )  # fmt: skip
        driver = GatedDriver(log, config, self.network.transport(node), rng=random.Random(node))
        driver.harness = self.harness
        driver.tick_ms = 10
        self.logs[node], self.drivers[node] = log, driver
        self.network.drivers[node] = driver
        await driver.start()

    async def stop(self, node: int) -> None:
        driver = self.drivers.pop(node)
        self.network.drivers.pop(node, None)
        await driver.close()
        self.logs.pop(node).close()

    def leader(self) -> int | None:
        leaders = [
            n
            for n, d in self.drivers.items()
            if d.role is Role.LEADER and n not in self.network.cut
        ]
        return max(leaders, key=lambda n: self.drivers[n].epoch) if leaders else None

    async def wait_leader(self) -> int:
        leader: int = await wait_for(self.leader)  # type: ignore[assignment]
        return leader

    async def append_cancellable(self, node: int, values: list[bytes], acks: Acks) -> None:
        """An append whose caller the harness may cancel; acked acks=all values are kept."""

        async def call() -> None:
            await self.drivers[node].append(values, acks, DEADLINE_S)
            if acks is Acks.ALL:
                self.acked.extend(values)

        task = asyncio.create_task(call())
        self.harness.track(node, task)
        await asyncio.wait([task])
        if not task.cancelled() and task.exception() is not None:
            assert isinstance(task.exception(), ReplogError), task.exception()

    async def check_in_step(self) -> None:
        await wait_for(lambda: all(d.idle for d in self.drivers.values()))
        for node, driver in self.drivers.items():
            assert driver._stopped_because is None, (node, driver._stopped_because)
            log = self.logs[node]
            assert driver.replica.log_end_offset == log.log_end_offset, node
            assert driver.replica.high_watermark == log.high_watermark, node


async def scenario(cluster: Cluster) -> None:
    for node in VOTERS:
        await cluster.start(node)
    first = await cluster.wait_leader()
    # concurrent appends to the leader (acks=all and acks=leader), callers cancellable
    batches = [[b"a%d-%d" % (i, j) for j in range(3)] for i in range(6)]
    await asyncio.gather(
        *(
            cluster.append_cancellable(first, b, Acks.ALL if i % 3 else Acks.LEADER)
            for i, b in enumerate(batches)
        )
    )
    await cluster.check_in_step()
    # the leader is cut off and takes writes the others never see (they will be truncated)
    await wait_for(lambda: all(d.idle for d in cluster.drivers.values()))
    leo_before_cut = cluster.logs[first].log_end_offset
    cluster.network.cut.add(first)
    for i in range(2):
        await cluster.append_cancellable(first, [b"lost-%d" % i], Acks.LEADER)
    second = await cluster.wait_leader()
    for i in range(3):
        await cluster.append_cancellable(second, [b"b%d" % i], Acks.ALL)
    cluster.network.cut.clear()
    # the old leader comes back, truncates its divergent tail and catches up; retention
    # and a restart run through the owner too
    await wait_for(lambda: cluster.drivers[first].role is not Role.LEADER)
    if cluster.logs[first].log_end_offset > leo_before_cut:
        # it appended records nobody else has: it truncates them once it meets the leader
        await wait_for(lambda: cluster.drivers[first].truncations > 0)
    await cluster.stop(second)
    await cluster.start(second)
    third = await cluster.wait_leader()
    # quiet first, so that the retention input is the only one the leader's owner performs
    # I/O for (another input's await point would cancel its caller before it is taken)
    await wait_for(lambda: all(d.idle for d in cluster.drivers.values()))
    retention = asyncio.create_task(cluster.drivers[third].apply_retention(0))
    cluster.harness.track(third, retention)
    await asyncio.wait([retention])
    await cluster.check_in_step()


async def finish(cluster: Cluster) -> None:
    """Nobody is cancelled any more: replication must work and the replicas converge."""
    cluster.harness.stride = 1 << 30
    leader = await cluster.wait_leader()
    await cluster.drivers[leader].append([b"final"], Acks.ALL, DEADLINE_S)
    log = cluster.logs[leader]

    def converged() -> bool:
        return all(
            d.replica.high_watermark == log.log_end_offset
            and cluster.logs[n].log_end_offset == log.log_end_offset
            for n, d in cluster.drivers.items()
        )

    await wait_for(converged)
    await cluster.check_in_step()
    hw = log.high_watermark
    copies = {n: cluster.logs[n].read(cluster.logs[n].log_start_offset, 1 << 24) for n in VOTERS}
    starts = {cluster.logs[n].log_start_offset for n in VOTERS}
    if len(starts) == 1:  # retention may have cut different prefixes
        assert len(set(copies.values())) == 1, "replicas differ below the HW"
    values = data_values_of(log, hw)
    missing = [v for v in cluster.acked if v not in values]
    assert not missing, f"acknowledged records lost: {missing}"
    assert b"final" in values
    for lost in (b"lost-0", b"lost-1"):
        assert lost not in values


def data_values_of(log: PartitionLog, upto: int) -> set[bytes]:
    from replog import frames

    values: set[bytes] = set()
    offset = log.log_start_offset
    while offset < upto:
        decoded = frames.decode(log.read(offset, 1 << 20))
        values.update(decoded.data_records().values)
        offset = decoded.offsets[-1] + 1
    return values


# (stride, phase): cancel at the await points whose index is `phase` modulo `stride`, so an
# input is cancelled at its first, second or third await; stride 1 cancels at every one.
SCHEDULES = [(3, 0), (3, 1), (3, 2), (1, 0)]


@pytest.mark.parametrize("flush", [FlushPolicy.ALWAYS, FlushPolicy.INTERVAL], ids=str)
def test_cancelling_callers_at_every_await_keeps_every_replica_in_step_with_its_log(
    tmp_path: Path, flush: FlushPolicy
) -> None:
    hits: Counter[tuple[str, str]] = Counter()
    for stride, phase in SCHEDULES:

        async def main(stride: int = stride, phase: int = phase) -> None:
            harness = Harness(stride, phase)
            cluster = Cluster(tmp_path / f"{flush.value}-{stride}-{phase}", flush, harness)
            try:
                await scenario(cluster)
                await finish(cluster)
            finally:
                for node in list(cluster.drivers):
                    await cluster.stop(node)
                await cluster.network.close()
            hits.update(harness.hits)

        asyncio.run(main())
    kinds = {kind for kind, _role in hits}
    # every output path that awaits was hit with a cancellation at least once (a leader's
    # append awaits only under flush=always: otherwise the write is made in the same step
    # as the core's, with no await, by the owner or by the caller taking its turn)
    appends = ("append",) if flush is FlushPolicy.ALWAYS else ()
    for kind in (
        *appends,
        "append_frames",
        "control",
        "quorum-state",
        "epoch-history",
        "truncate_to",
        "apply_retention",
    ):
        assert kind in kinds, (kind, hits)
    assert any(role == "leader" for _kind, role in hits), hits
    assert any(role == "follower" for _kind, role in hits), hits
