"""What the leader directory costs: news per leadership change, idle CPU, a restart's copy.

    .venv/bin/python bench/leader_directory.py [--partitions 2000] [--changes 20]
        [--windows 3] [--anchor-commit 8ac6d00] [--write]

Two 3-node clusters (127.0.0.1, port 0, plaintext, defaults but no leader balancer), one
after the other: this commit's code, then the anchor's (`git archive` of `--anchor-commit`,
the commit before the directory, run with the same client), with the same topics:
`--partitions` partitions of replication factor 1 (topics of 100: each node hosts about a
third of them, so the others' leaders come from the directory) and a topic "moves" of
`--changes` partitions of rf 3. For each: the partitions whose leader each node's
GetMetadata names (once every node's own replicas have leaders; the directory's are waited
for up to 60 s), then idle CPU per node (after 5 s idle, `--windows` windows of 10 s,
/proc/PID/stat; median), and the news sent while idle (metrics, this commit only). This
commit only: `--changes` leadership changes (TransferLeadership of each partition of
"moves", one at a time, each waited for on every node), with the ShareLeaders messages and
bytes the cluster sent for them (the nodes' `replog_leader_news_*` counters); then node 3
restarted (SIGTERM, start): the messages and bytes all nodes sent (its peers' copies of
their directories, and its own news of the partitions it leads again) until its GetMetadata
names every leader, and that time from its spawn.
With `--write` the section "Leader directory" of docs/benchmarks.md is replaced.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc

from bench._common import REPO_ROOT, bench_tmpdir, log, machine_info, process_cpu_s, write_section
from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.v1 import admin_pb2, admin_pb2_grpc

HEADING = "## Leader directory (bench/leader_directory.py)"
TOPIC_PARTITIONS = 100
PATIENT = RetryPolicy(deadline_ms=120_000)
NEWS = (
    "replog_leader_news_messages_sent_total",
    "replog_leader_news_sent_bytes_total",
    "replog_leader_news_messages_received_total",
)


def named(address: str) -> tuple[int, int, int]:
    """(partitions whose leader the node's GetMetadata names, partitions, of them hosted
    there and led)."""
    with grpc.insecure_channel(address) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        answer = stub.GetMetadata(admin_pb2.GetMetadataRequest(), timeout=60)
    parts = [p for t in answer.topics for p in t.partitions]
    hosted = [p for p in parts if answer.node_id in p.replicas]
    led = sum(1 for p in parts if p.leader_id > 0)
    return led, len(parts), sum(1 for p in hosted if p.leader_id > 0) - len(hosted)


def leaders_of(address: str, topic: str) -> dict[int, int]:
    with grpc.insecure_channel(address) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        answer = stub.GetMetadata(admin_pb2.GetMetadataRequest(topics=[topic]), timeout=60)
    return {p.partition: p.leader_id for t in answer.topics for p in t.partitions}


def epochs(address: str) -> int:
    """The sum of the epochs of "moves"'s partitions, as node `address` knows them (its
    own replicas: rf 3 on 3 nodes): how many elections happened between two calls."""
    with grpc.insecure_channel(address) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        answer = stub.GetMetadata(admin_pb2.GetMetadataRequest(topics=["moves"]), timeout=60)
    return sum(p.epoch for t in answer.topics for p in t.partitions)


def news(cluster: DevCluster) -> dict[str, float]:
    """The leader-news counters, summed over the running nodes."""
    total = dict.fromkeys(NEWS, 0.0)
    for node in cluster.members.values():
        if not node.running:
            continue
        with urllib.request.urlopen(f"http://{node.metrics_address}/metrics", timeout=30) as r:
            for line in r.read().decode().splitlines():
                name, _, value = line.partition(" ")
                if name in total:
                    total[name] += float(value)
    return total


def wait(what: str, check: Any, timeout_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        try:
            if check():
                return time.monotonic() - started
        except grpc.RpcError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s")


def idle_cpu(cluster: DevCluster, windows: int) -> list[float]:
    """Median CPU % of a core per node over `windows` windows of 10 s."""
    pids = [n.proc.pid for n in cluster.members.values() if n.proc is not None]
    samples: list[list[float]] = [[] for _ in pids]
    for _ in range(windows):
        before = [process_cpu_s(p) for p in pids]
        time.sleep(10)
        for i, p in enumerate(pids):
            samples[i].append(10 * (process_cpu_s(p) - before[i]))
    return [statistics.median(s) for s in samples]


def run(data: Path, args: argparse.Namespace, measure_news: bool) -> dict[str, Any]:
    # No leader balancer: its moves of "moves"'s leaders to their preferred replicas, about
    # 15 s after the create, are leadership changes (news) in the idle window otherwise.
    quiet = ["--leader-balance-interval-ms", "0"]
    cluster = DevCluster(data / "cluster", 3, extra_args=quiet)
    cluster.start()
    out: dict[str, Any] = {}
    try:
        with Client(cluster.bootstrap, timeout_s=120, retry=PATIENT) as client:
            for i in range(args.partitions // TOPIC_PARTITIONS):
                client.create_topic(f"spread-{i:03d}", TOPIC_PARTITIONS, 1)
            client.create_topic("moves", args.changes, 3)
            total = args.partitions + args.changes
            nodes = dict(cluster.addresses)
            wait(
                "every node's own replicas have leaders",
                lambda: all(named(a)[1] == total and named(a)[2] == 0 for a in nodes.values()),
                300,
            )
            with_leader = [named(a)[0] for a in nodes.values()]
            if measure_news:
                wait(
                    "every node names every leader",
                    lambda: all(named(a)[0] == total for a in nodes.values()),
                    60,
                )
                with_leader = [named(a)[0] for a in nodes.values()]
            out["named"] = with_leader
            out["total"] = total
            time.sleep(5)
            before = news(cluster) if measure_news else None
            epochs_before = epochs(nodes[1])
            out["cpu"] = idle_cpu(cluster, args.windows)
            out["idle_elections"] = epochs(nodes[1]) - epochs_before
            if before is not None:
                idle = news(cluster)
                out["idle_messages"] = idle[NEWS[0]] - before[NEWS[0]]
                out |= changes(cluster, client, args.changes, nodes)
                out |= restart(cluster, total)
    finally:
        cluster.kill_all()
    return out


def changes(
    cluster: DevCluster, client: Client, count: int, nodes: dict[int, str]
) -> dict[str, float]:
    before = news(cluster)
    for p in range(count):
        old = leaders_of(nodes[1], "moves")[p]
        client.transfer_leadership("moves", p)
        wait(
            f"moves/{p}: every node names its new leader",
            lambda p=p, old=old: all(  # type: ignore[misc]
                leaders_of(a, "moves")[p] not in (old, -1) for a in nodes.values()
            ),
            60,
        )
    time.sleep(1)  # (any late news counted too)
    after = news(cluster)
    return {
        "change_messages": (after[NEWS[0]] - before[NEWS[0]]) / count,
        "change_bytes": (after[NEWS[1]] - before[NEWS[1]]) / count,
    }


def restart(cluster: DevCluster, total: int) -> dict[str, float]:
    node = cluster.members[3]
    node.stop()
    before = news(cluster)
    started = time.monotonic()
    node.start()
    wait("node 3 names every leader", lambda: named(cluster.addresses[3])[0] == total, 120)
    after = news(cluster)
    return {
        "restart_messages": after[NEWS[0]] - before[NEWS[0]],
        "restart_bytes": after[NEWS[1]] - before[NEWS[1]],
        "restart_s": time.monotonic() - started,
    }


def anchor_tree(commit: str, data: Path) -> Path:
    tree = data / f"anchor-{commit}"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", commit, "replog"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def section(
    args: argparse.Namespace, info: dict[str, str], now: dict[str, Any], anchor: dict[str, Any]
) -> str:
    machine = "; ".join(f"{k}: {v}" for k, v in info.items())
    cpu = lambda r: " / ".join(f"{c:.1f}" for c in r["cpu"])  # noqa: E731
    named_ = lambda r: " / ".join(str(n) for n in r["named"])  # noqa: E731
    idle = f"{now['idle_messages']:.0f} messages ({now['idle_elections']})"
    per_message = now["change_bytes"] / max(now["change_messages"], 1e-9)
    change_row = (
        f"| one leadership change (TransferLeadership, mean of {args.changes}) | "
        f"{now['change_messages']:.2f} | {now['change_bytes']:.0f} | every node names the new "
        "leader |"
    )
    restart_row = (
        "| node 3 restarted: all nodes' messages until it names every leader (its peers' "
        "copies, paged, and its own news of the partitions it leads again) | "
        f"{now['restart_messages']:.0f} | "
        f"{now['restart_bytes']:.0f} | spawn to a GetMetadata naming all {now['total']} "
        f"leaders: {now['restart_s']:.1f} s |"
    )
    return f"""What every node knowing every partition's leader costs (issue 31 for Kafka clients,
issue 27 for costs that grow with the work). Command: `python bench/leader_directory.py
--partitions {args.partitions} --changes {args.changes} --windows {args.windows}
--anchor-commit {args.anchor_commit}`.

Machine: {machine}.

Two 3-node clusters (defaults, but no leader balancer: its moves would be leadership
changes in the idle window), one after the other in the same run: this commit, and the anchor
({args.anchor_commit}, the commit before the directory) with the same topics:
{args.partitions} partitions of replication factor 1 (each node hosts about a third) and
"moves", {args.changes} partitions of rf 3. *Leaders named*: partitions (of
{now["total"]}) whose leader each node's GetMetadata names. Idle CPU: median of
{args.windows} windows of 10 s per node, after 5 s idle.

| code | leaders named per node | idle CPU % per node | news sent while idle (elections then) |
|---|---|---|---|
| this commit | {named_(now)} | {cpu(now)} | {idle} |
| anchor {args.anchor_commit} | {named_(anchor)} | {cpu(anchor)} | (no directory) |

| what (this commit) | ShareLeaders messages | bytes | other |
|---|---|---|---|
{change_row}
{restart_row}

News goes out on leadership changes only: one entry to each of the 2 peers,
{per_message:.0f} bytes a message here (protobuf: the entry with a 5-character topic name
and the incarnation; gRPC's and HTTP/2's framing not counted); nothing is sent while nothing
changes (no timer). The news "while idle" is elections in that window (the sum of
"moves"'s epochs grew by the number in brackets: on this loaded machine some election
timeouts fire), about 2 messages each. A restarted node gets each peer's whole directory
once, in pages of at most 1,024 entries (~32 KiB). The machine is shared (load average
above): CPU figures carry the other work on it; compare the two rows of the same run.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--anchor-commit", default="8ac6d00")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    with bench_tmpdir(prefix="bench-leaders-") as data:
        info = machine_info(data)
        log("this commit")
        now = run(data / "now", args, measure_news=True)
        log(repr(now))
        tree = anchor_tree(args.anchor_commit, data)
        log(f"anchor {args.anchor_commit}")
        # The nodes' code (this process keeps its own): `python -m` puts the working
        # directory first on the path, so the nodes start in the anchor's tree.
        saved, cwd = os.environ.get("PYTHONPATH"), os.getcwd()
        os.environ["PYTHONPATH"] = str(tree)
        os.chdir(tree)
        try:
            anchor = run(data / "anchor", args, measure_news=False)
        finally:
            os.chdir(cwd)
            if saved is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = saved
        log(repr(anchor))
    body = section(args, info, now, anchor)
    print(body)
    if args.write:
        write_section(HEADING, body)


if __name__ == "__main__":
    main()
