"""What an idle replica costs a node in memory: its driver, its core and its owner task
(measured with tracemalloc; the partition's log is storage's business), and one entry in
the node's ticker. Measured at 1,000 replicas: about 11.5 KiB each, one heap entry each."""

from __future__ import annotations

import asyncio
import gc
import random
import tracemalloc
from pathlib import Path

from replog.replication import Message, ReplicaConfig
from replog.replication.driver import ReplicaDriver
from replog.replication.ticker import COMPACT_SLACK, Ticker
from replog.storage import FlushPolicy, PartitionLog, StorageConfig

REPLICAS = 100
BYTES_PER_REPLICA_MAX = 32 * 1024  # measured 11.5 KiB: a bound with room, not a target


class Nowhere:
    def send(self, to: int, message: Message) -> None:
        """Peers that never answer: every replica stays a follower that campaigns."""


def test_an_idle_replica_holds_a_bounded_amount_of_memory_and_one_ticker_entry(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        storage = StorageConfig(flush=FlushPolicy.INTERVAL)
        logs = [PartitionLog(tmp_path / f"p{i}", f"t{i}", 0, storage) for i in range(REPLICAS)]
        drivers: list[ReplicaDriver] = []
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i, log in enumerate(logs):
                config = ReplicaConfig(1, (1, 2, 3))
                driver = ReplicaDriver(log, config, Nowhere(), rng=random.Random(i))
                await driver.start()
                drivers.append(driver)
            await asyncio.sleep(0.2)
            gc.collect()
            per_replica = (tracemalloc.get_traced_memory()[0] - before) / REPLICAS
        finally:
            tracemalloc.stop()
        ticker = Ticker.of(asyncio.get_running_loop())
        try:
            assert per_replica <= BYTES_PER_REPLICA_MAX, per_replica
            assert len(ticker) <= 2 * REPLICAS + COMPACT_SLACK
        finally:
            for driver in drivers:
                await driver.close()
            for log in logs:
                log.close()

    asyncio.run(main())
