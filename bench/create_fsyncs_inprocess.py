"""fsyncs per new partition replica, in one process, free of the machine's election churn.

    .venv/bin/python bench/create_fsyncs_inprocess.py [--partitions N] [--voters 3]
                                                      [--tree DIR]

`--partitions` partitions of `--voters` replicas each are created the way a node makes one
(`replica_dirs.create`, `PartitionLog`, `ReplicaDriver` under flush=always), their replicas
joined by an in-process network; the bench waits until every partition has a leader whose
epoch is committed (the leader's epoch marker fsynced on a majority) and every replica
holds the marker. Every os.fsync/os.fdatasync meanwhile is counted by the kind of file
(digits folded). Printed: fsyncs per replica, by kind, and the epochs per partition (an
election that needed more than one epoch writes more: compare runs with 1.0). Not counted:
the HW checkpoints a node's interval flusher writes each second (bench/create_fsyncs.py
counts those too). `--tree DIR` imports replog from another checkout (the "before").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--partitions", type=int, default=50)
parser.add_argument("--voters", type=int, default=3)
parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent)
ARGS = parser.parse_args()
sys.path.insert(0, str(ARGS.tree.resolve()))

import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402

from replog.replication import Message, ReplicaConfig, Role  # noqa: E402
from replog.replication.driver import ReplicaDriver  # noqa: E402
from replog.server.partitions import replica_dirs  # noqa: E402
from replog.storage import FlushPolicy, PartitionLog, StorageConfig  # noqa: E402
from replog.storage.names import partition_dir  # noqa: E402

STORAGE = StorageConfig(flush=FlushPolicy.ALWAYS)
DEADLINE_S = 120.0


class Network:
    def __init__(self) -> None:
        self.drivers: dict[int, ReplicaDriver] = {}
        self.queues: dict[int, asyncio.Queue[Message]] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def add(self, node: int, driver: ReplicaDriver) -> None:
        self.drivers[node] = driver
        self.queues[node] = asyncio.Queue()
        self.tasks.append(asyncio.create_task(self._pump(node)))

    async def _pump(self, node: int) -> None:
        while True:
            await self.drivers[node].deliver(await self.queues[node].get())

    def transport(self, me: int) -> object:
        queues = self.queues

        class _T:
            def send(self, to: int, message: Message) -> None:
                queues[to].put_nowait(message)

        return _T()


def counting(counts: Counter[str]) -> None:
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def wrapped(fd: int, real: object = real) -> None:
            path = os.readlink(f"/proc/self/fd/{fd}")
            kind = re.sub(r"\d+", "N", os.path.basename(path))
            kind += "/" if os.path.isdir(path) else ""
            counts[kind] += 1
            real(fd)  # type: ignore[operator]

        setattr(os, name, wrapped)


async def main() -> dict[str, object]:
    counts: Counter[str] = Counter()
    root = Path(tempfile.mkdtemp(prefix="create-inprocess-", dir=Path.cwd() / "tmp"))
    ids = tuple(range(1, ARGS.voters + 1))
    networks: list[Network] = []
    logs: list[PartitionLog] = []
    counting(counts)
    began = time.perf_counter()
    for p in range(ARGS.partitions):
        network = Network()
        networks.append(network)
        for n in ids:
            data_dir = root / f"node{n}"
            data_dir.mkdir(exist_ok=True)
            await asyncio.to_thread(replica_dirs.create, data_dir, f"t{p}", 1, p + 1)
            directory = partition_dir(data_dir, f"t{p}", 0)
            log = await asyncio.to_thread(PartitionLog, directory, f"t{p}", 0, STORAGE)
            logs.append(log)
            config = ReplicaConfig(
                n, ids, election_timeout_ms_min=300, election_timeout_ms_max=600,
                fetch_wait_ms_max=100, fetch_retry_ms=200, begin_epoch_retry_ms=100,
            )  # fmt: skip
            transport = network.transport(n)
            rng = random.Random(p * 10 + n)
            driver = ReplicaDriver(log, config, transport, rng=rng)  # type: ignore[arg-type]
            network.add(n, driver)
        for d in network.drivers.values():
            await d.start()

    def settled() -> bool:
        for net in networks:
            leaders = [d for d in net.drivers.values() if d.role is Role.LEADER]
            if len(leaders) != 1 or not leaders[0].serving:
                return False
            if any(d.log.flushed_offset < 1 for d in net.drivers.values()):
                return False
        return True

    deadline = time.monotonic() + DEADLINE_S
    while not settled():
        assert time.monotonic() < deadline, "not settled"
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - began
    epochs = [max(d.epoch for d in net.drivers.values()) for net in networks]
    snapshot = Counter(counts)
    for net in networks:
        for d in net.drivers.values():
            await d.close()
        for t in net.tasks:
            t.cancel()
    for log in logs:
        log.close()
    replicas = ARGS.partitions * len(ids)
    return {
        "tree": str(ARGS.tree),
        "partitions": ARGS.partitions,
        "voters": ARGS.voters,
        "settled_s": round(elapsed, 2),
        "epochs_per_partition": round(sum(epochs) / len(epochs), 2),
        "fsyncs_per_replica": round(sum(snapshot.values()) / replicas, 2),
        "by_kind_per_replica": {k: round(v / replicas, 2) for k, v in snapshot.most_common()},
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
