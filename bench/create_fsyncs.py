"""fsyncs per new partition and CreateTopic time (issue 25: the topic-creation burst).

    .venv/bin/python bench/create_fsyncs.py [--nodes 1|3] [--topics N] [--tree DIR] [--json]

A fresh cluster on 127.0.0.1 (`--nodes`, replication factor = nodes) gets `--topics` topics
of one partition, created one at a time by one client; then the bench waits until every
partition has a leader, and a settle of `SETTLE_S`. Each node process loads
bench/fsync_hooks/sitecustomize.py, which counts every os.fsync/os.fdatasync by the kind of
file synced and the replog functions that asked; a snapshot before the first create and
one after the settle give the fsyncs the creates caused. Printed: fsyncs per new replica
(all nodes' fsyncs / (topics x rf)), by site, and the CreateTopic times (median, total).
`--tree` runs another checkout's code (e.g. /work/main for the "before" figures) with these
same hooks. The figures go to docs/benchmarks.md by hand (the "Durable writes per new
partition" section): they are compared across trees, which one run of this script cannot do.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import bench_tmpdir, log

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster

HOOKS = Path(__file__).resolve().parent / "fsync_hooks"
REPO = Path(__file__).resolve().parent.parent
PATIENT = RetryPolicy(attempts_max=10_000, backoff_max_ms=500, deadline_ms=120_000)
SETTLE_S = 3.0
SNAPSHOT_TIMEOUT_S = 10.0


def snapshot(count_dir: Path, pid: int) -> Counter[str]:
    before = set(count_dir.glob(f"fsyncs-{pid}-*.json"))
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + SNAPSHOT_TIMEOUT_S
    while time.monotonic() < deadline:
        new = set(count_dir.glob(f"fsyncs-{pid}-*.json")) - before
        if new:
            return Counter(json.loads(new.pop().read_text()))
        time.sleep(0.01)
    raise RuntimeError(f"node pid {pid} wrote no counts")


def all_led(client: Client, names: list[str], deadline_s: float) -> bool:
    end = time.monotonic() + deadline_s
    pending = list(names)
    while pending and time.monotonic() < end:
        pending = [n for n in pending if any(p.leader_id is None for p in client.describe_topic(n))]
        if pending:
            time.sleep(0.2)
    return not pending


def run(args: argparse.Namespace, work: Path) -> dict[str, object]:
    count_dir = work / "counts"
    count_dir.mkdir()
    os.environ["BENCH_FSYNC_DIR"] = str(count_dir)
    os.environ["PYTHONPATH"] = f"{HOOKS}:{args.tree}"
    # `python -m replog` puts its working directory first on sys.path: the nodes start in
    # the scratch directory, so that PYTHONPATH decides which checkout they run
    os.chdir(work)
    extra = ["--flush", args.flush]
    cluster = DevCluster(work / "cluster", args.nodes, extra_args=extra)
    try:
        cluster.start()
        pids = [m.proc.pid for m in cluster.members.values() if m.proc is not None]
        with Client(cluster.bootstrap, retry=PATIENT, timeout_s=120) as client:
            client.create_topic("warmup", 1, args.nodes, format="raw")
            all_led(client, ["warmup"], 60)
            time.sleep(SETTLE_S)
            before = sum((snapshot(count_dir, pid) for pid in pids), Counter())
            names = [f"t{i:05d}" for i in range(args.topics)]
            times: list[float] = []
            began = time.monotonic()
            for name in names:
                start = time.monotonic()
                client.create_topic(name, 1, args.nodes, format="raw")
                times.append(time.monotonic() - start)
            create_s = time.monotonic() - began
            led = all_led(client, names, 120)
            led_s = time.monotonic() - began
            time.sleep(SETTLE_S)
            after = sum((snapshot(count_dir, pid) for pid in pids), Counter())
    finally:
        cluster.kill_all()
    delta = after - before
    replicas = args.topics * args.nodes
    return {
        "tree": str(args.tree),
        "nodes": args.nodes,
        "topics": args.topics,
        "flush": args.flush,
        "all_led": led,
        "create_total_s": round(create_s, 2),
        "all_led_s": round(led_s, 2),
        "create_median_ms": round(statistics.median(times) * 1000, 1),
        "fsyncs_per_replica": round(sum(delta.values()) / replicas, 2),
        "by_site_per_replica": {
            k: round(v / replicas, 3) for k, v in delta.most_common() if v / replicas >= 0.005
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--flush", default="always")
    parser.add_argument("--tree", type=Path, default=REPO)
    args = parser.parse_args()
    with bench_tmpdir(prefix="create-fsyncs-") as work:
        result = run(args, work)
    log(json.dumps(result, indent=1))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
