"""Servers from two source trees under the same load, interleaved: is one slower?

    git -C /work/main worktree add --detach /work/wt-a <commit-a>
    git -C /work/main worktree add --detach /work/wt-b <commit-b>
    .venv/bin/python bench/compare_commits.py --tree before=/work/wt-a --tree head=/work/wt-b

The harness process (this script, with whichever `replog` client its own path finds: run it
with `PYTHONPATH=<a tree>` and `-P` to pin that too) drives `replog serve` processes started
from each tree (`env PYTHONPATH=<tree> python -P`, so that neither the working directory nor
the checkout's editable install comes first; checked at start-up: `import replog` must
resolve inside the tree). Only the servers differ: every workload uses the same client
code, non-idempotent (`Client(idempotent=False)`), so that an older server that knows no
producer ids does the same work as a newer one.

Workloads (each runs once per tree per round; the trees alternate A/B, then B/A):

* `produce_leader_1n` / `produce_all_1n`: one node, one partition, `--threads` client
  threads appending batches of 1000 records of 100 bytes with acks=leader / acks=all.
* `consume_1n`: one node, `Consumer.batches()` (StreamFrom, 1 MiB replies) from offset 0
  over what `produce_leader_1n` wrote in the same round.
* `single_1n`: one node, one client thread, `--singles` sequential single-record appends
  with acks=leader: records/s is appends/s, CPU per record is per append (the fixed cost of
  a request, which batches of 1000 spread over their records).
* `produce_all_3n`: three nodes, one partition replicated 3 times, acks=all, as above.

For each workload and tree: records/s and server CPU per record (user + system CPU of the
server processes over the phase, all three on 3 nodes, from /proc/PID/stat, divided by the
records); the medians over the rounds, and B/A as the median of the per-round ratios (paired:
both halves of a round ran back to back) with their min..max. Before the rounds, each
tree's servers sit idle for `--idle-s` seconds: their idle CPU is reported too (timers and
background tasks that a phase's CPU includes).

Like with like: options that only one tree knows and that add background work are turned
off where the tree knows them (`LIKE_WITH_LIKE`, detected from `serve --help`); `--flush`
and metrics-off apply to both. Prints one JSON line per result; `--markdown FILE` writes the
tables for docs/benchmarks.md. Bounded: every phase is a fixed record count with a deadline.

Where a difference goes: `--profile DIR` runs one more round (left out of the numbers) with
py-spy sampling every server (collapsed stacks); `--cprofile DIR` runs the servers under
cProfile for the whole run (much slower; call counts per request are exact, times are not).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Result, bench_tmpdir, emit, load_average, log, machine_info, process_cpu_s
from peer_common import Deadline, ServerProcess, batch_values, free_ports

from replog.client import Client, RetryPolicy
from replog.errors import ReplogError

READY_TIMEOUT_S = 60.0
PHASE_TIMEOUT_S = 300.0
# Background work only newer trees have; off where known, so both do the same work.
LIKE_WITH_LIKE = {"--scrub-bytes-per-s": "0"}
PY_SPY = str(Path(sys.executable).with_name("py-spy"))
PY_SPY_ATTACH_S = 1.0
WORKLOADS = ("produce_leader_1n", "produce_all_1n", "consume_1n", "single_1n", "produce_all_3n")


# -- source trees and their servers ----------------------------------------------------------


@dataclass(frozen=True)
class Tree:
    name: str
    path: Path

    def command(self) -> list[str]:
        """Python with this tree first on its path (-P: not the working directory's)."""
        return ["env", f"PYTHONPATH={self.path}", "PYTHONDONTWRITEBYTECODE=1", sys.executable, "-P"]

    def python(self, *args: str) -> str:
        return subprocess.run(
            [*self.command(), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout

    def check(self) -> str:
        """Asserts that `import replog` resolves inside the tree; returns its commit."""
        where = self.python("-c", "import replog; print(replog.__file__)").strip()
        assert Path(where).resolve().is_relative_to(self.path.resolve()), (self.name, where)
        return subprocess.run(
            ["git", "-C", str(self.path), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    def like_with_like_args(self) -> list[str]:
        return like_with_like_args(self)


@functools.cache
def like_with_like_args(tree: Tree) -> list[str]:
    """`LIKE_WITH_LIKE` options that `tree`'s `replog serve --help` lists."""
    help_text = tree.python("-m", "replog", "serve", "--help")
    return [x for opt, v in LIKE_WITH_LIKE.items() if opt in help_text for x in (opt, v)]


@functools.cache
def refuses_plaintext_clusters(tree: Tree) -> bool:
    """Whether `tree`'s nodes need `--insecure` and a peer listener for a plaintext cluster
    of several nodes (issue 28); older trees share the client listener."""
    return "--insecure" in tree.python("-m", "replog", "serve", "--help")


@dataclass
class Cluster:
    """`nodes` servers of one tree on 127.0.0.1 (nodes=1: a single node, no --peers)."""

    tree: Tree
    nodes: int
    data_dir: Path
    common_args: list[str]
    cprofile: Path | None = None  # a directory: each server runs under cProfile, stats here
    servers: list[ServerProcess] = field(default_factory=list)
    ready_files: list[Path] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)

    def start(self) -> Cluster:
        self.data_dir.mkdir(parents=True)
        ports = free_ports(self.nodes * 2)
        addresses = {i + 1: f"127.0.0.1:{port}" for i, port in enumerate(ports[: self.nodes])}
        listeners = {i + 1: f"127.0.0.1:{port}" for i, port in enumerate(ports[self.nodes :])}
        separate = self.nodes > 1 and refuses_plaintext_clusters(self.tree)
        peers = ",".join(
            f"{i}={a}/{listeners[i]}" if separate else f"{i}={a}" for i, a in addresses.items()
        )
        peers = peers if self.nodes > 1 else ""
        for i, address in addresses.items():
            plaintext = ["--peer-listen", listeners[i], "--insecure"] if separate else []
            ready = self.data_dir / f"node{i}.ready"
            profiled: list[str] = []
            if self.cprofile is not None:  # written when the server exits (SIGTERM)
                out = self.cprofile / f"{self.tree.name}-{self.nodes}n-node{i}.prof"
                profiled = ["-m", "cProfile", "-o", str(out)]
            cmd = [
                *self.tree.command(), *profiled, "-m", "replog", "serve",
                "--node-id", str(i), "--listen", address, "--peers", peers,
                "--data-dir", str(self.data_dir / f"node{i}"), "--ready-file", str(ready),
                "--metrics-listen", "", "--log-level", "WARNING", *plaintext,
                *self.common_args, *self.tree.like_with_like_args(),
            ]  # fmt: skip
            self.servers.append(ServerProcess(cmd, self.data_dir / f"node{i}.log").start())
            self.ready_files.append(ready)
        deadline = Deadline(READY_TIMEOUT_S, f"{self.tree.name}: {self.nodes} node(s) ready")
        for server, ready in zip(self.servers, self.ready_files, strict=True):
            while not ready.exists():
                assert server.proc is not None
                if server.proc.poll() is not None:
                    raise RuntimeError(f"{self.tree.name}: {server.log_tail()}")
                deadline.check()
                time.sleep(0.05)
        self.addresses = list(addresses.values())
        return self

    @property
    def bootstrap(self) -> str:
        return ",".join(self.addresses)

    def cpu_s(self) -> float:
        return sum(process_cpu_s(s.pid) for s in self.servers)

    def check_alive(self) -> None:
        for s in self.servers:
            assert s.proc is not None and s.proc.poll() is None, (self.tree.name, s.log_tail())

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


# -- measurement -----------------------------------------------------------------------------


@dataclass
class Sample:
    rate: float  # records/s
    cpu_us_per_record: float  # server CPU (all the tree's server processes)


@dataclass
class Samples:
    by_tree: dict[str, list[Sample]] = field(default_factory=dict)

    def add(self, tree: str, sample: Sample) -> None:
        self.by_tree.setdefault(tree, []).append(sample)


class Meter:
    """Wall time and the servers' CPU between `start` (after a workload's set-up) and `stop`.

    With `profile` (a file name prefix), py-spy samples each server process over the same
    window (collapsed stacks, `<profile>-node<N>.txt`); such a phase's numbers include
    py-spy's own load and are not reported."""

    def __init__(self, cluster: Cluster, profile: Path | None = None) -> None:
        self.cluster = cluster
        self.profile = profile
        self.spies: list[subprocess.Popen[bytes]] = []
        self.cpu_s = self.began = 0.0

    def start(self) -> None:
        self.cluster.check_alive()
        if self.profile is not None:
            for i, server in enumerate(self.cluster.servers, 1):
                out = f"{self.profile}-node{i}.txt"
                cmd = [PY_SPY, "record", "--pid", str(server.pid), "--rate", "200"]
                cmd += ["--format", "raw", "--nonblocking", "--output", out]
                self.spies.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL))
            time.sleep(PY_SPY_ATTACH_S)
        self.cpu_s, self.began = self.cluster.cpu_s(), time.perf_counter()

    def stop(self, records: int) -> Sample:
        elapsed = time.perf_counter() - self.began
        used_s = self.cluster.cpu_s() - self.cpu_s
        for spy in self.spies:  # py-spy writes its output on SIGINT
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        self.cluster.check_alive()
        return Sample(records / elapsed, used_s / records * 1e6)


# -- workloads (the checkout's client, plain) -------------------------------------------------


def client(bootstrap: str) -> Client:
    return Client(bootstrap, idempotent=False, retry=RetryPolicy(attempts_max=20))


def create_topic(bootstrap: str, topic: str, replication_factor: int) -> None:
    with client(bootstrap) as c:
        c.create_topic(topic, 1, replication_factor, format="raw")  # newer default: envelope
        deadline = Deadline(READY_TIMEOUT_S, f"{topic}: first append")
        while True:  # until an append is acknowledged by the leader (an election may run)
            try:
                c.append(topic, 0, [b"warm"], acks="all")
                return
            except ReplogError:
                deadline.check()
                time.sleep(0.05)


def produce(
    meter: Meter, topic: str, acks: str, records: int, threads: int, batch_records: int = 1000
) -> Sample:
    """`threads` clients append batches of `batch_records` (of `batch_values`) with `acks`."""
    bootstrap = meter.cluster.bootstrap
    batch = batch_values()[:batch_records]
    per_thread = max(1, records // threads // len(batch))
    clients = [client(bootstrap) for _ in range(threads)]
    for c in clients:
        c.append(topic, 0, batch[:1], acks=acks)  # connect and find the leader first
    errors: list[BaseException] = []
    deadline = Deadline(PHASE_TIMEOUT_S, f"{topic}: produce")

    def work(c: Client) -> None:
        try:
            for _ in range(per_thread):
                c.append(topic, 0, batch, acks=acks)
                deadline.check()
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(c,)) for c in clients]
    try:
        meter.start()
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        sample = meter.stop(per_thread * threads * len(batch))
    finally:
        for c in clients:
            c.close()
    if errors:
        raise errors[0]
    return sample


def consume(meter: Meter, topic: str, records: int) -> Sample:
    """`Consumer.batches()` from offset 0 until `records` records have arrived."""
    deadline = Deadline(PHASE_TIMEOUT_S, f"{topic}: consume")
    with client(meter.cluster.bootstrap) as c:
        consumer = c.consumer(topic, 0, 0)
        got = 0
        try:
            meter.start()
            for batch in consumer.batches():
                got += len(batch)
                if got >= records:
                    break
                deadline.check()
            sample = meter.stop(got)
        finally:
            consumer.close()
    return sample


def idle_cpu_ms_per_s(clusters: dict[str, Cluster], seconds: float) -> dict[str, float]:
    before = {name: (c.cpu_s(), time.perf_counter()) for name, c in clusters.items()}
    time.sleep(seconds)
    return {
        name: (c.cpu_s() - before[name][0]) * 1000 / (time.perf_counter() - before[name][1])
        for name, c in clusters.items()
    }


@contextlib.contextmanager
def clusters_of(
    trees: list[Tree], nodes: int, work: Path, common_args: list[str], cprofile: Path | None
) -> Iterator[dict[str, Cluster]]:
    clusters: dict[str, Cluster] = {}
    try:
        for tree in trees:
            data = work / f"{tree.name}-{nodes}n"
            clusters[tree.name] = Cluster(tree, nodes, data, common_args, cprofile).start()
        yield clusters
    finally:
        for c in clusters.values():
            c.stop()


def run_rounds(
    trees: list[Tree],
    clusters: dict[str, Cluster],
    workloads: list[str],
    rounds: int,
    records: int,
    threads: int,
    samples: dict[str, Samples],
    profile_dir: Path | None = None,
    singles: int = 3000,
) -> None:
    """`rounds` rounds of `workloads`, the trees alternating; with `profile_dir`, one more
    round under py-spy whose numbers are left out of `samples`."""
    nodes = clusters[trees[0].name].nodes
    for r in range(rounds + (profile_dir is not None)):
        profiling = r == rounds
        if profiling:
            assert profile_dir is not None
            profile_dir.mkdir(parents=True, exist_ok=True)
        order = trees if r % 2 == 0 else trees[::-1]
        topics = {}
        for tree in order:
            topics[tree.name] = {w: f"r{r}-{w}" for w in workloads if w != "consume_1n"}
            for topic in topics[tree.name].values():
                create_topic(clusters[tree.name].bootstrap, topic, nodes)
        line = []
        for w in workloads:
            for tree in order:
                prefix = profile_dir / f"{w}-{tree.name}" if profiling and profile_dir else None
                meter = Meter(clusters[tree.name], prefix)
                if w == "consume_1n":
                    sample = consume(meter, topics[tree.name]["produce_leader_1n"], records)
                elif w == "single_1n":
                    sample = produce(meter, topics[tree.name][w], "leader", singles, 1, 1)
                else:
                    acks = "leader" if w.startswith("produce_leader") else "all"
                    sample = produce(meter, topics[tree.name][w], acks, records, threads)
                if not profiling:
                    samples.setdefault(w, Samples()).add(tree.name, sample)
                line.append(
                    f"{w} {tree.name} {sample.rate:,.0f}/s {sample.cpu_us_per_record:.3f} us/rec"
                )
        log(
            f"round {r + 1}/{rounds}{' (profiled)' if profiling else ''} (load {load_average()}): "
            + "; ".join(line)
        )


# -- report ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    workload: str
    metric: str  # "rate" | "cpu"
    a: list[float]
    b: list[float]

    @property
    def ratios(self) -> list[float]:
        return [y / x for x, y in zip(self.a, self.b, strict=True)]


def rows(samples: dict[str, Samples], a: str, b: str) -> list[Row]:
    out = []
    for w in WORKLOADS:
        if w not in samples:
            continue
        sa, sb = samples[w].by_tree[a], samples[w].by_tree[b]
        out.append(Row(w, "rate", [s.rate for s in sa], [s.rate for s in sb]))
        out.append(
            Row(w, "cpu", [s.cpu_us_per_record for s in sa], [s.cpu_us_per_record for s in sb])
        )
    return out


def markdown(
    table: list[Row], trees: list[Tree], commits: dict[str, str], idle: dict[str, float]
) -> str:
    a, b = trees
    units = {"rate": "records/s", "cpu": "server CPU us/record"}
    fmt: dict[str, Callable[[float], str]] = {
        "rate": lambda v: f"{v:,.0f}",
        "cpu": lambda v: f"{v:.3f}",
    }
    lines = [
        f"| workload | metric | {a.name} ({commits[a.name]}) | {b.name} ({commits[b.name]}) "
        f"| {b.name} / {a.name}, median of paired rounds [min..max] |",
        "|---|---|---:|---:|---:|",
    ]
    for row in table:
        f = fmt[row.metric]
        ra = statistics.median(row.a)
        rb = statistics.median(row.b)
        rs = row.ratios
        lines.append(
            f"| {row.workload} | {units[row.metric]} | {f(ra)} [{f(min(row.a))}..{f(max(row.a))}] "
            f"| {f(rb)} [{f(min(row.b))}..{f(max(row.b))}] "
            f"| {statistics.median(rs):.3f} [{min(rs):.3f}..{max(rs):.3f}] |"
        )
    lines += ["", "Idle server CPU (ms of CPU per second, before the rounds):", ""]
    lines += [f"- {k}: {v:.1f} ms/s" for k, v in idle.items()]
    return "\n".join(lines) + "\n"


# length: the run in the order it happens (start, cases, write-up); a bench script, not served code
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH, twice: A then B")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--records", type=int, default=1_000_000, help="per 1-node phase")
    parser.add_argument("--records-3n", type=int, default=400_000, help="per 3-node phase")
    parser.add_argument("--threads", type=int, default=4, help="client threads per produce")
    parser.add_argument("--singles", type=int, default=3000, help="appends of single_1n")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--flush-1n", default="never", help="--flush of the 1-node servers")
    parser.add_argument("--flush-3n", default="interval", help="--flush of the 3-node servers")
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--dir", type=Path, default=None, help="parent of the scratch dir")
    parser.add_argument("--markdown", type=Path, default=None, help="write the tables here")
    parser.add_argument(
        "--profile", type=Path, default=None, help="one more round under py-spy; stacks here"
    )
    parser.add_argument(
        "--cprofile",
        type=Path,
        default=None,
        help="run the servers under cProfile (slower: for where, not how much); stats here",
    )
    args = parser.parse_args(argv)
    assert args.rounds >= 1 and len(args.tree) == 2, "two trees: --tree A=PATH --tree B=PATH"
    trees = [Tree(n, Path(p).resolve()) for n, p in (t.split("=", 1) for t in args.tree)]
    assert trees[0].name != trees[1].name
    commits = {t.name: t.check() for t in trees}
    if args.cprofile is not None:
        args.cprofile = args.cprofile.resolve()
        args.cprofile.mkdir(parents=True, exist_ok=True)
    workloads = [w for w in args.workloads.split(",") if w]
    assert set(workloads) <= set(WORKLOADS), workloads
    assert "consume_1n" not in workloads or "produce_leader_1n" in workloads
    for t in trees:
        log(f"{t.name}: {t.path} at {commits[t.name]}; extra args {t.like_with_like_args()}")
    samples: dict[str, Samples] = {}
    idle: dict[str, float] = {}
    with bench_tmpdir(args.dir, prefix="bench-compare-") as work:
        info = machine_info(work)
        one = [w for w in workloads if w.endswith("_1n")]
        three = [w for w in workloads if w.endswith("_3n")]
        for nodes, group, flush, records in (
            (1, one, args.flush_1n, args.records),
            (3, three, args.flush_3n, args.records_3n),
        ):
            if not group:
                continue
            flush_args = ["--flush", flush]
            with clusters_of(trees, nodes, work, flush_args, args.cprofile) as clusters:
                for name, v in idle_cpu_ms_per_s(clusters, args.idle_s).items():
                    idle[f"{name}, {nodes} node(s)"] = v
                run_rounds(
                    trees,
                    clusters,
                    group,
                    args.rounds,
                    records,
                    args.threads,
                    samples,
                    args.profile,
                    args.singles,
                )
    info["load average (1/5/15 min) at end"] = load_average()
    table = rows(samples, trees[0].name, trees[1].name)
    for row in table:
        name = f"{row.workload}_{'rate' if row.metric == 'rate' else 'server_cpu_us_per_record'}"
        unit = "records/s" if row.metric == "rate" else "us/record"
        emit(Result(f"{name}_{trees[1].name}", round(statistics.median(row.b), 4), unit,
                    round(statistics.median(row.a), 4)))  # fmt: skip
        emit(Result(f"{name}_ratio", round(statistics.median(row.ratios), 4), "ratio"))
    text = markdown(table, trees, commits, idle)
    settings = {
        "rounds": args.rounds, "records_1n": args.records, "records_3n": args.records_3n,
        "singles": args.singles, "threads": args.threads,
        "flush_1n": args.flush_1n, "flush_3n": args.flush_3n,
        "like_with_like": {t.name: t.like_with_like_args() for t in trees},
    }  # fmt: skip
    text += "\nSettings: `" + json.dumps(settings) + "`\n"
    text += "\nMachine: " + "; ".join(f"{k}: {v}" for k, v in info.items()) + ".\n"
    log(text)
    if args.markdown is not None:
        args.markdown.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
