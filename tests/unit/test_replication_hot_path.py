"""The replication hot path runs on messages, not timers (issue 17 item 3).

Three drivers on real logs (flush=interval and flush=always) over the in-process network of
`test_replication_driver`, with ticks and long polls so long (10 minutes) that no timer can
fire during a test: the leader is elected by an explicit `campaign()`. Whatever completes
here was driven by messages alone, so:

* a follower's fetch parked at the leader's log end is answered when records are appended
  (no polling interval between an append and its replication);
* the leader advances the HW and answers an acks=all append in the same owner pass that
  handles the acknowledging fetch: when the leader's `deliver` of that fetch returns, the
  append's caller has its answer already.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from replog.replication import Acks, Message, ReplicaConfig, Role
from replog.replication.driver import ReplicaDriver
from replog.replication.messages import FetchRequest
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from tests.unit.test_replication_driver import DEADLINE_S, LocalNetwork, data_values, wait_for

VOTERS = (1, 2, 3)
NEVER_MS = 600_000  # ticks and long polls: longer than any test


class WatchedNetwork(LocalNetwork):
    """`LocalNetwork` that calls `after` once each delivery has been handled."""

    async def _pump(self, node: int) -> None:
        while True:
            message = await self._queues[node].get()
            driver = self.drivers.get(node)
            if driver is not None:
                await driver.deliver(message)
                self.on_delivered(node, message)

    def on_delivered(self, node: int, message: Message) -> None:
        pass


async def start(root: Path, network: LocalNetwork, flush: FlushPolicy) -> dict[int, ReplicaDriver]:
    storage = StorageConfig(segment_bytes_max=4096, index_interval_bytes=256, flush=flush)
    drivers: dict[int, ReplicaDriver] = {}
    for node in VOTERS:
        log = PartitionLog(root / f"node{node}", "t", 0, storage)
        config = ReplicaConfig(
            node, VOTERS, election_timeout_ms_min=3 * NEVER_MS,
            election_timeout_ms_max=4 * NEVER_MS, fetch_wait_ms_max=NEVER_MS,
            fetch_retry_ms=2 * NEVER_MS, begin_epoch_retry_ms=NEVER_MS,
            flush_always=flush is FlushPolicy.ALWAYS,
        )  # fmt: skip
        driver = ReplicaDriver(
            log, config, network.transport(node), rng=random.Random(node), tick_ms=NEVER_MS
        )
        drivers[node] = driver
        network.attach(node, driver)
        await driver.start()
    await drivers[1].campaign()
    await wait_for(lambda: drivers[1].role is Role.LEADER and drivers[1].serving)
    return drivers


def run(
    root: Path,
    flush: FlushPolicy,
    test: Callable[[WatchedNetwork, dict[int, ReplicaDriver]], Awaitable[None]],
) -> None:
    async def main() -> None:
        network = WatchedNetwork()
        drivers = await start(root, network, flush)
        try:
            await test(network, drivers)
        finally:
            for driver in drivers.values():
                await driver.close()
                driver.log.close()
            await network.close()

    asyncio.run(main())


@pytest.mark.parametrize("flush", [FlushPolicy.INTERVAL, FlushPolicy.ALWAYS])
def test_acks_all_appends_replicate_and_commit_on_messages_alone(
    tmp_path: Path, flush: FlushPolicy
) -> None:
    async def scenario(network: WatchedNetwork, drivers: dict[int, ReplicaDriver]) -> None:
        leader = drivers[1]
        for i in range(30):  # each one waits for a follower: no timer ever fires
            base, last = await asyncio.wait_for(
                leader.append([b"r%d" % i], Acks.ALL, DEADLINE_S), DEADLINE_S
            )
            assert base == last and leader.log.high_watermark > last
        hw = leader.log.high_watermark
        await wait_for(lambda: all(d.log.log_end_offset == hw for d in drivers.values()))
        for driver in drivers.values():
            assert data_values(driver.log, hw) == [b"r%d" % i for i in range(30)]

    run(tmp_path, flush, scenario)


@pytest.mark.parametrize("flush", [FlushPolicy.INTERVAL, FlushPolicy.ALWAYS])
def test_the_acknowledging_fetch_answers_acks_all_in_the_same_owner_pass(
    tmp_path: Path, flush: FlushPolicy
) -> None:
    async def scenario(network: WatchedNetwork, drivers: dict[int, ReplicaDriver]) -> None:
        leader = drivers[1]
        last = leader.log.log_end_offset  # the batch's offset (no batch header: plain)
        append = asyncio.ensure_future(leader.append([b"x"], Acks.ALL, DEADLINE_S))
        checked: list[bool] = []

        def on_delivered(node: int, message: Message) -> None:
            # the first fetch that acknowledges the batch, as the leader's deliver returns
            if node == 1 and isinstance(message, FetchRequest) and message.fetch_offset > last:
                checked.append(append.done())

        network.on_delivered = on_delivered  # type: ignore[method-assign]
        base, _ = await asyncio.wait_for(append, DEADLINE_S)
        assert base == last
        await wait_for(lambda: checked)
        assert checked[0] is True

    run(tmp_path, flush, scenario)
