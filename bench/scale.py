"""Scale: what a node costs as its partition count grows (issue 27).

A fresh cluster on 127.0.0.1 (1 node, or 3 nodes with replication factor 3) gets topics of
`--topic-partitions` partitions (10), created one at a time, until each checkpoint of
`--checkpoints` (1,000 / 5,000 / 10,000 partitions) is reached. At each checkpoint:

* CreateTopic time: the median per topic over the topics that reached the checkpoint from
  the one before, and the time those last 1,000 partitions took to add;
* idle CPU per node (% of one core) over `--idle-s` seconds with no client traffic, after a
  short settle;
* RSS (MiB) and open descriptors per node (/proc);
* GetMetadata of every topic, straight over gRPC: the median of 3 calls (ms);
* a produce + consume check: one acks=all record appended to each of `--sample`
  partitions picked at random, then read back at its offset.

At the last checkpoint reached, one node (the last) is stopped with SIGTERM and started
again, then killed with SIGKILL and started again; each restart records the time to its
ready file and the time until every sampled partition takes an acks=all append and reads it
back; the check runs again after the restarts.

Bounded: the creates of a case stop at `--create-limit-s` (the case records how far it got),
every wait has a deadline (`--restart-limit-s` for a restart), and the issue's targets are
printed beside the figures. One JSON line per figure on stdout; the whole run replaces the
"Scale: partition count" section of docs/benchmarks.md (`--no-docs`: not).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (
    DOCS_FILE,
    Result,
    bench_tmpdir,
    emit,
    log,
    machine_info,
    process_cpu_s,
    replace_section,
)

from replog import frames
from replog.client import Client, RetryPolicy
from replog.devcluster import STOP_TIMEOUT_S, DevCluster, NodeProcess
from replog.errors import ReplogError
from replog.v1 import admin_pb2, admin_pb2_grpc

HEADING = "## Scale: partition count (bench/scale.py)"
PATIENT = RetryPolicy(attempts_max=10_000, backoff_max_ms=500, deadline_ms=60_000)
SETTLE_S = 5.0
# The "done when" (3 nodes, 10,000 partitions of rf 3), printed beside the figures.
TARGETS = {
    "idle_cpu_pct": 5.0,  # of one core, per node
    "add_1000_s": 10.0,  # creating 1,000 more partitions
    "restart_ready_s": 10.0,  # SIGTERM or SIGKILL, to ready
}


@dataclass
class Checkpoint:
    partitions: int
    create_median_ms: float
    create_max_ms: float
    add_1000_s: float
    idle_cpu_pct: list[float]
    rss_mib: list[float]
    fds: list[int]
    get_metadata_ms: tuple[float, float]  # GetMetadata, ListTopics (the anchor)
    check: str


@dataclass
class Restart:
    how: str
    ready_s: float | None  # None: not ready within the limit
    serving_s: float | None
    led: int | None = None  # partitions the node led when it was stopped (None: not counted)
    preferred: int | None = None  # ... of which it is the preferred leader


@dataclass
class Case:
    nodes: int
    checkpoints: list[Checkpoint] = field(default_factory=list)
    restarts: list[Restart] = field(default_factory=list)
    check_after: str = "not run"
    restarted_at: int = 0  # partitions when the restarts ran
    reached: int = 0  # partitions created
    gave_up: str = ""
    wall_s: float = 0.0


# -- measurements ------------------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def pids(cluster: DevCluster) -> list[int]:
    out = []
    for node in cluster.members.values():
        assert node.proc is not None and node.proc.poll() is None, f"node {node.node_id} died"
        out.append(node.proc.pid)
    return out


def idle_cpu_pct(cluster: DevCluster, seconds: float) -> list[float]:
    time.sleep(SETTLE_S)
    before = [process_cpu_s(p) for p in pids(cluster)]
    start = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - start
    after = [process_cpu_s(p) for p in pids(cluster)]
    return [round(100 * (a - b) / elapsed, 1) for a, b in zip(after, before, strict=True)]


def get_metadata_ms(address: str) -> tuple[float, float]:
    """The medians of 5 GetMetadata calls of every topic and, as an anchor (the cost of a
    round trip to that node right now), of 5 ListTopics calls (straight over gRPC)."""
    options = [("grpc.max_receive_message_length", 256 << 20)]
    with grpc.insecure_channel(address, options=options) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        out = []
        for call, request in (
            (stub.GetMetadata, admin_pb2.GetMetadataRequest()),
            (stub.ListTopics, admin_pb2.ListTopicsRequest()),
        ):
            samples = []
            for _ in range(5):
                start = time.perf_counter()
                call(request, timeout=120)
                samples.append((time.perf_counter() - start) * 1000)
            out.append(statistics.median(samples))
    return out[0], out[1]


def leadership(address: str, node_id: int) -> tuple[int, int]:
    """(partitions led by `node_id`, partitions whose preferred replica it is), from one
    GetMetadata at `address`."""
    options = [("grpc.max_receive_message_length", 256 << 20)]
    with grpc.insecure_channel(address, options=options) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        meta = stub.GetMetadata(admin_pb2.GetMetadataRequest(), timeout=120)
    parts = [p for t in meta.topics for p in t.partitions]
    led = sum(1 for p in parts if p.leader_id == node_id)
    return led, sum(1 for p in parts if p.replicas and p.replicas[0] == node_id)


def wait_for_its_share(cluster: DevCluster, node_id: int, limit_s: float) -> tuple[int, int]:
    """Wait (at most `limit_s`) until `node_id` leads at least 90 % of the partitions it is
    the preferred leader of (the leader balancer gives them back to a restarted node), so
    that a stop moves its whole share; returns (led, preferred) as last seen."""
    other = next(m for n, m in cluster.members.items() if n != node_id)
    deadline = time.monotonic() + limit_s
    while True:
        led, preferred = leadership(other.address, node_id)
        if led >= 0.9 * preferred or time.monotonic() > deadline:
            return led, preferred
        time.sleep(1.0)


def check(client: Client, sample: list[tuple[str, int]], deadline_s: float) -> tuple[bool, str]:
    """Append one acks=all record to each sampled partition and read it back."""
    stop = time.monotonic() + deadline_s
    done = 0
    for topic, p in sample:
        value = f"{topic}/{p}@{time.time_ns()}".encode()
        while True:
            try:
                offset = client.append(topic, p, [value], acks="all").base_offset
                got = client.fetch_raw(topic, p, offset, max_wait_ms=1000).frames
                first = frames.decode(got).values[:1]
                if first != [value]:
                    return False, f"{topic}/{p}: read back {first!r}, wanted {value!r}"
                done += 1
                break
            except ReplogError as exc:
                if time.monotonic() > stop:
                    return False, f"{done}/{len(sample)} ok; {topic}/{p}: {exc.reason}"
    return True, f"{done}/{len(sample)} ok"


def restart(
    node: NodeProcess,
    client: Client,
    sample: list[tuple[str, int]],
    how: str,
    limit_s: float,
    share: tuple[int, int] | None = None,
) -> Restart:
    led, preferred = share if share is not None else (None, None)
    if how == "SIGTERM":
        try:
            node.stop()
        except subprocess.TimeoutExpired:  # a clean stop that never ends is a result too
            log(f"node {node.node_id}: not stopped {STOP_TIMEOUT_S:.0f} s after SIGTERM: killed")
            node.kill()
            how = f"SIGTERM (not stopped in {STOP_TIMEOUT_S:.0f} s: SIGKILL)"
    else:
        node.kill()
    start = time.monotonic()
    node.start(wait=False)
    ready_s = None
    while time.monotonic() - start < limit_s:
        if node.ready_file.exists():
            ready_s = time.monotonic() - start
            break
        assert node.proc is not None
        if node.proc.poll() is not None:
            raise RuntimeError(f"node {node.node_id} exited:\n{node.log_tail()}")
        time.sleep(0.05)
    if ready_s is None:
        return Restart(how, None, None, led, preferred)
    node.wait_ready()  # (reads its metrics address)
    ok, _ = check(client, sample, max(1.0, limit_s - (time.monotonic() - start)))
    return Restart(how, ready_s, time.monotonic() - start if ok else None, led, preferred)


# -- one case ---------------------------------------------------------------------------------


def run_case(nodes: int, limit_s: float, args: argparse.Namespace, work: Path) -> Case:
    """One cluster of `nodes` grown through the checkpoints; creates stop after `limit_s`
    seconds of creating."""
    case = Case(nodes)
    began = time.monotonic()
    cluster = DevCluster(work, nodes)
    try:
        _grow(cluster, case, limit_s, args)
    except (ReplogError, grpc.RpcError, RuntimeError, AssertionError) as exc:
        case.gave_up = (
            f"stopped at {case.reached:,} partitions by {type(exc).__name__}: {str(exc)[:300]}"
        )
        log(f"{nodes} node(s): {case.gave_up}")
    finally:
        cluster.kill_all()
        case.wall_s = time.monotonic() - began
    return case


def _grow(cluster: DevCluster, case: Case, limit_s: float, args: argparse.Namespace) -> None:
    nodes = case.nodes
    rng = random.Random(27)
    rf = nodes
    cluster.start()
    with Client(cluster.bootstrap, retry=PATIENT, timeout_s=60) as client:
        created: list[str] = []
        total = 0
        block: list[float] = []
        block_start = time.monotonic()
        creating_s = 0.0
        for target in args.checkpoints:
            while total < target:
                if creating_s > limit_s:
                    case.gave_up = (
                        f"stopped creating at {total:,} partitions after {limit_s:.0f} s "
                        "of creates (--create-limit-s)"
                    )
                    break
                name = f"s{len(created):05d}"
                start = time.monotonic()
                try:
                    client.create_topic(name, args.topic_partitions, rf, format="raw")
                except (ReplogError, grpc.RpcError) as exc:
                    if not case.checkpoints:
                        raise
                    # past a checkpoint: stop growing, restart at the last one reached
                    case.gave_up = (
                        f"stopped creating at {total:,} partitions by {type(exc).__name__}: "
                        f"{str(exc)[:200]}"
                    )
                    log(f"{nodes} node(s): {case.gave_up}")
                    break
                block.append(time.monotonic() - start)
                creating_s += block[-1]
                created.append(name)
                total += args.topic_partitions
                case.reached = total
                if total % 1000 == 0:
                    add_1000_s = time.monotonic() - block_start
                    block_start = time.monotonic()
            if case.gave_up:
                break
            sample = [
                (rng.choice(created), rng.randrange(args.topic_partitions))
                for _ in range(args.sample)
            ]
            ok, detail = check(client, sample, 120)
            point = Checkpoint(
                total,
                statistics.median(block) * 1000,
                max(block) * 1000,
                add_1000_s,
                idle_cpu_pct(cluster, args.idle_s),
                [round(rss_mib(p), 1) for p in pids(cluster)],
                [fds(p) for p in pids(cluster)],
                get_metadata_ms(cluster.members[1].address),
                ("ok " if ok else "FAILED ") + detail,
            )
            case.checkpoints.append(point)
            log(f"{nodes} node(s), {total:,} partitions: {point}")
            block = []
            block_start = time.monotonic()
        if case.checkpoints:
            case.restarted_at = total
            last = cluster.members[nodes]
            for how in ("SIGTERM", "SIGKILL"):
                share = wait_for_its_share(cluster, nodes, args.share_wait_s) if nodes > 1 else None
                case.restarts.append(
                    restart(last, client, sample, how, args.restart_limit_s, share)
                )
                log(f"{nodes} node(s): {case.restarts[-1]}")
            ok, detail = check(client, sample, 120)
            case.check_after = ("ok " if ok else "FAILED ") + detail
            log(f"{nodes} node(s) at {total:,} partitions: check after: {case.check_after}")


# -- output ------------------------------------------------------------------------------------


def _fmt(values: list[float] | list[int]) -> str:
    return " / ".join(f"{v:,}" if isinstance(v, int) else f"{v:.1f}" for v in values)


def emit_case(case: Case) -> None:
    n = case.nodes
    for point in case.checkpoints:
        tag = f"scale_{n}n_{point.partitions}p"
        emit(Result(f"{tag}_create_topic_median", round(point.create_median_ms, 1), "ms"))
        ceiling = TARGETS["add_1000_s"] if n == 3 else None
        emit(Result(f"{tag}_add_1000_partitions", round(point.add_1000_s, 1), "s", ceiling))
        ceiling = TARGETS["idle_cpu_pct"] if n == 3 else None
        emit(Result(f"{tag}_idle_cpu_max", max(point.idle_cpu_pct), "% of a core", ceiling))
        emit(Result(f"{tag}_get_metadata", round(point.get_metadata_ms[0], 1), "ms"))
    for r in case.restarts:
        value = -1.0 if r.ready_s is None else round(r.ready_s, 1)
        emit(Result(f"scale_{n}n_restart_{r.how.split()[0].lower()}_ready", value, "s", None))


def command(args: argparse.Namespace) -> str:
    """The command line that made the section (empty options left out)."""
    out = ["python bench/scale.py"]
    if args.nodes:
        out.append("--nodes " + " ".join(map(str, args.nodes)))
        out.append("--create-limit-s " + " ".join(f"{x:.0f}" for x in args.create_limit_s))
    out.append("--checkpoints " + " ".join(map(str, args.checkpoints)))
    out += [f"--earlier-log {p.name}" for p in getattr(args, "earlier_log", [])]
    return " ".join(out)


def section(cases: list[Case], args: argparse.Namespace, machine: dict[str, str]) -> str:
    lines = [
        f"What a node costs as its partition count grows (issue 27). Command: `{command(args)}`.",
        "",
        "Machine: " + "; ".join(f"{k}: {v}" for k, v in machine.items()) + ".",
        "",
        f"Topics of {args.topic_partitions} partitions (replication factor = nodes) created one "
        "at a time. *create median* is per topic, over the topics since the checkpoint before "
        "(max beside it); *+1,000* is the time the last 1,000 partitions took. Idle CPU: "
        f"{args.idle_s:.0f} s with no traffic, after {SETTLE_S:.0f} s; per node. GetMetadata: "
        "every topic, median of 5 (beside it ListTopics, median of 5: a round trip's cost). "
        "Check: one acks=all record to each of "
        f"{args.sample} random partitions, read back. Single runs per checkpoint "
        "(one cluster grows through them; the creates of a checkpoint are its samples); "
        "the machine is shared, so CPU figures carry the other work on it.",
        "",
        "Issue 27's targets (3 nodes, 10,000 partitions, rf 3): idle CPU <= "
        f"{TARGETS['idle_cpu_pct']:.0f} % of a core per node; +1,000 partitions <= "
        f"{TARGETS['add_1000_s']:.0f} s; restart (SIGTERM or SIGKILL) ready <= "
        f"{TARGETS['restart_ready_s']:.0f} s; produce and consume work before and after.",
        "",
        "| nodes | partitions | create median (max) | +1,000 | idle CPU % per node | "
        "RSS MiB per node | fds per node | GetMetadata (ListTopics) | check |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for case in cases:
        for p in case.checkpoints:
            lines.append(
                f"| {case.nodes} | {p.partitions:,} | {p.create_median_ms:.0f} ms "
                f"({p.create_max_ms:.0f} ms) | {p.add_1000_s:.1f} s | {_fmt(p.idle_cpu_pct)} | "
                f"{_fmt(p.rss_mib)} | {_fmt(p.fds)} | {p.get_metadata_ms[0]:.1f} ms "
                f"({p.get_metadata_ms[1]:.1f} ms) | {p.check} |"
            )
    lines += [
        "",
        "Before each restart of a multi-node case the bench waits until the node leads at "
        "least 90 % of the partitions it is the preferred leader of (the leader balancer "
        "gives them back after the previous restart), so each stop moves its whole share: "
        "*led at stop* (of *preferred*).",
        "",
        "| nodes | at partitions | restart | led at stop (preferred) | ready file | "
        "sampled partitions serve |",
        "|---|---|---|---|---|---|",
    ]
    for case in cases:
        at = f"{case.restarted_at:,}" if case.restarted_at else "not recorded"
        for r in case.restarts:
            ready = "not within limit" if r.ready_s is None else f"{r.ready_s:.1f} s"
            serving = "not within limit" if r.serving_s is None else f"{r.serving_s:.1f} s"
            led = "not counted" if r.led is None else f"{r.led:,} ({r.preferred:,})"
            lines.append(f"| {case.nodes} | {at} | {r.how} | {led} | {ready} | {serving} |")
    lines.append("")
    for case in cases:
        took = f"{case.wall_s:.0f} s in all" if case.wall_s else "time not recorded"
        note = f"{case.nodes} node(s): {took}; check after the restarts: "
        lines.append(f"- {note}{case.check_after}" + (f"; {case.gave_up}" if case.gave_up else ""))
    lines += ["", args.note] if args.note else []
    return "\n".join(lines) + "\n"


def earlier_cases(path: Path, skip: list[int]) -> list[Case]:
    """The cases of an earlier run, read back from its progress lines on stderr (`log`
    above: the `repr` of each Checkpoint and Restart), for node counts not run now."""
    cases: dict[int, Case] = {}
    names = {"Checkpoint": Checkpoint, "Restart": Restart, "__builtins__": {}}
    for line in path.read_text().splitlines():
        head, _, body = line.partition(" node(s)")
        if not head.isdigit() or int(head) in skip:
            continue
        case = cases.setdefault(int(head), Case(int(head)))
        if body.startswith(": stopped"):
            case.gave_up = body[2:]
        if "check after: " in body:
            at, _, case.check_after = body.partition("check after: ")
            digits = "".join(c for c in at if c.isdigit())  # " at 9,000 partitions: "
            case.restarted_at = int(digits or 0)
        found = body[body.find("Checkpoint(") :] if "Checkpoint(" in body else ""
        found = found or (body[body.find("Restart(") :] if "Restart(" in body else "")
        if found:
            value = eval(found, names)  # (a log this script wrote: two dataclasses only)
            (case.checkpoints if isinstance(value, Checkpoint) else case.restarts).append(value)
    for case in cases.values():
        earlier = f"read back from the log of an earlier run ({path.name})"
        case.gave_up = f"{case.gave_up}; {earlier}" if case.gave_up else earlier
        if case.restarts and case.check_after == "not run":
            case.check_after = "not recorded"
    return list(cases.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="*", default=[1, 3])
    parser.add_argument("--checkpoints", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--topic-partitions", type=int, default=10)
    parser.add_argument(
        "--create-limit-s",
        type=float,
        nargs="*",
        default=[600.0, 300.0],
        help="seconds of creates per case, one per --nodes value",
    )
    parser.add_argument("--restart-limit-s", type=float, default=120.0)
    parser.add_argument(
        "--share-wait-s",
        type=float,
        default=120.0,
        help="before each restart, at most this long for the node to lead its share again",
    )
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--sample", type=int, default=10)
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument(
        "--earlier-log",
        type=Path,
        action="append",
        default=[],
        help="an earlier run's stderr: its cases of other node counts go in the section too",
    )
    parser.add_argument("--note", default="", help="a sentence for the section's end")
    args = parser.parse_args()
    if not args.nodes:
        args.create_limit_s = []  # (only read back from earlier runs' logs)
    assert all(c % 1000 == 0 for c in args.checkpoints), "checkpoints are multiples of 1,000"
    assert 1000 % args.topic_partitions == 0, "--topic-partitions divides 1,000"
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # clean up on SIGTERM too
    cases = [c for path in args.earlier_log for c in earlier_cases(path, args.nodes)]
    with bench_tmpdir(prefix="scale-") as work:
        machine = machine_info(work)
        for nodes, limit_s in zip(args.nodes, args.create_limit_s, strict=True):
            case = run_case(nodes, limit_s, args, work / f"{nodes}n")
            emit_case(case)
            cases.append(case)
            if not args.no_docs:  # after each case: a later one that fails loses nothing
                write_docs(cases, args, machine)
        if not args.nodes and not args.no_docs:  # (only read back from earlier runs' logs)
            write_docs(cases, args, machine)
    return 0


def write_docs(cases: list[Case], args: argparse.Namespace, machine: dict[str, str]) -> None:
    text = DOCS_FILE.read_text() if DOCS_FILE.exists() else ""
    DOCS_FILE.write_text(replace_section(text, HEADING, section(cases, args, machine)))


if __name__ == "__main__":
    sys.exit(main())
