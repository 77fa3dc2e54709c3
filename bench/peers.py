"""replog beside NATS JetStream and Redis Streams, measured in the same run (issue 17 item 4).

    bash scripts/install-peers.sh          # nats-server, redis-server, their Python clients
    .venv/bin/python bench/peers.py [--quick] [--repeats N] [--write-docs]

Every system runs on 127.0.0.1 on free ports with its data in a scratch directory, started
and stopped here by pid (bench/peer_replog.py, peer_nats.py, peer_redis.py say how each is
set up and driven). The same workloads for each, 100-byte records, each record individually
addressable (replog offset, JetStream sequence, Redis entry ID):

* `produce_1`: produce on 1 node, batches of 1000 (replog `Client.append` acks=leader; NATS
  `publish_async` with a window of 1000; Redis 1000 `XADD` pipelined per round trip).
* `producer_1`: replog's batching `Producer`, one `send` per record (replog only).
* `consume_1`: read back what `produce_1` wrote, decoded records.
* `produce_3`: produce on 3 nodes, replicated (replog acks=all with 3 replicas; a NATS R3
  stream on a cluster of 3 nats-server; a Redis primary with 2 replicas and `WAIT 2` after
  each pipeline).
* `latency_1_p50/p99`, `latency_3_p50/p99`: single-record produce, one at a time (ms).
* `*_cpu`: CPU of the server processes (utime + stime from /proc/PID/stat, summed over the
  3 processes on 3 nodes) over the workload, per record or per single-record append (us);
  `*_client_cpu`: this process's CPU (the client) per record.

Interleaved: in each repeat every workload runs on replog, NATS and Redis back to back
(which goes first rotates); the median of the repeats is reported. 1-node systems run
first, then the 3-node ones (never both at once). Every loop is bounded in count and in
time (`--phase-timeout`). Prints one JSON line per result (bench/_common.py); a table on
stderr; `--write-docs` rewrites the part of docs/benchmarks.md between
`<!-- peers:begin -->` and `<!-- peers:end -->` (the section is added if absent).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    DOCS_FILE,
    DOCS_TITLE,
    Result,
    bench_tmpdir,
    emit,
    load_average,
    log,
    machine_info,
    process_cpu_s,
    summarize,
)
from peer_common import START_TIMEOUT_S, VALUE_BYTES, Deadline, Target
from peer_replog import ReplogTarget
from replication import percentile

SYSTEMS = ("replog", "nats", "redis")
LABELS = {"replog": "replog", "nats": "NATS", "redis": "Redis"}
SECTION = "## Peers (bench/peers.py)"
BEGIN, END = "<!-- peers:begin -->", "<!-- peers:end -->"


def make_target(system: str, work: Path, nodes: int) -> Target:
    """The target for `system`; the peers' modules import their clients only when asked."""
    work.mkdir(parents=True)
    if system == "replog":
        return ReplogTarget(work, nodes)
    if system == "nats":
        from peer_nats import NatsTarget

        return NatsTarget(work, nodes)
    from peer_redis import RedisTarget

    return RedisTarget(work, nodes)


def version_of(system: str) -> str:
    if system == "replog":
        return f"replog {ReplogTarget.version()}"
    if system == "nats":
        from peer_nats import NatsTarget

        return NatsTarget.version()
    from peer_redis import RedisTarget

    return RedisTarget.version()


@dataclass(frozen=True)
class Counts:
    records: int  # produce_1, consume_1, producer_1
    replicated_records: int  # produce_3
    latency_samples: int
    phase_s: float


Samples = dict[tuple[str, str], list[float]]  # (metric, system) -> one value per repeat


def server_cpu_s(target: Target) -> float:
    return sum(process_cpu_s(pid) for pid in target.pids())


def run_repeat(targets: list[Target], rep: int, counts: Counts, add: Callable[..., None]) -> None:
    """One repeat of the workloads of this size on every target, back to back per workload."""
    nodes = targets[0].nodes
    order = targets[rep % len(targets) :] + targets[: rep % len(targets)]
    stream = f"bench{nodes}n{rep}"
    for t in order:
        t.prepare(stream, Deadline(START_TIMEOUT_S, f"{t.system}: create {stream}"))
    records = counts.records if nodes == 1 else counts.replicated_records

    def measure(metric: str, t: Target, work: Callable[[str, int, Deadline], float]) -> None:
        """`work` moves `records` records: its rate, and the server's and this process's CPU
        per record (this process: the client, and the idle clients of the other systems)."""
        deadline = Deadline(counts.phase_s, f"{t.system} {metric}")
        server, client = server_cpu_s(t), time.process_time()
        took = work(stream, records, deadline)
        add(metric, t, records / took)
        add(f"{metric}_cpu", t, (server_cpu_s(t) - server) / records * 1e6)
        add(f"{metric}_client_cpu", t, (time.process_time() - client) / records * 1e6)

    for t in order:
        measure(f"produce_{nodes}", t, t.produce)
    if nodes == 1:
        for t in order:
            measure("consume_1", t, t.consume)
        for t in order:
            if isinstance(t, ReplogTarget):
                measure("producer_1", t, t.produce_with_producer)
    n = counts.latency_samples
    for t in order:
        before = server_cpu_s(t)  # the 20 unmeasured calls are charged too: (n + 20) appends
        deadline = Deadline(counts.phase_s, f"{t.system} latency_{nodes}")
        samples = sorted(t.latencies_ms(stream, n, deadline))
        add(f"latency_{nodes}_p50", t, percentile(samples, 0.50))
        add(f"latency_{nodes}_p99", t, percentile(samples, 0.99))
        add(f"latency_{nodes}_cpu", t, (server_cpu_s(t) - before) / (n + 20) * 1e6)
    for t in order:
        t.cleanup(stream)


def run_stage(
    nodes: int, systems: list[str], repeats: int, counts: Counts, work: Path, samples: Samples
) -> None:
    def add(metric: str, target: Target, value: float) -> None:
        samples.setdefault((metric, target.system), []).append(value)

    with ExitStack() as stack:
        targets = []
        for system in systems:
            log(f"starting {system}, {nodes} node(s)")
            target = make_target(system, work / f"{system}-{nodes}", nodes)
            stack.callback(target.close)
            targets.append(target)
        for rep in range(repeats):
            run_repeat(targets, rep, counts, add)
            log(
                f"{nodes} node(s), repeat {rep + 1}/{repeats}: "
                + "; ".join(
                    f"{t.system} produce {samples[(f'produce_{nodes}', t.system)][-1]:,.0f}/s "
                    f"p50 {samples[(f'latency_{nodes}_p50', t.system)][-1]:.3f} ms"
                    for t in targets
                )
            )


# -- the table -------------------------------------------------------------------------------

# (label, metric, unit); a metric missing for a system (producer_1 but for replog) is blank.
ROWS = [
    ("produce, 1 node, batches of 1000", "produce_1", "records/s"),
    ("produce, 1 node, replog's batching `Producer`", "producer_1", "records/s"),
    ("consume, decoded records", "consume_1", "records/s"),
    ("produce, 3 nodes replicated (acks=all / R3 / WAIT 2)", "produce_3", "records/s"),
    ("single-record produce, 1 node: p50", "latency_1_p50", "ms"),
    ("single-record produce, 1 node: p99", "latency_1_p99", "ms"),
    ("single-record produce, 3 nodes: p50", "latency_3_p50", "ms"),
    ("single-record produce, 3 nodes: p99", "latency_3_p99", "ms"),
    ("server CPU per record: produce, 1 node", "produce_1_cpu", "us/record"),
    ("server CPU per record: `Producer`, 1 node", "producer_1_cpu", "us/record"),
    ("server CPU per record: consume", "consume_1_cpu", "us/record"),
    ("server CPU per record: produce, 3 nodes (3 processes)", "produce_3_cpu", "us/record"),
    ("server CPU per single-record append, 1 node", "latency_1_cpu", "us/append"),
    ("server CPU per single-record append, 3 nodes (3 processes)", "latency_3_cpu", "us/append"),
    ("client CPU per record: produce, 1 node", "produce_1_client_cpu", "us/record"),
    ("client CPU per record: `Producer`, 1 node", "producer_1_client_cpu", "us/record"),
    ("client CPU per record: consume", "consume_1_client_cpu", "us/record"),
    ("client CPU per record: produce, 3 nodes", "produce_3_client_cpu", "us/record"),
]


def fmt(value: float, unit: str) -> str:
    if unit == "records/s":
        return f"{value:,.0f}"
    if unit == "ms":
        return f"{value:.3f}"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"  # CPU in microseconds


def cell(values: list[float] | None, unit: str) -> str:
    if not values:
        return ""
    s = summarize(values)
    if s.runs == 1:
        return fmt(s.median, unit)
    return f"{fmt(s.median, unit)} ({fmt(s.low, unit)}-{fmt(s.high, unit)})"


def table(samples: Samples, systems: list[str]) -> list[str]:
    peers = [s for s in systems if s != "replog"]
    labels = [LABELS[s] for s in systems]
    head = ["bench", "unit", *labels, *[f"replog / {LABELS[p]}" for p in peers]]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for label, metric, unit in ROWS:
        got = {s: samples.get((metric, LABELS[s])) for s in systems}
        if not any(got.values()):
            continue
        ratios = []
        for p in peers:
            mine, theirs = got.get("replog"), got.get(p)
            ok = mine and theirs and summarize(theirs).median > 0
            ratio = summarize(mine).median / summarize(theirs).median if ok else None  # type: ignore[arg-type]
            ratios.append("" if ratio is None else f"{ratio:.2f}")
        cells = [cell(got[s], unit) for s in systems]
        lines.append("| " + " | ".join([label, unit, *cells, *ratios]) + " |")
    return lines


def targets_met(samples: Samples) -> list[str]:
    """Issue 17's same-run latency target: replog's single-record p50 <= NATS's."""
    out = []
    for nodes in (1, 3):
        mine = samples.get((f"latency_{nodes}_p50", "replog"))
        nats = samples.get((f"latency_{nodes}_p50", "NATS"))
        if mine and nats:
            m, n = summarize(mine).median, summarize(nats).median
            verdict = "PASS" if m <= n else "MISS"
            out.append(
                f"- single-record produce p50 <= NATS's, {nodes} node(s): {verdict} "
                f"({m:.3f} ms against {n:.3f} ms, {m / n:.2f}x)"
            )
    return out


# -- docs/benchmarks.md ----------------------------------------------------------------------


def replace_marked(text: str, body: str) -> str:
    """`text` with what lies between the markers replaced by `body` (section added if absent)."""
    block = f"{BEGIN}\n{body.strip()}\n{END}"
    start, end = text.find(BEGIN), text.find(END)
    if start != -1 and end > start:
        return text[:start] + block + text[end + len(END) :]
    base = text.rstrip("\n") if text.strip() else DOCS_TITLE.rstrip("\n")
    return f"{base}\n\n{SECTION}\n\n{block}\n"


def write_docs(body: str, path: Path) -> None:
    old = path.read_text(encoding="utf-8") if path.exists() else ""  # read right before writing
    tmp = path.with_name(path.name + ".peers.tmp")
    tmp.write_text(replace_marked(old, body), encoding="utf-8")
    os.replace(tmp, path)


def ram() -> str:
    with open("/proc/meminfo", encoding="ascii") as f:
        kib = int(f.readline().split()[1])
    return f"{kib / 2**20:.1f} GiB"


def docs_body(
    samples: Samples, systems: list[str], info: dict[str, str], command: str, counts: Counts
) -> str:
    lines = [
        "The same workloads on replog, NATS JetStream and Redis Streams in one run, "
        "interleaved (in each repeat every workload runs on each system back to back); "
        f"medians of {info['repeats']} repeat(s), (min-max) after each. Each system and its "
        "Python client on this one machine, on 127.0.0.1; 100-byte records, each addressable "
        "(offset, stream sequence, entry ID). What each workload does: the docstrings of "
        "bench/peers.py and bench/peer_*.py.",
        "",
        "Command:",
        "",
        "```sh",
        "bash scripts/install-peers.sh",
        command,
        "```",
        "",
        f"- machine: {info['cpu']}, {info['cores']} cores, {info['ram']} RAM, {info['kernel']}, "
        f"{info['python']}; data dir: {info['data dir filesystem']}",
        f"- load average (1/5/15 min): at start {info['load average (1/5/15 min) at start']}, "
        f"at end {info['load at end']}; commit {info['commit']}",
        *[f"- {version_of(s)}" for s in systems],
        f"- counts: {counts.records:,} records for produce, consume and `Producer` on 1 node; "
        f"{counts.replicated_records:,} for produce on 3 nodes; {counts.latency_samples:,} "
        "single-record produces per latency run",
        "",
        *table(samples, systems),
        "",
        "Ratios are replog's median over the peer's: above 1 is better for records/s, "
        "worse for ms and CPU.",
        "",
        *targets_met(samples),
        "",
        "Notes:",
        "",
        "- This machine is shared: other engineers' tests ran during the run (see the load "
        "average), and the client and the servers share its 2 cores. Compare systems within "
        "the run (the ratios), not across runs; ranges show the noise.",
        "- Every system is measured through its own Python client, so a rate is what a Python "
        "user gets, and the client is often the limit: compare the client CPU per record with "
        "the time per record (1 / rate). nats-py does Python work for every message (a future "
        "per asynchronous publish, a callback per delivered message); redis-py builds and "
        "parses a command per record; replog's client sends a batch as one message.",
        "- Durability is alike: replog `--flush interval` (fsync every second), Redis "
        "`appendonly yes` + `appendfsync everysec`, NATS JetStream file storage with its "
        "default (written to the OS at once, fsynced on its own schedule: 2.9 has no setting "
        "for it). All of it on one disk, the 3-node setups included.",
        "- Server CPU counts only the servers' processes (all three on 3 nodes); client CPU is "
        "the harness's own process (the client under test, plus the other systems' idle "
        "clients). /proc counts in clock ticks (10 ms): small runs round to 0.",
        "- replog runs with its defaults otherwise, the background scrubber included (it "
        "re-reads segments to verify checksums, up to 8 MiB/s; its CPU counts in replog's "
        "server CPU). replog's topics are kept between repeats, the peers' streams deleted "
        "(deleting a topic under the scrubber once ended the server, a bug this harness found; "
        "fixed in 51351b1: the scrubber ends that partition's pass).",
        f"- {VALUE_BYTES}-byte values; Redis stores each as one field of an entry.",
    ]
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat, small counts")
    parser.add_argument("--repeats", type=int, default=None, help="default 5 (--quick: 1)")
    parser.add_argument("--records", type=int, default=None, help="1 node; default 1,000,000")
    parser.add_argument("--replicated-records", type=int, default=None, help="default 200,000")
    parser.add_argument("--latency-samples", type=int, default=None, help="default 2000")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="a subset of the default")
    parser.add_argument("--nodes", default="1,3", help="the sizes to run: 1, 3 or both")
    parser.add_argument("--phase-timeout", type=float, default=300.0, help="seconds per run")
    parser.add_argument("--dir", type=Path, default=None, help="parent of the scratch dir")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--docs", type=Path, default=DOCS_FILE, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    sizes = sorted({int(n) for n in args.nodes.split(",")})
    if not systems or set(systems) - set(SYSTEMS) or not set(sizes) <= {1, 3}:
        parser.error(f"--systems: a subset of {','.join(SYSTEMS)}; --nodes: 1, 3 or 1,3")
    systems = [s for s in SYSTEMS if s in systems]  # replog first: the ratios' numerator
    repeats = args.repeats or (1 if args.quick else 5)
    counts = Counts(
        records=args.records or (20_000 if args.quick else 1_000_000),
        replicated_records=args.replicated_records or (10_000 if args.quick else 200_000),
        latency_samples=args.latency_samples or (200 if args.quick else 2000),
        phase_s=args.phase_timeout,
    )
    if min(counts.records, counts.replicated_records) < 1000 or counts.latency_samples < 1:
        parser.error("at least 1000 records (one batch) and one latency sample")
    samples: Samples = {}
    with bench_tmpdir(args.dir, prefix="bench-peers-") as work:
        info = machine_info(work)
        started = time.monotonic()
        for nodes in sizes:
            run_stage(nodes, systems, repeats, counts, work, samples)
        info |= {"ram": ram(), "load at end": load_average(), "repeats": str(repeats)}
    log(f"done in {time.monotonic() - started:.0f} s")
    for (metric, system), values in sorted(samples.items()):
        unit = next(u for _, m, u in ROWS if m == metric)
        emit(Result(f"{metric}_{system}", round(summarize(values).median, 4), unit))
    for line in [*table(samples, systems), "", *targets_met(samples)]:
        log(line)
    if args.write_docs:
        given = argv if argv is not None else sys.argv[1:]
        command = ".venv/bin/python bench/peers.py " + shlex.join(given)
        write_docs(docs_body(samples, systems, info, command.strip(), counts), args.docs)
        log(f"wrote the peers section of {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
