"""Where a server's produce CPU goes (issue 17 item 2): `python bench/profile_produce.py`.

Starts one `replog serve` (flush=never, metrics off) on 127.0.0.1, and drives it with the
default idempotent client (`Producer.send_batch`: batches over AppendStream, up to 5 in
flight), `--records` records of 100 bytes in batches of 1000, acks=leader, to one raw or
envelope topic (`--format`). Two phases, each a fixed record count:

1. unprofiled, `--repeats` times: records/s and the server's CPU per record (user +
   system, /proc/PID/stat), medians;
2. once, the same load with py-spy sampling the server (`--rate` per second, `--format raw`,
   `--gil`: only the thread holding the GIL, i.e. Python on a CPU; non-blocking: the
   numbers of this phase include py-spy's load and are not reported).

The py-spy samples are aggregated by function: `self` (samples whose innermost frame is the
function) and `total` (samples with the function anywhere on the stack, counted once per
sample), each as a share of all the process's Python samples and as us/record (the share of
phase 1's server CPU per record). CPU that py-spy cannot see (gRPC's C-core threads, the
kernel) is the gap between phase 1's CPU and what the samples account for; it is printed
as its own row.

Before/after: `--tree before=/work/wt-a --tree after=/work/main` starts one server from
each source tree (`PYTHONPATH=<tree>`), the same client (this checkout's) driving both, the
trees alternating within each repeat (A/B, then B/A); each tree gets its own table.

Output: one JSON line per result on stdout (see `_common.py`); the table on stderr, or in
Markdown with `--markdown FILE`. Bounded: a fixed record count per phase, a deadline on
each future, py-spy stopped by SIGINT.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from _common import Result, bench_tmpdir, emit, log, machine_info
from e2e import BATCH_RECORDS, VALUE_BYTES, Proc

from replog.client import Client, RetryPolicy

PY_SPY = str(Path(sys.executable).with_name("py-spy"))
PY_SPY_ATTACH_S = 1.0
FUTURE_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class Row:
    function: str
    self_share: float  # of all Python samples
    total_share: float


def produce(client: Client, topic: str, records: int) -> float:
    """Records/s of `records` records sent as batches of BATCH_RECORDS (one partition)."""
    values = [os.urandom(VALUE_BYTES) for _ in range(BATCH_RECORDS)]
    producer = client.producer(topic, acks="leader", partitions=1)
    try:
        started = time.perf_counter()
        futures = [producer.send_batch(values, 0) for _ in range(records // BATCH_RECORDS)]
        for fut in futures:
            fut.result(FUTURE_TIMEOUT_S)
        return records / (time.perf_counter() - started)
    finally:
        producer.close()


def frame_function(frame: str) -> str:
    """`name (path/file.py:line)` -> `file.py:name` (py-spy's raw frame, line dropped)."""
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0].rstrip(")")
    return f"{path.rsplit('/', 1)[-1]}:{name}" if path else name


def aggregate(raw: str) -> tuple[int, Counter[str], Counter[str]]:
    """(samples, self counts, total counts) of py-spy's raw output (`stack count` lines,
    frames outermost first, separated by `;`)."""
    samples = 0
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        functions = [frame_function(f) for f in stack.split(";")]
        samples += count
        own[functions[-1]] += count
        for fn in set(functions):
            total[fn] += count
    return samples, own, total


def profile(server: Proc, client: Client, topic: str, records: int, rate: int, out: Path) -> str:
    cmd = [PY_SPY, "record", "--pid", str(server.proc.pid), "--rate", str(rate)]
    cmd += ["--format", "raw", "--nonblocking", "--gil", "--output", str(out)]
    spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(PY_SPY_ATTACH_S)
        produce(client, topic, records)
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        spy.wait(60)
    return out.read_text()


def server_command(tree: Path | None, data: Path, ready: Path) -> list[str]:
    python = [sys.executable]
    if tree is not None:  # this tree's replog first on the path (-P: not the cwd's)
        python = ["env", f"PYTHONPATH={tree}", "PYTHONDONTWRITEBYTECODE=1", sys.executable, "-P"]
    return [
        *python, "-m", "replog", "serve", "--data-dir", str(data),
        "--listen", "127.0.0.1:0", "--metrics-listen", "", "--flush", "never",
        "--ready-file", str(ready), "--log-level", "WARNING",
    ]  # fmt: skip


def table(name: str, rate: float, cpu_us: float, raw: str, args: argparse.Namespace) -> list[str]:
    samples, own, total = aggregate(raw)
    if samples == 0:
        raise SystemExit("py-spy took no samples")
    rows = [Row(fn, own[fn] / samples, total[fn] / samples) for fn in own]
    rows.sort(key=lambda r: r.self_share, reverse=True)
    python_us = samples / args.rate / args.records * 1e6  # the profiled phase's sampled CPU
    lines = [
        f"{name}: {rate:,.0f} records/s, server CPU {cpu_us:.3f} us/record (median of "
        f"{args.repeats} unprofiled runs). py-spy: {samples:,} samples at {args.rate}/s "
        f"(~{python_us:.3f} us/record of Python holding the GIL in the profiled run).",
        "",
        "| function | self % | self us/record | total % |",
        "|---|---:|---:|---:|",
    ]
    for row in rows[: args.top]:
        emit(Result(f"{name}:self:{row.function}", round(row.self_share * 100, 2), "%"))
        lines.append(
            f"| `{row.function}` | {row.self_share * 100:.1f} | "
            f"{row.self_share * cpu_us:.3f} | {row.total_share * 100:.1f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--format", choices=["raw", "envelope"], default="raw")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH (repeatable)")
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--dir", type=Path, default=None, help="parent of the scratch data dir")
    args = parser.parse_args(argv)
    trees: dict[str, Path | None] = {"checkout": None}
    if args.tree:
        trees = {n: Path(p).resolve() for n, _, p in (t.partition("=") for t in args.tree)}
    rates: dict[str, list[float]] = {name: [] for name in trees}
    cpus: dict[str, list[float]] = {name: [] for name in trees}
    raws: dict[str, str] = {}
    with bench_tmpdir(args.dir, prefix="bench-profile-") as tmp:
        info = machine_info(tmp)
        servers: dict[str, Proc] = {}
        clients: dict[str, Client] = {}
        try:
            for name, tree in trees.items():
                cmd = server_command(tree, tmp / f"data-{name}", tmp / f"ready-{name}")
                servers[name] = Proc(cmd, tmp / f"ready-{name}")
                clients[name] = Client(servers[name].address, retry=RetryPolicy(attempts_max=3))
                clients[name].create_topic("warm", 1, format=args.format)
                produce(clients[name], "warm", min(args.records, 200_000))
            names = list(trees)
            for rep in range(args.repeats):
                for name in names if rep % 2 == 0 else names[::-1]:
                    topic = f"plain-{rep}"
                    clients[name].create_topic(topic, 1, format=args.format)
                    cpu = servers[name].cpu_s()
                    rates[name].append(produce(clients[name], topic, args.records))
                    cpus[name].append((servers[name].cpu_s() - cpu) / args.records * 1e6)
                    clients[name].delete_topic(topic)
                    log(f"{name}: {rates[name][-1]:,.0f} records/s, {cpus[name][-1]:.3f} us/rec")
            for name in names:
                clients[name].create_topic("profiled", 1, format=args.format)
                out = tmp / f"spy-{name}"
                raws[name] = profile(servers[name], clients[name], "profiled", args.records,
                                     args.rate, out)  # fmt: skip
        finally:
            for client in clients.values():
                client.close()
            for server in servers.values():
                server.stop()
    lines = [
        f"{args.records:,} records of {VALUE_BYTES} bytes per run, batches of {BATCH_RECORDS} "
        "over AppendStream (the idempotent `Producer.send_batch`, up to 5 in flight), "
        f"acks=leader, flush=never, 1 node, one {args.format} partition.",
        "",
    ]
    for name in trees:
        rate, cpu_us = statistics.median(rates[name]), statistics.median(cpus[name])
        emit(Result(f"{name}:produce", round(rate), "records/s"))
        emit(Result(f"{name}:produce_server_cpu_us_per_record", round(cpu_us, 3), "us/record"))
        lines += [*table(name, rate, cpu_us, raws[name], args), ""]
    lines += ["Machine: " + "; ".join(f"{k}: {v}" for k, v in info.items()) + "."]
    text = "\n".join(lines)
    log(text)
    if args.markdown is not None:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
