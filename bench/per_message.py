"""Where one single-record append's cost goes, counted on each node (issue 32 item 1).

    .venv/bin/python bench/per_message.py [--appends N] [--repeats N] [--profile]
                                          [--flush interval,always] [--write-docs]

Each configuration (1 node; 3 nodes with a partition replicated 3 times; each under
`--flush interval` and `--flush always`) is a `DevCluster` of `replog serve` processes on
127.0.0.1 whose start-up loads bench/count_hooks/sitecustomize.py: counters wrapped around
the event loop, the replication owner task, its timer, the peer transport, fsync, logging
and metrics (the list is that module's docstring). One client (`Client.append`, the
default idempotent client over AppendStream) appends `--appends` single 100-byte records
one after the other with acks=all, after 100 warm-up appends; each node writes its counts
before and after (SIGUSR2), and the difference over the appends is the cost of one append
on that node (leader, follower). CPU: utime + stime of each process over the same run. A
client request and its answer are one gRPC message each way per append by construction
(sequential appends on one stream), so only the replication messages are counted.

`--tree NAME=PATH` (repeatable): run every configuration once per source tree in each
repeat (the trees alternate), the nodes started from that tree (`PYTHONPATH` and working
directory): a before/after of two commits in one run, with the same client.

`--profile`: one more run of each configuration under `py-spy record --nonblocking` (each
node, raw stacks), samples aggregated by innermost function: the top rows per role.

Prints one JSON line per configuration and role; `--write-docs` writes
`## Per-message cost (bench/per_message.py)` in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (
    Result,
    bench_tmpdir,
    emit,
    log,
    machine_info,
    process_cpu_s,
    write_section,
)

from replog.client import Client
from replog.devcluster import DevCluster
from replog.errors import ReplogError

HOOKS = Path(__file__).resolve().parent / "count_hooks"
REPO = Path(__file__).resolve().parent.parent
TOPIC = "permsg"
VALUE_BYTES = 100
WARMUP = 100
SNAPSHOT_TIMEOUT_S = 30.0
KEYS = (
    "cpu_us",
    "peer_messages_out",
    "peer_messages_in",
    "peer_envelopes_out",
    "peer_envelopes_in",
    "loop_passes",
    "loop_sleeps",
    "loop_idle_wakeups",
    "tasks_created",
    "timers_armed",
    "ticker_arms",
    "ticker_fired",
    "owner_submits",
    "owner_direct",
    "owner_passes",
    "fsyncs",
    "log_records",
    "metric_updates",
    "client_messages_in",
    "client_messages_out",
)
CPROFILE_TOP = 25


Config = tuple[str, int, str]  # (tree name, nodes, flush)
CPROFILES: dict[tuple[str, int, str, str], list[tuple[str, float, float, float]]] = {}


def leader_of(client: Client) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            leader = client.refresh_metadata([TOPIC]).topics[0].partitions[0].leader_id
        except ReplogError:
            leader = -1
        if leader > 0:
            return int(leader)
        time.sleep(0.05)
    raise RuntimeError("no leader")


def snapshot(count_dir: Path, pid: int) -> dict[str, float]:
    before = set(count_dir.glob(f"counts-{pid}-*.json"))
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + SNAPSHOT_TIMEOUT_S
    while time.monotonic() < deadline:
        new = set(count_dir.glob(f"counts-{pid}-*.json")) - before
        if new:
            counts: dict[str, float] = json.loads(new.pop().read_text())
            counts["cpu_us"] = process_cpu_s(pid) * 1e6
            return counts
        time.sleep(0.01)
    raise RuntimeError(f"node pid {pid} wrote no counts")


def node_env(count_dir: Path, tree: Path, cprofile: bool = False) -> dict[str, str]:
    env = {"BENCH_COUNT_DIR": str(count_dir), "PYTHONPATH": f"{HOOKS}:{tree}"}
    if cprofile:
        env["BENCH_CPROFILE"] = "1"
    return env


def cprofile_rows(path: Path, appends: int) -> list[tuple[str, float, float, float]]:
    """The top functions of one node's cProfile by own time: (function, calls, own us,
    cumulative us), each per append."""
    import pstats

    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    rows = []
    for (file, line, name), (_cc, calls, tottime, cumtime, _callers) in stats.items():
        where = "/".join(Path(file).parts[-2:]) if file != "~" else "builtin"
        rows.append(
            (
                f"{name} ({where}:{line})",
                calls / appends,
                tottime / appends * 1e6,
                cumtime / appends * 1e6,
            )
        )
    rows.sort(key=lambda r: -r[2])
    return rows


# Areas of a single-record append on a 1-node leader, inclusive times from a kept cProfile
# (`BENCH_CPROFILE_KEEP=DIR ... --cprofile`, then `--areas BEFORE.pstats AFTER.pstats`).
AREAS = [
    (
        "append through the replication driver (`ReplicaDriver.append`, all below)",
        "replication/driver.py",
        "append",
        308,
    ),
    (
        "  disk-space check before it (`_check_writable`: `DiskSpace.room_for`, a statvfs "
        "and a stat at most every 1 ms)",
        "replication/faults.py",
        "_check_writable",
        None,
    ),
    (
        "  the core's step (`Replica.append`: producer check, outputs)",
        "replication/replica.py",
        "append",
        None,
    ),
    (
        "  the outputs performed (`_perform_now`: log write, HW, the ack)",
        "replication/performing.py",
        "_perform_now",
        None,
    ),
    (
        "    of which the log write (`PartitionLog.append_pieces`)",
        "storage/partition_log.py",
        "append_pieces",
        None,
    ),
    (
        "  the next tick scheduled (`_schedule_tick`)",
        "replication/timing.py",
        "_schedule_tick",
        None,
    ),
    (
        "request checks (`LogService.prepare_append`: routing, leadership, envelope check)",
        "services/log_service.py",
        "prepare_append",
        None,
    ),
    ("  the envelope check (`records.validate`)", "replog/records.py", "validate", None),
    ("  the leader lookup (`Router.leader_replica`)", "control/routing.py", "leader_replica", None),
    ("answers written (`rpc._write`: grpc.aio's write)", "edge/rpc.py", "_write", None),
    (
        "request iterator layers (`_Reads.__anext__`, `guard.checked`, `refusing`, "
        "`admitted`; own time)",
        "",
        "",
        None,
    ),
    ("metric updates (prometheus_client; own time)", "prometheus_client/metrics.py", "", None),
]
CHAIN = [
    ("edge/draining.py", "__anext__"),
    ("edge/guard.py", "checked"),
    ("groups/internal.py", "refusing"),
    ("edge/quotas.py", "admitted"),
]


def areas(path: Path) -> tuple[float, dict[str, float]]:
    """Total own time and each area's time (seconds) in one cProfile."""
    import pstats

    st = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in st.values())
    out = {}
    for label, file, fn, line in AREAS:
        t = 0.0
        for (f, ln, n), v in st.items():
            if not file:
                t += v[2] if any(a in f and n == b for a, b in CHAIN) else 0
            elif file in f and (not fn or n == fn) and (line is None or ln == line):
                t += v[3] if fn else v[2]
        out[label] = t
    return total, out


def render_areas(before: Path, after: Path, appends: int) -> str:
    (ta, oa), (tb, ob) = areas(before), areas(after)
    per = 1e6 / appends
    lines = [
        "| where (inclusive, event-loop thread under cProfile) | before: us/append | share "
        "| after: us/append | share |",
        "|---|---:|---:|---:|---:|",
        f"| all Python on the event-loop thread | {ta * per:.0f} | 100 % | {tb * per:.0f} "
        "| 100 % |",
    ]
    for label in oa:
        shown = "&nbsp;" * (len(label) - len(label.lstrip())) + label.lstrip()
        lines.append(
            f"| {shown} | {oa[label] * per:.0f} | {oa[label] / ta:.0%} | {ob[label] * per:.0f} "
            f"| {ob[label] / tb:.0%} |"
        )
    return "\n".join(lines) + "\n"


def ceiling_run(base: Path, appends: int) -> tuple[float, dict[str, float]]:
    """The same client loop against bench/e2e.py's do-nothing streaming server, started
    with the same counting hooks: its p50 (ms) and its counts and CPU per append."""
    from e2e import Proc

    count_dir = base / f"ceiling-{time.monotonic_ns()}"
    count_dir.mkdir(parents=True)
    ready = count_dir / "ready"
    saved = dict(os.environ)
    os.environ.update(node_env(count_dir, REPO))
    try:
        cmd = [sys.executable, str(Path(__file__).with_name("e2e.py")), "--ceiling-server"]
        proc = Proc([*cmd, str(ready)], ready)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        with Client(proc.address) as client:
            value = os.urandom(VALUE_BYTES)
            for _ in range(WARMUP):
                client.append(TOPIC, 0, [value], acks="all")
            before = snapshot(count_dir, proc.proc.pid)
            took = []
            for _ in range(appends):
                t = time.perf_counter()
                client.append(TOPIC, 0, [value], acks="all")
                took.append(time.perf_counter() - t)
            after = snapshot(count_dir, proc.proc.pid)
        counts = {k: (after.get(k, 0) - before.get(k, 0)) / appends for k in KEYS}
        return statistics.median(took) * 1000, counts
    finally:
        proc.stop()
        shutil.rmtree(count_dir, ignore_errors=True)


def run_config(
    base: Path,
    nodes: int,
    flush: str,
    appends: int,
    profile: bool,
    tree: Path = REPO,
    cprofile: bool = False,
    name: str = "",
) -> tuple[dict[str, dict[str, float]], float, dict[str, list[tuple[str, float]]]]:
    """Per-append counts by role, the client's p50 (ms), and (with `profile`) the top
    functions by role (py-spy shares; with `cprofile`, cProfile rows in `CPROFILES`)."""
    data = base / f"n{nodes}-{flush}-{time.monotonic_ns()}"
    count_dir = data / "counts"
    count_dir.mkdir(parents=True)
    saved, cwd = dict(os.environ), os.getcwd()
    os.environ.update(node_env(count_dir, tree, cprofile))
    os.chdir(tree)  # `python -m replog` imports the working directory's first
    try:
        cluster = DevCluster(data, nodes=nodes, extra_args=["--flush", flush]).start()
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(saved)
    try:
        with Client(cluster.bootstrap) as client:
            client.create_topic(TOPIC, 1, nodes)
            leader = leader_of(client)
            value = os.urandom(VALUE_BYTES)
            for _ in range(WARMUP):
                client.append(TOPIC, 0, [value], acks="all")
            pids = {i: m.proc.pid for i, m in cluster.members.items() if m.proc is not None}
            spies = start_profiles(data, pids) if profile else {}
            before = {i: snapshot(count_dir, pid) for i, pid in pids.items()}
            took = []
            for _ in range(appends):
                t = time.perf_counter()
                client.append(TOPIC, 0, [value], acks="all")
                took.append(time.perf_counter() - t)
            after = {i: snapshot(count_dir, pid) for i, pid in pids.items()}
            tops = stop_profiles(spies, leader)
        if cprofile:
            for i, pid in pids.items():
                role = "leader" if i == leader else f"follower {i}"
                stats = count_dir / f"cprofile-{pid}.pstats"
                CPROFILES[(name, nodes, flush, role)] = cprofile_rows(stats, appends)
                if os.environ.get("BENCH_CPROFILE_KEEP"):  # for pstats browsing
                    keep = Path(os.environ["BENCH_CPROFILE_KEEP"])
                    keep.mkdir(parents=True, exist_ok=True)
                    shutil.copy(
                        stats, keep / f"{name}{nodes}n-{flush}-{role.replace(' ', '')}.pstats"
                    )
        roles: dict[str, dict[str, float]] = {}
        followers = [i for i in pids if i != leader]
        for role, ids in (("leader", [leader]), ("follower", followers)):
            if not ids:
                continue
            roles[role] = {
                k: statistics.mean(after[i].get(k, 0) - before[i].get(k, 0) for i in ids) / appends
                for k in KEYS
            }
        roles["all nodes"] = {
            k: sum(after[i].get(k, 0) - before[i].get(k, 0) for i in pids) / appends for k in KEYS
        }
        return roles, statistics.median(took) * 1000, tops
    finally:
        cluster.stop()
        shutil.rmtree(data, ignore_errors=True)


def start_profiles(
    data: Path, pids: dict[int, int]
) -> dict[int, tuple[subprocess.Popen[bytes], Path]]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out = {}
    for node, pid in pids.items():
        path = data / f"spy-{node}.txt"
        cmd = [spy, "record", "--pid", str(pid), "--rate", "500", "--nonblocking"]
        cmd += ["--format", "raw", "--output", str(path), "--duration", "600"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out[node] = (proc, path)
    time.sleep(1.0)  # py-spy attaches
    return out


def stop_profiles(
    spies: dict[int, tuple[subprocess.Popen[bytes], Path]], leader: int
) -> dict[str, list[tuple[str, float]]]:
    tops: dict[str, list[tuple[str, float]]] = {}
    merged: dict[str, Counter[str]] = {"leader": Counter(), "follower": Counter()}
    for node, (proc, path) in spies.items():
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        role = "leader" if node == leader else "follower"
        if path.exists():
            merged[role].update(leaf_counts(path))
    for role, counts in merged.items():
        total = sum(counts.values())
        if total:
            tops[role] = [(name, n / total) for name, n in counts.most_common(15)]
    return tops


def leaf_counts(path: Path) -> Counter[str]:
    """Samples by innermost frame (`function (file)`), idle samples left out."""
    counts: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        leaf = stack.split(";")[-1]
        name = leaf.split(" (")[0] if " (" in leaf else leaf
        where = leaf.split(" (")[1].split(":")[0].rsplit("/", 2)[-2:] if " (" in leaf else []
        counts[f"{name} ({'/'.join(where)})" if where else name] += int(n)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nodes", default="1,3")
    parser.add_argument("--flush", default="interval,always")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH (repeatable)")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--ceiling", action="store_true", help="the streaming ceiling's p50")
    parser.add_argument("--cprofile", action="store_true", help="one cProfile run per config")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument(
        "--areas", nargs=2, type=Path, default=None, help="BEFORE AFTER .pstats: areas table"
    )
    args = parser.parse_args()
    if args.areas:
        print(render_areas(*args.areas, args.appends))
        return
    trees = [(t.split("=", 1)[0], Path(t.split("=", 1)[1]).resolve()) for t in args.tree]
    trees = trees or [("", REPO)]
    paths = dict(trees)
    configs = [
        (name, int(n), f)
        for n in args.nodes.split(",")
        for f in args.flush.split(",")
        for name, _ in trees
    ]
    results: dict[Config, list[dict[str, dict[str, float]]]] = {c: [] for c in configs}
    p50s: dict[Config, list[float]] = {c: [] for c in configs}
    tops: dict[Config, dict[str, list[tuple[str, float]]]] = {}
    ceilings: list[float] = []
    ceiling_counts: list[dict[str, float]] = []
    loads: list[float] = []
    with bench_tmpdir(args.dir, prefix="permsg-") as base:
        info = machine_info(base)
        for r in range(args.repeats):
            loads.append(os.getloadavg()[0])
            if args.ceiling:
                p50, counts = ceiling_run(base, args.appends)
                ceilings.append(p50)
                ceiling_counts.append(counts)
                log(f"repeat {r + 1}: ceiling p50 {ceilings[-1]:.3f} ms")
            for config in configs if r % 2 == 0 else configs[::-1]:
                name, nodes, flush = config
                log(f"repeat {r + 1}: {name} {nodes} node(s), flush={flush}")
                roles, p50, _ = run_config(base, nodes, flush, args.appends, False, paths[name])
                results[config].append(roles)
                p50s[config].append(p50)
        if args.profile:
            for config in configs:
                name, nodes, flush = config
                log(f"profile: {name} {nodes} node(s), flush={flush}")
                tops[config] = run_config(base, nodes, flush, args.appends, True, paths[name])[2]
        if args.cprofile:
            for name, nodes, flush in configs:
                log(f"cprofile: {name} {nodes} node(s), flush={flush}")
                run_config(
                    base, nodes, flush, args.appends, False, paths[name], cprofile=True, name=name
                )
        loads.append(os.getloadavg()[0])
    info["load average (1 min) at each repeat's start and at the end"] = " / ".join(
        f"{x:.2f}" for x in loads
    )
    table = {}
    for config, runs in results.items():
        name, nodes, flush = config
        table[config] = {
            role: {k: statistics.median(run[role][k] for run in runs) for k in KEYS}
            for role in runs[0]
        }
        for role, values in table[config].items():
            emit(
                Result(
                    f"per_message_{name}{'_' if name else ''}{nodes}n_{flush}_"
                    + role.replace(" ", "_"),
                    values["cpu_us"],
                    "us/append",
                    {"p50_ms": statistics.median(p50s[config]), **values},
                )
            )
    body = render(args, info, table, p50s, tops) + render_extra(
        args, table, p50s, ceilings, ceiling_counts
    )
    print(body, file=sys.stderr)
    if args.write_docs:
        write_section(SECTION, body)


SECTION = "## Where a message's time goes (bench/per_message.py)"


def render_extra(args, table, p50s, ceilings, ceiling_counts) -> str:  # type: ignore[no-untyped-def]
    lines = []
    if ceiling_counts:
        one = [(c, roles) for c, roles in table.items() if c[1] == 1]
        lines += [
            "",
            "The do-nothing streaming server under the same hooks and client loop (medians "
            f"of {len(ceiling_counts)}), beside each 1-node column above:",
            "",
            "| per append | ceiling | "
            + " | ".join(f"{n} {nodes}n {f}".strip() for (n, nodes, f), _ in one)
            + " |",
            "|---|---:|" + "---:|" * len(one),
        ]
        for k in ("cpu_us", "loop_passes", "loop_sleeps", "tasks_created", "timers_armed"):
            ceiling = statistics.median(c[k] for c in ceiling_counts)
            ours = [f"{roles['leader'][k]:.2f}" for _, roles in one]
            lines.append(f"| {k} | {ceiling:.2f} | " + " | ".join(ours) + " |")
    if ceilings:
        lines += [
            "",
            "| p50, the same client loop (`Client.append`, acks=all, 100 B) | ms |",
            "|---|---:|",
            f"| do-nothing streaming server (bench/e2e.py's ceiling), median of "
            f"{len(ceilings)} ({min(ceilings):.3f}-{max(ceilings):.3f}) | "
            f"{statistics.median(ceilings):.3f} |",
        ]
        for (name, nodes, flush), runs in p50s.items():
            p50 = statistics.median(runs)
            lines.append(
                f"| replog {name} {nodes} node(s), flush={flush} "
                f"({p50 / statistics.median(ceilings):.2f}x the ceiling; runs "
                f"{', '.join(f'{x:.3f}' for x in runs)}) | {p50:.3f} |"
            )
    for (name, nodes, flush, role), rows in CPROFILES.items():
        own = sum(r[2] for r in rows)
        lines += [
            "",
            f"cProfile, {name} {nodes} node(s), flush={flush}, {role}: the event-loop thread's "
            f"functions by own time per append (profiled run: {own:.0f} us/append of "
            "Python under the profiler, which inflates each call by about the same)",
            "",
            "| function | calls / append | own us / append | cumulative us / append |",
            "|---|---:|---:|---:|",
        ]
        for fn, calls, tot, cum in rows[:CPROFILE_TOP]:
            lines.append(f"| `{fn}` | {calls:.2f} | {tot:.1f} | {cum:.1f} |")
    return "\n".join(lines) + "\n"


def render(args, info, table, p50s, tops) -> str:  # type: ignore[no-untyped-def]
    lines = [
        "Command: `.venv/bin/python bench/per_message.py "
        f"--nodes {args.nodes} --flush {args.flush} "
        f"--appends {args.appends} --repeats {args.repeats}{' --profile' if args.profile else ''}"
        + (" --ceiling" if args.ceiling else "")
        + (" --cprofile" if args.cprofile else "")
        + "".join(f" --tree {t}" for t in args.tree)
        + " --write-docs`",
        "",
        "- " + "; ".join(f"{k}: {v}" for k, v in info.items()),
        "",
        f"One client appends {args.appends} single 100-byte records one after the other, "
        "acks=all, default idempotent client over AppendStream; counts on each node per append "
        f"(medians of {args.repeats} runs; a follower's figure is the mean of the two). "
        "The counters are bench/count_hooks/sitecustomize.py's (its docstring says what each is).",
        "",
    ]
    header = ["per append"]
    cols = []
    for (name, nodes, flush), roles in table.items():
        for role in roles:
            if nodes == 1 and role == "all nodes":
                continue
            header.append(f"{name} {nodes}n {flush}: {role}".strip())
            cols.append(roles[role])
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|---" + "|---:" * len(cols) + "|")
    p50_row = ["client p50 (ms)"]
    for config, roles in table.items():
        for role in roles:
            if config[1] == 1 and role == "all nodes":
                continue
            p50_row.append(f"{statistics.median(p50s[config]):.3f}")
    lines.append("| " + " | ".join(p50_row) + " |")
    for k in KEYS:
        fmt = "{:.0f}" if k == "cpu_us" else "{:.2f}"
        lines.append("| " + " | ".join([k, *(fmt.format(c[k]) for c in cols)]) + " |")
    for (name, nodes, flush), roles in tops.items():
        lines += [
            "",
            f"Profile, {name} {nodes} node(s), flush={flush}: samples by innermost function",
            "",
        ]
        for role, rows in roles.items():
            lines.append(f"- {role}: " + "; ".join(f"`{n}` {s:.1%}" for n, s in rows[:10]))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
