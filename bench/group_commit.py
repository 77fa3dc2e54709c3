"""Group commit through the replicated path: fsyncs per append with 32 concurrent appenders.

    .venv/bin/python bench/group_commit.py [--appends N] [--repeats N] [--write-docs]

In one process, flush=always, 100-byte values, `APPENDERS` asyncio tasks each appending one
record at a time (the next once the previous is acknowledged):

* `replicated_1`: a replica set of one (`ReplicaDriver`, the path every server request
  takes), acks=all;
* `replicated_3`: three replicas (`ReplicaDriver`s joined by an in-process network), acks=all,
  appends to the leader; the fsyncs counted are the leader's;
* `storage_alone` (anchor, same run): one writer calling `PartitionLog.append` for each
  record, each fsynced before the next: the storage has no group commit of its own (the
  replica driver is its one writer and groups what arrives meanwhile), so this is what
  appending without the driver's grouping costs.

fsyncs are counted by wrapping `os.fdatasync` in this process and attributing each call to
the node directory of the file it syncs. Target (issue 10): <= 0.3 fsyncs per append through
the replicated path. `--write-docs` writes `## Group commit (bench/group_commit.py)`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shlex
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import Result, bench_tmpdir, emit, log, machine_info, summarize, write_section

from replog.replication import Acks, Message, ReplicaConfig, Role
from replog.replication.driver import ReplicaDriver
from replog.storage import FlushPolicy, PartitionLog, StorageConfig

SECTION = "## Group commit (bench/group_commit.py)"
APPENDERS = 32
VALUE = b"x" * 100
STORAGE = StorageConfig(flush=FlushPolicy.ALWAYS)


@contextmanager
def counted_fdatasync() -> Iterator[Counter[str]]:
    """Counts fdatasync calls per node directory (`node<N>` in the synced file's path)."""
    counts: Counter[str] = Counter()
    real = os.fdatasync

    def counting(fd: int) -> None:
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = "?"
        node = next((p for p in Path(path).parts if p.startswith("node")), "?")
        counts[node] += 1
        real(fd)

    os.fdatasync = counting  # type: ignore[assignment]
    try:
        yield counts
    finally:
        os.fdatasync = real


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


async def replicated(root: Path, voters: int, appends: int) -> tuple[float, float]:
    """(records/s, leader fsyncs per append) for `appends` single-record acks=all appends."""
    ids = tuple(range(1, voters + 1))
    network = Network()
    logs = {n: PartitionLog(root / f"node{n}", "bench", 0, STORAGE) for n in ids}
    for n in ids:
        config = ReplicaConfig(
            n, ids, election_timeout_ms_min=300, election_timeout_ms_max=600,
            fetch_wait_ms_max=100, fetch_retry_ms=200, begin_epoch_retry_ms=100,
        )  # fmt: skip
        transport = network.transport(n)
        driver = ReplicaDriver(logs[n], config, transport, rng=random.Random(n))  # type: ignore[arg-type]
        network.add(n, driver)
    try:
        for d in network.drivers.values():
            await d.start()
        leader = None
        for _ in range(1000):
            leaders = [n for n, d in network.drivers.items() if d.role is Role.LEADER]
            if leaders:
                leader = leaders[0]
                break
            await asyncio.sleep(0.01)
        assert leader is not None, "no leader elected"
        driver = network.drivers[leader]
        per_task = appends // APPENDERS

        async def appender() -> None:
            for _ in range(per_task):
                await driver.append([VALUE], Acks.ALL, 30.0)

        with counted_fdatasync() as counts:
            start = time.perf_counter()
            await asyncio.gather(*(appender() for _ in range(APPENDERS)))
            elapsed = time.perf_counter() - start
        total = per_task * APPENDERS
        return total / elapsed, counts[f"node{leader}"] / total
    finally:
        for d in network.drivers.values():
            await d.close()
        for t in network.tasks:
            t.cancel()
        await asyncio.gather(*network.tasks, return_exceptions=True)
        for plog in logs.values():
            plog.close()


def storage_alone(root: Path, appends: int) -> tuple[float, float]:
    plog = PartitionLog(root / "node0", "bench", 0, STORAGE)
    append = plog.append
    try:
        with counted_fdatasync() as counts:
            start = time.perf_counter()
            for _ in range(appends):
                append([VALUE])
            elapsed = time.perf_counter() - start
    finally:
        plog.close()
    return appends / elapsed, counts["node0"] / appends


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--appends", type=int, default=3200, help="appends per bench")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    assert args.appends >= APPENDERS and args.repeats >= 1
    results: dict[str, list[tuple[float, float]]] = {"replicated_1": [], "replicated_3": [],
                                                     "storage_alone": []}  # fmt: skip
    with bench_tmpdir(prefix="group-commit-") as work:
        machine = machine_info(work)
        for r in range(args.repeats):
            base = work / f"run-{r}"
            results["replicated_1"].append(asyncio.run(replicated(base / "r1", 1, args.appends)))
            results["replicated_3"].append(asyncio.run(replicated(base / "r3", 3, args.appends)))
            results["storage_alone"].append(storage_alone(base / "s", args.appends))
            log(f"repeat {r + 1}/{args.repeats}: " + ", ".join(
                f"{k}={v[-1][0]:,.0f}/s {v[-1][1]:.3f} fsyncs/append" for k, v in results.items()
            ))  # fmt: skip
    rows = []
    for name, runs in results.items():
        rate = summarize([x for x, _ in runs])
        fsyncs = summarize([y for _, y in runs])
        emit(Result(f"group_commit_{name}", rate.median, "records/s"))
        emit(Result(f"group_commit_{name}_fsyncs_per_append", fsyncs.median, "fsyncs/append"))
        rows.append(
            f"| `{name}` | {rate.median:,.0f} ({rate.low:,.0f}-{rate.high:,.0f}) | "
            f"{fsyncs.median:.3f} ({fsyncs.low:.3f}-{fsyncs.high:.3f}) |"
        )
    if args.write_docs:
        shown = sys.argv[1:] if argv is None else list(argv)
        command = shlex.join([".venv/bin/python", "bench/group_commit.py", *shown])
        body = "\n".join(
            [
                *(f"- {k}: {v}" for k, v in machine.items()),
                "",
                "```sh",
                command,
                "```",
                "",
                f"{APPENDERS} concurrent appenders, one 100-byte record per append, "
                f"flush=always, {args.appends:,} appends per bench, median (min-max) of "
                f"{args.repeats} runs. Target: <= 0.3 fsyncs per append through the "
                "replicated path. `storage_alone` (the anchor, same run) is one writer "
                "appending to `PartitionLog` directly, one record at a time, each fsynced (log "
                "and `.crc`: 2 fdatasyncs) before the next: the storage has no group commit "
                "of its own, the replica driver groups.",
                "",
                "| bench | appends/s | leader fsyncs per append |",
                "|---|---:|---:|",
                *rows,
            ]
        )
        write_section(SECTION, body)
        log(f"wrote {SECTION!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
