"""Soak: a cluster with many partitions under steady load stays flat (issue 27).

    python bench/soak.py [--nodes 3] [--topics 500] [--topic-partitions 10]
                         [--duration-s 1800] [--rate 2000] [--batch 10]

Starts `--nodes` `replog serve` processes on 127.0.0.1 (replication factor = nodes),
creates `--topics` topics of `--topic-partitions` partitions (raw format) from
`--creators` concurrent clients, each with a short retention (`segment.ms`, `retention.ms`:
segments roll and are deleted all through the run), then for `--duration-s` seconds drives

* a bounded producer load: `--producers` threads, each owning a slice of ALL the
  partitions and appending acks=all batches of `--batch` records round-robin over its
  slice, paced so that the total is `--rate` records/s (every partition receives records
  again and again through the run);
* a consumer that follows `--sample` partitions picked at random (fetch from its position;
  a position deleted by retention restarts at the log start).

Every `--sample-every-s` seconds it records each node's RSS, open descriptors
(/proc/PID/fd), bytes of its data dir on disk (allocated blocks) and CPU, plus the load's
acked records/s, append errors and consumed records/s. At the end it fits the slope (per
minute) of RSS, fds and disk over the second half of the samples per node, and calls each
flat when the fitted growth is within the stated tolerance; then checks that every record
acknowledged on the sampled partitions is readable, or was deleted by retention (its batch
ends before the log start offset). One JSON line per figure on stdout; the run replaces the
"Soak (bench/soak.py)" section of docs/benchmarks.md (`--no-docs`: not).

Bounded: creation stops at `--create-limit-s`, the load at `--duration-s`, every call has a
deadline, and only the processes this script started are ended, by pid.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    Result,
    bench_tmpdir,
    emit,
    load_average,
    log,
    machine_info,
    process_cpu_s,
    write_section,
)
from replog import frames
from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import OffsetOutOfRangeError, ReplogError

HEADING = "## Soak (bench/soak.py)"
PATIENT = RetryPolicy(attempts_max=10_000, backoff_max_ms=500, deadline_ms=60_000)
LOAD_RETRY = RetryPolicy(deadline_ms=30_000)

Partition = tuple[str, int]


# -- measurements ------------------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def disk_mib(path: Path) -> float:
    """Bytes allocated on disk under `path` (st_blocks, as `du`), in MiB."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # deleted by retention meanwhile
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total / (1 << 20)


@dataclass
class Sample:
    minute: float
    rss_mib: list[float]
    fds: list[int]
    disk_mib: list[float]
    cpu_pct: list[float]
    acked_per_s: float
    appends_per_s: float
    errors: int
    consumed_per_s: float
    append_p99_ms: float
    bench_cpu_pct: float  # this script's own CPU (the load and the samples)
    load: str


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over xs (0 with fewer than 2 distinct xs)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return 0.0 if den == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den


# -- the load ----------------------------------------------------------------------------------


@dataclass
class Load:
    """Counters shared by the load threads (under `lock`) and what was acknowledged on the
    sampled partitions: per partition, (base offset, last offset, values) per batch."""

    sample: set[Partition]
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    acked: int = 0
    appends: int = 0
    errors: int = 0
    consumed: int = 0
    consumer_resets: int = 0
    consumer_errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    first_errors: list[str] = field(default_factory=list)
    batches: dict[Partition, list[tuple[int, int, list[bytes]]]] = field(default_factory=dict)

    def error(self, where: str, exc: BaseException) -> None:
        with self.lock:
            self.errors += 1
            if len(self.first_errors) < 10:
                self.first_errors.append(f"{where}: {type(exc).__name__}: {str(exc)[:160]}")

    def take(self) -> tuple[int, int, int, int, list[float]]:
        """(acked, appends, errors, consumed) so far and the latencies since the last take."""
        with self.lock:
            lat, self.latencies_ms = self.latencies_ms, []
            return self.acked, self.appends, self.errors, self.consumed, lat


def produce(
    bootstrap: str, mine: list[Partition], load: Load, rate: float, args: argparse.Namespace
) -> None:
    """Append batches round-robin over `mine` at `rate` records/s until `load.stop`."""
    interval = args.batch / rate
    pad = b"x" * max(0, args.record_bytes - 40)
    n = 0
    with Client(bootstrap, retry=LOAD_RETRY, timeout_s=30) as client:
        due = time.monotonic()
        while not load.stop.is_set():
            for topic, p in mine:
                due += interval
                wait = due - time.monotonic()
                if wait > 0:
                    if load.stop.wait(wait):
                        return
                elif wait < -1.0:
                    due = time.monotonic()  # behind by more than 1 s: no catching up in bursts
                values = [f"{topic}/{p}/{n + i}/".encode() + pad for i in range(args.batch)]
                n += args.batch
                start = time.perf_counter()
                try:
                    res = client.append(topic, p, values, acks="all")
                except ReplogError as exc:
                    load.error(f"append {topic}/{p}", exc)
                    continue
                took = (time.perf_counter() - start) * 1000
                with load.lock:
                    load.acked += len(values)
                    load.appends += 1
                    load.latencies_ms.append(took)
                    if (topic, p) in load.sample:
                        load.batches.setdefault((topic, p), []).append(
                            (res.base_offset, res.last_offset, values)
                        )
                if load.stop.is_set():
                    return


def consume(bootstrap: str, sample: list[Partition], load: Load) -> None:
    """Follow the sampled partitions from offset 0 until `load.stop`."""
    positions = dict.fromkeys(sample, 0)
    with Client(bootstrap, retry=LOAD_RETRY, timeout_s=30) as client:
        while not load.stop.is_set():
            got_any = False
            for topic, p in sample:
                try:
                    raw = client.fetch_raw(topic, p, positions[(topic, p)], max_bytes=1 << 20)
                except OffsetOutOfRangeError:
                    start = client.list_offsets(topic, [p])[0].earliest
                    positions[(topic, p)] = start
                    with load.lock:
                        load.consumer_resets += 1
                    continue
                except ReplogError:
                    with load.lock:
                        load.consumer_errors += 1
                    continue
                count = len(frames.decode_data(raw.frames).values) if raw.frames else 0
                if raw.next_offset > positions[(topic, p)]:
                    positions[(topic, p)] = raw.next_offset
                got_any = got_any or count > 0
                with load.lock:
                    load.consumed += count
            if not got_any:
                load.stop.wait(0.5)


# -- phases ------------------------------------------------------------------------------------


@dataclass
class Creation:
    topics: list[str] = field(default_factory=list)
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    per_topic_ms: list[float] = field(default_factory=list)


def create_topics(cluster: DevCluster, args: argparse.Namespace) -> Creation:
    """Create the topics from `--creators` clients; stop a client at its first failure or
    at the time limit (what was created stays: the soak runs on it)."""
    out = Creation()
    names = [f"soak{i:04d}" for i in range(args.topics)]
    configs = {
        "retention.ms": str(args.retention_ms),
        "segment.ms": str(args.segment_ms),
        "segment.bytes": str(args.segment_bytes),
    }
    deadline = time.monotonic() + args.create_limit_s
    lock = threading.Lock()
    began = time.monotonic()

    def worker(mine: list[str]) -> None:
        with Client(cluster.bootstrap, retry=PATIENT, timeout_s=60) as client:
            for name in mine:
                if time.monotonic() > deadline:
                    with lock:
                        out.errors.append(f"time limit (--create-limit-s) before {name}")
                    return
                start = time.monotonic()
                try:
                    client.create_topic(
                        name, args.topic_partitions, args.nodes, format="raw", configs=configs
                    )
                except ReplogError as exc:
                    with lock:
                        out.errors.append(f"{name}: {type(exc).__name__}: {str(exc)[:200]}")
                    return
                with lock:
                    out.topics.append(name)
                    out.per_topic_ms.append((time.monotonic() - start) * 1000)
                    if len(out.topics) % 50 == 0:
                        log(f"created {len(out.topics)} topics in {time.monotonic() - began:.0f} s")

    threads = [
        threading.Thread(target=worker, args=(names[w :: args.creators],), daemon=True)
        for w in range(args.creators)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1.0, deadline - time.monotonic() + 120))
    out.seconds = time.monotonic() - began
    out.topics.sort()
    return out


def take_sample(cluster: DevCluster, load: Load, began: float, last: dict[str, object]) -> Sample:
    """One sample; `last` carries the counters and CPU of the previous one."""
    now = time.monotonic()
    pids = []
    for node in cluster.members.values():
        assert node.proc is not None and node.proc.poll() is None, f"node {node.node_id} died"
        pids.append(node.proc.pid)
    cpu = [process_cpu_s(p) for p in pids]
    acked, appends, errors, consumed, lat = load.take()
    dt = now - float(last["t"])  # type: ignore[arg-type]
    prev_cpu: list[float] = last["cpu"]  # type: ignore[assignment]
    lat.sort()
    sample = Sample(
        minute=round((now - began) / 60, 2),
        rss_mib=[round(rss_mib(p), 1) for p in pids],
        fds=[open_fds(p) for p in pids],
        disk_mib=[round(disk_mib(n.data_dir), 1) for n in cluster.members.values()],
        cpu_pct=[round(100 * (c - b) / dt, 1) for c, b in zip(cpu, prev_cpu, strict=True)],
        acked_per_s=round((acked - int(last["acked"])) / dt, 1),  # type: ignore[call-overload]
        appends_per_s=round((appends - int(last["appends"])) / dt, 1),  # type: ignore[call-overload]
        errors=errors - int(last["errors"]),  # type: ignore[call-overload]
        consumed_per_s=round((consumed - int(last["consumed"])) / dt, 1),  # type: ignore[call-overload]
        append_p99_ms=round(lat[int(0.99 * (len(lat) - 1))], 1) if lat else 0.0,
        bench_cpu_pct=round(100 * (process_cpu_s(os.getpid()) - float(last["own"])) / dt, 1),  # type: ignore[arg-type]
        load=load_average(),
    )
    last.update(
        t=now,
        cpu=cpu,
        own=process_cpu_s(os.getpid()),
        acked=acked,
        appends=appends,
        errors=errors,
        consumed=consumed,
    )
    return sample


@dataclass
class Verdict:
    name: str
    unit: str
    slopes: list[float]  # per node, per minute, second half
    levels: list[float]  # per node, mean over the second half
    tolerance: float  # per minute
    flat: bool


def verdicts(samples: list[Sample], args: argparse.Namespace) -> list[Verdict]:
    half = samples[len(samples) // 2 :] if len(samples) >= 4 else samples
    xs = [s.minute for s in half]
    out = []
    for name, unit, pick, tol in (
        ("RSS", "MiB", lambda s: s.rss_mib, lambda lvl: args.rss_tolerance_mib_per_min),
        ("open fds", "fds", lambda s: s.fds, lambda lvl: args.fds_tolerance_per_min),
        ("disk", "MiB", lambda s: s.disk_mib, lambda lvl: lvl * args.disk_tolerance_pct / 100),
    ):
        slopes, levels = [], []
        for i in range(args.nodes):
            ys = [float(pick(s)[i]) for s in half]
            slopes.append(slope(xs, ys))
            levels.append(sum(ys) / len(ys))
        tolerance = max(tol(lvl) for lvl in levels) if name == "disk" else tol(0.0)
        flat = all(abs(sl) <= (tol(lvl)) for sl, lvl in zip(slopes, levels, strict=True))
        out.append(Verdict(name, unit, slopes, levels, tolerance, flat))
    return out


def verify(bootstrap: str, load: Load) -> tuple[bool, str]:
    """Every acknowledged batch on the sampled partitions is readable, or ends before the
    log start offset (deleted by retention)."""
    present = gone = missing = batches = 0
    first_missing = ""
    with Client(bootstrap, retry=PATIENT, timeout_s=60) as client:
        for (topic, p), acked in sorted(load.batches.items()):
            start = client.list_offsets(topic, [p])[0].earliest
            end = client.list_offsets(topic, [p])[0].latest
            values: set[bytes] = set()
            pos = start
            while pos < end:
                raw = client.fetch_raw(topic, p, pos, max_bytes=4 << 20)
                values.update(frames.decode_data(raw.frames).values)
                if raw.next_offset <= pos:
                    break
                pos = raw.next_offset
            for _base, last, vals in acked:
                batches += 1
                if last < start:
                    gone += len(vals)
                    continue
                for v in vals:
                    if v in values:
                        present += 1
                    else:
                        missing += 1
                        first_missing = first_missing or f"{topic}/{p}: {v[:40]!r}"
    ok = missing == 0 and batches > 0
    detail = (
        f"{len(load.batches)} partitions, {batches:,} acknowledged batches: {present:,} records "
        f"read back, {gone:,} deleted by retention, {missing:,} missing"
    )
    return ok, detail + (f" (first: {first_missing})" if first_missing else "")


# -- the run -----------------------------------------------------------------------------------


@dataclass
class Run:
    creation: Creation = field(default_factory=Creation)
    samples: list[Sample] = field(default_factory=list)
    load: Load | None = None
    check: str = "not run"
    check_ok: bool = False
    stopped: str = ""
    load_s: float = 0.0


def soak(cluster: DevCluster, args: argparse.Namespace, run: Run) -> None:
    run.creation = create_topics(cluster, args)
    created = run.creation.topics
    log(f"created {len(created)} topics in {run.creation.seconds:.0f} s; {run.creation.errors[:3]}")
    assert created, f"no topic created: {run.creation.errors[:3]}"
    partitions = [(t, p) for t in created for p in range(args.topic_partitions)]
    rng = random.Random(27)
    sample = rng.sample(partitions, min(args.sample, len(partitions)))
    load = run.load = Load(set(sample))
    rng.shuffle(partitions)
    workers = [
        threading.Thread(
            target=produce,
            args=(
                cluster.bootstrap,
                partitions[i :: args.producers],
                load,
                args.rate / args.producers,
                args,
            ),
            daemon=True,
        )
        for i in range(args.producers)
    ]
    workers.append(
        threading.Thread(target=consume, args=(cluster.bootstrap, sample, load), daemon=True)
    )
    began = time.monotonic()
    pids = [n.proc.pid for n in cluster.members.values() if n.proc is not None]
    last: dict[str, object] = dict(
        t=began,
        cpu=[process_cpu_s(p) for p in pids],
        own=process_cpu_s(os.getpid()),
        acked=0,
        appends=0,
        errors=0,
        consumed=0,
    )
    for w in workers:
        w.start()
    try:
        while time.monotonic() - began < args.duration_s:
            time.sleep(
                min(args.sample_every_s, max(0.0, began + args.duration_s - time.monotonic()))
            )
            s = take_sample(cluster, load, began, last)
            run.samples.append(s)
            log(f"sample {json.dumps(asdict(s))}")
    finally:
        load.stop.set()
        joined_by = time.monotonic() + 90  # each thread ends within one call's deadline
        for w in workers:
            w.join(max(0.1, joined_by - time.monotonic()))
        run.load_s = time.monotonic() - began
    run.check_ok, run.check = verify(cluster.bootstrap, load)
    log(f"check: {run.check}")


# -- output ------------------------------------------------------------------------------------


def _fmt(values: Sequence[float]) -> str:
    return " / ".join(f"{v:,}" if isinstance(v, int) else f"{v:,.1f}" for v in values)


def command(args: argparse.Namespace) -> str:
    return (
        f"python bench/soak.py --nodes {args.nodes} --topics {args.topics} "
        f"--topic-partitions {args.topic_partitions} --duration-s {args.duration_s:.0f} "
        f"--rate {args.rate:.0f} --batch {args.batch} --creators {args.creators}"
        + "".join(f' --node-arg "{a}"' for a in args.node_arg)
    )


def section(run: Run, args: argparse.Namespace, machine: dict[str, str]) -> str:
    c = run.creation
    parts = len(c.topics) * args.topic_partitions
    per = sorted(c.per_topic_ms)
    lines = [
        f"Whether a cluster with many partitions under steady load stays flat (issue 27). "
        f"Command: `{command(args)}`.",
        "",
        "Machine: " + "; ".join(f"{k}: {v}" for k, v in machine.items()) + ".",
        "",
        f"{args.nodes} nodes on 127.0.0.1 (replication factor {args.nodes}; node defaults but "
        f"`--retention-check-interval-ms {args.retention_check_interval_ms}`"
        + "".join(f", `{a}`" for a in args.node_arg)
        + "). "
        f"{len(c.topics):,} topics x {args.topic_partitions} partitions = **{parts:,} "
        f"partitions** created from {args.creators} clients in {c.seconds:.0f} s (per topic: "
        + (f"median {per[len(per) // 2]:.0f} ms, max {per[-1]:.0f} ms" if per else "none")
        + f"), each with `segment.ms={args.segment_ms}`, `retention.ms={args.retention_ms}`, "
        f"`segment.bytes={args.segment_bytes}`: segments roll and are deleted all through "
        f"the run. Load for {run.load_s / 60:.1f} min: {args.producers} producer threads, "
        f"acks=all batches of {args.batch} records of {args.record_bytes} bytes round-robin "
        f"over every partition, paced to {args.rate:,.0f} records/s in all; one consumer "
        f"following {len(run.load.sample) if run.load else 0} sampled partitions. "
        f"A sample every {args.sample_every_s:.0f} s: per node (node 1 / 2 / 3) RSS, open "
        "fds (/proc/PID/fd), data dir on disk (allocated blocks), CPU % of a core since the "
        "sample before; the load's acked records/s, append errors, consumed records/s, p99 "
        "append latency. One run (a 30-minute soak is its own sample series).",
    ]
    if c.errors:
        lines += ["", f"Creation stopped early: {'; '.join(c.errors[:3])}"]
    if run.stopped:
        lines += ["", f"**The run stopped early**: {run.stopped}"]
    lines += [
        "",
        "| min | RSS MiB | fds | disk MiB | CPU % | acked/s | errors | consumed/s | p99 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    every = max(1, len(run.samples) // 12)
    shown = run.samples[::every]
    if run.samples and shown[-1] is not run.samples[-1]:
        shown.append(run.samples[-1])
    for s in shown:
        lines.append(
            f"| {s.minute:.0f} | {_fmt(s.rss_mib)} | {_fmt(s.fds)} | {_fmt(s.disk_mib)} | "
            f"{_fmt(s.cpu_pct)} | {s.acked_per_s:,.0f} | {s.errors} | {s.consumed_per_s:,.0f} | "
            f"{s.append_p99_ms:.0f} |"
        )
    if every > 1:
        lines += [
            "",
            f"(one sample in {every} shown, and the last; every sample is in the run's stderr)",
        ]
    lines += [
        "",
        "Slopes over the second half of the samples (least squares, per minute, per node) "
        "against the tolerance that counts as flat:",
        "",
        "| what | slope per min (per node) | level (mean) | tolerance per min | flat |",
        "|---|---|---|---|---|",
    ]
    for v in verdicts(run.samples, args) if run.samples else []:
        lines.append(
            f"| {v.name} | {' / '.join(f'{s:+.2f}' for s in v.slopes)} {v.unit} | "
            f"{_fmt([round(x, 1) for x in v.levels])} {v.unit} | {v.tolerance:.2f} {v.unit} | "
            f"{'yes' if v.flat else '**no**'} |"
        )
    total_errors = run.load.errors if run.load else 0
    lines += [
        "",
        f"Tolerances: RSS {args.rss_tolerance_mib_per_min} MiB/min, fds "
        f"{args.fds_tolerance_per_min}/min, disk {args.disk_tolerance_pct} % of its level per "
        "minute (retention keeps a sawtooth of rolled segments).",
        "",
        f"- Append errors in all: {total_errors}"
        + (f" (first: {run.load.first_errors[0]})" if run.load and run.load.first_errors else "")
        + (
            f"; consumer: {run.load.consumer_resets} restarts at the log start (retention), "
            f"{run.load.consumer_errors} errors"
            if run.load
            else ""
        ),
        f"- Check at the end: {'ok' if run.check_ok else 'FAILED'}: {run.check}",
    ]
    lines += ["", args.note] if args.note else []
    return "\n".join(lines) + "\n"


def emit_run(run: Run, args: argparse.Namespace) -> None:
    emit(Result("soak_partitions", len(run.creation.topics) * args.topic_partitions, "partitions"))
    if run.samples:
        emit(
            Result(
                "soak_acked_mean",
                round(sum(s.acked_per_s for s in run.samples) / len(run.samples), 1),
                "records/s",
            )
        )
        for v in verdicts(run.samples, args):
            key = v.name.replace(" ", "_").lower()
            emit(
                Result(
                    f"soak_{key}_slope_max",
                    round(max(v.slopes, key=abs), 3),
                    f"{v.unit}/min",
                    round(v.tolerance, 3),
                )
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--topics", type=int, default=500)
    parser.add_argument("--topic-partitions", type=int, default=10)
    parser.add_argument("--creators", type=int, default=4)
    parser.add_argument("--create-limit-s", type=float, default=1500.0)
    parser.add_argument("--duration-s", type=float, default=1800.0)
    parser.add_argument("--rate", type=float, default=1000.0, help="records/s in all")
    parser.add_argument("--batch", type=int, default=20, help="records per append")
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--sample", type=int, default=20, help="partitions consumed + checked")
    parser.add_argument("--sample-every-s", type=float, default=60.0)
    parser.add_argument("--segment-ms", type=int, default=120_000)
    parser.add_argument("--retention-ms", type=int, default=240_000)
    parser.add_argument("--segment-bytes", type=int, default=1 << 20)
    parser.add_argument("--retention-check-interval-ms", type=int, default=15_000)
    parser.add_argument("--rss-tolerance-mib-per-min", type=float, default=1.0)
    parser.add_argument("--fds-tolerance-per-min", type=float, default=2.0)
    parser.add_argument("--disk-tolerance-pct", type=float, default=1.0)
    parser.add_argument(
        "--node-arg",
        action="append",
        default=[],
        help='a flag for every node, e.g. "--leader-balance-interval-ms 0" (repeatable)',
    )
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--note", default="", help="a sentence for the section's end")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # clean up on SIGTERM too
    run = Run()
    with bench_tmpdir(prefix="soak-") as work:
        machine = machine_info(work)
        extra = ["--retention-check-interval-ms", str(args.retention_check_interval_ms)]
        extra += [a for arg in args.node_arg for a in arg.split(maxsplit=1)]
        cluster = DevCluster(work / "cluster", args.nodes, extra_args=extra)
        try:
            cluster.start()
            soak(cluster, args, run)
        except (ReplogError, RuntimeError, AssertionError, OSError, KeyboardInterrupt) as exc:
            run.stopped = f"{type(exc).__name__}: {str(exc)[:300]}"
            log(f"stopped: {run.stopped}")
            for node in cluster.members.values():
                if node.proc is not None and node.proc.poll() is not None:
                    log(
                        f"node {node.node_id} exited {node.proc.returncode}:\n{node.log_tail(2000)}"
                    )
        finally:
            cluster.kill_all()
        emit_run(run, args)
        if not args.no_docs:
            write_section(HEADING, section(run, args, machine))
    return 0 if run.check_ok and not run.stopped else 1


if __name__ == "__main__":
    sys.exit(main())
