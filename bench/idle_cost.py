"""Idle cost of partitions: a 3-node cluster's idle CPU and RSS per node as topics grow.

    .venv/bin/python bench/idle_cost.py [--steps 100,300,600,1000] [--tls] [--write]

Starts 3 `replog serve` nodes (127.0.0.1, port 0, defaults) and creates topics of 1
partition, replication factor 3, from 8 client threads (as tests/integration/
test_topic_burst.py does) up to each step's count. After each step it waits (at most
`--settle-s`) until every partition has a leader, lets the cluster sit idle for 5 s,
then measures each node's CPU over `--window-s` seconds (/proc/PID/stat, user + system) and
its RSS (/proc/PID/status). A step whose creations fail or time out (`--step-deadline-s`)
ends the run: "topics reached" is the last count every partition of which had a leader.
With `--write` the table goes to the "Idle cost of partitions" section of
docs/benchmarks.md (this machine, this commit).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import bench_tmpdir, log, machine_info, process_cpu_s, write_section
from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster

HEADING = "## Idle cost of partitions"
CLIENTS = 8
PATIENT = RetryPolicy(deadline_ms=60_000)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def leaders(cluster: DevCluster) -> int:
    """Partitions with a leader, counted from the nodes' metrics."""
    count = 0
    for node in cluster.members.values():
        if not node.running:
            continue
        try:
            url = f"http://{node.metrics_address}/metrics"
            with urllib.request.urlopen(url, timeout=10) as r:
                text = r.read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            role = line.startswith("replog_replica_role{") and line.endswith(" 1.0")
            if role and 'role="leader"' in line and 'topic="burst-' in line:
                count += 1
    return count


def create(cluster: DevCluster, names: list[str], deadline: float) -> list[str]:
    errors: list[str] = []

    def worker(mine: list[str]) -> None:
        try:
            with Client(cluster.bootstrap, tls=cluster.client_tls, retry=PATIENT) as client:
                for name in mine:
                    if time.monotonic() > deadline:
                        errors.append(f"out of time before {name}")
                        return
                    client.create_topic(name, 1, replication_factor=3)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [
        threading.Thread(target=worker, args=(names[w::CLIENTS],), daemon=True)
        for w in range(CLIENTS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1.0, deadline - time.monotonic() + 60))
    return errors


def measure(cluster: DevCluster, window_s: float) -> list[tuple[float, float]]:
    """(CPU % of a core, RSS MiB) per node over `window_s`."""
    pids = [n.proc.pid for n in cluster.members.values() if n.proc is not None]
    before = [process_cpu_s(p) for p in pids]
    time.sleep(window_s)
    after = [process_cpu_s(p) for p in pids]
    pairs = zip(pids, after, before, strict=True)
    return [(100 * (a - b) / window_s, rss_mib(p)) for p, a, b in pairs]


def run(args: argparse.Namespace, data: Path) -> list[str]:
    rows = []
    cluster = DevCluster(data / "cluster", 3, tls=args.tls)
    cluster.start()
    try:
        made = 0
        base = measure(cluster, args.window_s)
        rows.append(row(0, 0.0, base))
        for step in args.steps:
            names = [f"burst-{i:05d}" for i in range(made, step)]
            started = time.monotonic()
            errors = create(cluster, names, started + args.step_deadline_s)
            took = time.monotonic() - started
            if errors:
                log(f"step {step}: {len(errors)} errors, first: {errors[0]}")
                rows.append(
                    f"| {step} | creation failed after {took:.0f} s: {errors[0][:80]} | | |"
                )
                break
            made = step
            end = time.monotonic() + args.settle_s
            while leaders(cluster) < step and time.monotonic() < end:
                time.sleep(2)
            led = leaders(cluster)
            if led < step:
                rows.append(
                    f"| {step} | {led} of {step} partitions led after {args.settle_s:.0f} s | | |"
                )
                break
            time.sleep(5)
            rows.append(row(step, took, measure(cluster, args.window_s)))
            log(rows[-1])
    finally:
        cluster.kill_all()
    return rows


def row(topics: int, took: float, nodes: list[tuple[float, float]]) -> str:
    cpu = " / ".join(f"{c:.1f}" for c, _ in nodes)
    rss = " / ".join(f"{r:.0f}" for _, r in nodes)
    return f"| {topics} | {took:.1f} | {cpu} | {rss} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", default="100,300,600,1000")
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--settle-s", type=float, default=120.0)
    parser.add_argument("--step-deadline-s", type=float, default=300.0)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    args.steps = [int(s) for s in args.steps.split(",")]
    with bench_tmpdir(prefix="idle-") as data:
        info = machine_info(data)
        rows = run(args, data)
    table = "\n".join(
        [
            "| topics (rf 3) | creation time of the step (s) | idle CPU per node (% of a core) "
            "| RSS per node (MiB) |",
            "|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    if args.write:
        lines = "\n".join(f"- {k}: {v}" for k, v in info.items())
        command = "bench/idle_cost.py --steps " + ",".join(map(str, args.steps))
        body = f"`{command}`{' --tls' if args.tls else ''}\n\n{lines}\n\n{table}\n"
        write_section(HEADING, body)


if __name__ == "__main__":
    main()
