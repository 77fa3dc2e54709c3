"""`--flush always` against `--flush interval` for batched producers (issue 32 item 3).

    .venv/bin/python bench/flush_ratio.py [--nodes 1 3] [--repeats 3] [--batches N]
                                          [--write-docs]

For each node count: two clusters of `replog serve` on 127.0.0.1 (`replog.devcluster`), one
with `--flush always` (the durable default: an acknowledged record is fsynced, on a majority
for acks=all) and one with `--flush interval` (fsync every second), started side by side.
Each gets one topic of `PARTITIONS` partitions, replication factor = nodes. `THREADS` client
threads (one `replog.Client` each, thread i on partition i mod `PARTITIONS`) append
`--batches` batches of 1000 random 100-byte values with acks=all, one batch in flight per
thread; the rate is records/s from the first to the last ack. `--workload producer`: instead,
the default pipelined producer (`pipelined`) sends the same number of batches. Repeats
rotate which cluster goes first; the ratio always/interval is taken within each repeat and
the median over the repeats reported (the machine's load moves both alike). `--base-tree
DIR` also starts the same two clusters running another checkout's code (the "before"), in
the same repeats, so that before and after are compared under the same load. `--write-docs` writes
`## Group commit across partitions (bench/flush_ratio.py)` in docs/benchmarks.md.
Target (issue 32): ratio >= 0.75 on 1 and 3 nodes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import Result, bench_tmpdir, emit, log, machine_info, write_section

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster

SECTION = "## Group commit across partitions (bench/flush_ratio.py)"  # + workload
MODES = ("always", "interval")
PARTITIONS = 8
THREADS = 8
BATCH = 1000
VALUE_BYTES = 100
TOPIC = "flush-ratio"
REPO = Path(__file__).resolve().parent.parent
PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=60_000)


def throughput(address: str, batches: int) -> float:
    batch = [os.urandom(VALUE_BYTES) for _ in range(BATCH)]
    clients = [Client(address, retry=PATIENT) for _ in range(THREADS)]
    for i, c in enumerate(clients):
        c.append(TOPIC, i % PARTITIONS, batch[:1], acks="all")  # connect, find the leader
    start = threading.Barrier(THREADS + 1)

    def work(c: Client, partition: int) -> None:
        start.wait()
        for _ in range(batches):
            c.append(TOPIC, partition, batch, acks="all")

    threads = [
        threading.Thread(target=work, args=(c, i % PARTITIONS)) for i, c in enumerate(clients)
    ]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    for c in clients:
        c.close()
    return batches * BATCH * THREADS / elapsed


def pipelined(address: str, batches: int) -> float:
    """The default producer (`Client.producer`, acks=all, up to 5 batches in flight per
    partition over AppendStream): `batches` x `THREADS` batches round robin over the
    partitions, all sent, then every ack awaited."""
    batch = [os.urandom(VALUE_BYTES) for _ in range(BATCH)]
    with Client(address, retry=PATIENT) as client:
        producer = client.producer(TOPIC, acks="all", partitions=PARTITIONS)
        try:
            for p in range(PARTITIONS):
                producer.send_batch(batch[:1], p).result()  # connect, find the leaders
            total = batches * THREADS
            began = time.perf_counter()
            futures = [producer.send_batch(batch, i % PARTITIONS) for i in range(total)]
            for fut in futures:
                fut.result()
            elapsed = time.perf_counter() - began
        finally:
            producer.close()
    return total * BATCH / elapsed


WORKLOADS = {"threads": throughput, "producer": pipelined}
WHO = {
    "threads": f"{THREADS} client threads, one batch in flight each (`Client.append`).",
    "producer": "One default producer (`Client.producer`, up to 5 batches in flight per "
    "partition over AppendStream).",
}


def run_nodes(
    nodes: int, args: argparse.Namespace, work: Path, trees: dict[str, Path]
) -> dict[tuple[str, str], list[float]]:
    """Rates by (tree label, flush mode): every cluster started side by side, repeats
    rotating the order."""
    keys = [(label, m) for label in trees for m in MODES]
    # `python -m replog` puts its working directory first on sys.path: the nodes start in
    # the scratch directory, so that PYTHONPATH decides which checkout they run
    os.chdir(work)
    clusters: dict[tuple[str, str], DevCluster] = {}
    rates: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
    try:
        for label, m in keys:
            os.environ["PYTHONPATH"] = str(trees[label])  # the nodes run that tree's code
            cluster = DevCluster(work / f"n{nodes}-{label}-{m}", nodes, extra_args=["--flush", m])
            clusters[label, m] = cluster
            cluster.start()
            with Client(cluster.bootstrap, retry=PATIENT) as c:
                c.create_topic(TOPIC, PARTITIONS, nodes, format="raw")
        for r in range(args.repeats):
            order = keys[r % len(keys) :] + keys[: r % len(keys)]
            for key in order:
                rate = WORKLOADS[args.workload](clusters[key].bootstrap, args.batches)
                rates[key].append(rate)
                log(f"{nodes} node(s) {key[0]} --flush {key[1]} repeat {r}: {rate:,.0f} rec/s")
    finally:
        for cluster in clusters.values():
            cluster.kill_all()
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, default=40, help="per thread")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="threads")
    parser.add_argument(
        "--base-tree", type=Path, help="also run this checkout's code (the 'before'), same run"
    )
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    trees = {"this": REPO}
    if args.base_tree is not None:
        trees["base"] = args.base_tree.resolve()
    rows = []
    with bench_tmpdir(prefix="flush-ratio-") as work:
        machine = machine_info(work)
        for nodes in args.nodes:
            rates = run_nodes(nodes, args, work, trees)
            for label in trees:
                always, interval = rates[label, "always"], rates[label, "interval"]
                ratios = [a / i for a, i in zip(always, interval, strict=True)]
                ratio = statistics.median(ratios)
                tag = f"{nodes}n" + ("" if label == "this" else f"_{label}")
                a, i = statistics.median(always), statistics.median(interval)
                emit(Result(f"produce_{tag}_flush_always", round(a), "records/s"))
                emit(Result(f"produce_{tag}_flush_interval", round(i), "records/s"))
                emit(Result(f"flush_always_vs_interval_{tag}", round(ratio, 3), "ratio"))
                rows.append((nodes, label, a, i, ratio, ratios))
    if args.write_docs:
        lines = [
            "Batched producers, acks=all: `--flush always` against `--flush interval`, two "
            "clusters side by side in the same run (see the script's docstring); `base` is "
            "the same two clusters running `--base-tree`'s code in the same repeats. "
            + WHO[args.workload]
            + f" {PARTITIONS} partitions (rf = nodes), batches of {BATCH} x {VALUE_BYTES} B, "
            f"{args.batches * THREADS} batches per run, median of {args.repeats} repeats "
            "(ratio taken within each repeat).",
            "",
            "Command: `" + " ".join(["python bench/flush_ratio.py", *sys.argv[1:]]) + "`",
            "",
            *(f"- {k}: {v}" for k, v in machine.items()),
            "",
            "| nodes | code | always (records/s) | interval (records/s) | always / interval | "
            "per repeat |",
            "|---:|---|---:|---:|---:|---|",
            *(
                f"| {n} | {t} | {a:,.0f} | {i:,.0f} | {r:.2f} | "
                f"{', '.join(f'{x:.2f}' for x in rs)} |"
                for n, t, a, i, r, rs in rows
            ),
            "",
            "Target (issue 32): always / interval >= 0.75 on 1 and 3 nodes.",
        ]
        write_section(f"{SECTION[:-1]}, {args.workload})", "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
