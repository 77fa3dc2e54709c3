"""Group flush against per-write fsyncs, in one process (the replication driver's path).

    .venv/bin/python bench/group_flush_inprocess.py [--partitions 8] [--batches 200]
                                                   [--repeats 3] [--appenders 1 4]
                                                   [--write-docs]

`--partitions` single-voter replicas (flush=always), `--appenders` tasks each (1; several
values: one table row each) appending
batches of 100 x 100-byte records with acks=all, one at a time, `--batches` per task.
Two ways, alternated in each repeat: `own` (each write fsyncs its own log in the owner's
thread hop, as before the group flusher) and `group` (the node's `GroupFlusher` fsyncs the
logs: writes in the event loop, the fsyncs of every log waiting in flight together).
Prints records/s and `.log` fsyncs per batch for each, medians over the repeats. No
gRPC, no client: what is left is the driver, the disk and the event loop. `--write-docs`
writes `## Group flush in process (bench/group_flush_inprocess.py)` in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import bench_tmpdir, machine_info, write_section

from replog.replication import Acks, ReplicaConfig, Role
from replog.replication.driver import ReplicaDriver
from replog.server.partitions.flusher import GroupFlusher
from replog.storage import FlushPolicy, PartitionLog, StorageConfig

SECTION = "## Group flush in process (bench/group_flush_inprocess.py)"
STORAGE = StorageConfig(flush=FlushPolicy.ALWAYS)
BATCH = [os.urandom(100) for _ in range(100)]


class Drop:
    def send(self, to: int, message: object) -> None:
        raise AssertionError("a single voter sends nothing")


async def one(
    root: Path, partitions: int, batches: int, group: bool, appenders: int
) -> tuple[float, float]:
    fsyncs: Counter[str] = Counter()
    real = os.fdatasync

    def counting(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".log"):
            fsyncs["log"] += 1
        real(fd)

    flusher = GroupFlusher() if group else None
    runner = asyncio.create_task(flusher.run()) if flusher else None
    logs, drivers = [], []
    for p in range(partitions):
        log = PartitionLog(root / f"p{p}", "t", p, STORAGE)
        driver = ReplicaDriver(log, ReplicaConfig(1, (1,)), Drop(), rng=random.Random(p))
        if flusher is not None:
            log.flush_deferred = True
            driver.group_flush = flusher
        logs.append(log)
        drivers.append(driver)
        await driver.start()
    try:
        while not all(d.role is Role.LEADER and d.serving for d in drivers):
            await asyncio.sleep(0.01)

        async def appender(d: ReplicaDriver) -> None:
            for _ in range(batches):
                await d.append(BATCH, Acks.ALL, 60.0)

        os.fdatasync = counting
        began = time.perf_counter()
        await asyncio.gather(*(appender(d) for d in drivers for _ in range(appenders)))
        elapsed = time.perf_counter() - began
    finally:
        os.fdatasync = real
        for d in drivers:
            await d.close()
        for log in logs:
            log.close()
        if runner is not None and flusher is not None:
            runner.cancel()
            flusher.close()
    total = partitions * batches * appenders
    return total * len(BATCH) / elapsed, fsyncs["log"] / total


def measure(args: argparse.Namespace, appenders: int, work: Path) -> dict[str, Any]:
    """Both ways alternated in each repeat; medians, and the median of the ratios."""
    rates: dict[str, list[float]] = {"own": [], "group": []}
    per: dict[str, list[float]] = {"own": [], "group": []}
    for r in range(args.repeats):
        for way in ("own", "group") if r % 2 == 0 else ("group", "own"):
            root = work / f"{way}-{appenders}-{r}"
            root.mkdir()
            rate, fs = asyncio.run(
                one(root, args.partitions, args.batches, way == "group", appenders)
            )
            rates[way].append(rate)
            per[way].append(fs)
            print(f"appenders {appenders} repeat {r} {way}: {rate:,.0f} records/s, "
                  f"{fs:.2f} log fsyncs per batch", file=sys.stderr)  # fmt: skip
    out: dict[str, Any] = {
        way: {
            "records_per_s": round(statistics.median(rates[way])),
            "log_fsyncs_per_batch": round(statistics.median(per[way]), 2),
        }
        for way in rates
    }
    ratios = [g / o for g, o in zip(rates["group"], rates["own"], strict=True)]
    out["ratio_group_vs_own"] = round(statistics.median(ratios), 2)
    out["ratios"] = [round(x, 2) for x in ratios]
    out["appenders"] = appenders
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--appenders", type=int, nargs="+", default=[1], help="per partition")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    rows = []
    with bench_tmpdir(prefix="group-flush-") as work:
        machine = machine_info(work)
        for appenders in args.appenders:
            rows.append(measure(args, appenders, work))
            print(json.dumps(rows[-1]))
    if args.write_docs:
        lines = [
            "The group flusher against each write fsyncing its own log, in one process (no "
            f"gRPC, no client: the replication driver, the disk and the event loop). "
            f"{args.partitions} single-voter partitions under flush=always, batches of "
            f"{len(BATCH)} x 100 B with acks=all, each appender task one batch at a time, "
            f"{args.batches} batches per appender; the two ways alternate within each repeat "
            f"({args.repeats} repeats; the ratio is taken within each repeat).",
            "",
            "Command: `" + " ".join(["python bench/group_flush_inprocess.py", *sys.argv[1:]]) + "`",
            "",
            *(f"- {k}: {v}" for k, v in machine.items()),
            "",
            "| appenders per partition | own (records/s) | group (records/s) | group / own "
            "(median of the repeats' ratios) | per repeat | `.log` fsyncs per batch "
            "(own / group) |",
            "|---:|---:|---:|---:|---|---:|",
            *(
                f"| {r['appenders']} | {r['own']['records_per_s']:,} | "
                f"{r['group']['records_per_s']:,} | {r['ratio_group_vs_own']:.2f} | "
                f"{', '.join(f'{x:.2f}' for x in r['ratios'])} | "
                f"{r['own']['log_fsyncs_per_batch']:.2f} / "
                f"{r['group']['log_fsyncs_per_batch']:.2f} |"
                for r in rows
            ),
        ]
        write_section(SECTION, "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
