"""Consumer groups on a real 3-node cluster: offsets survive the coordinator's node, a
replaced member (a zombie) cannot commit, and a group under load, with members joining,
leaving, SIGKILLed and paused past their session and its coordinator killed, never skips a
record (at least once: every acknowledged record is in some member's ledger).

Every wait is on a condition with a generous deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.client.groups import GroupDescription
from replog.devcluster import DevCluster
from replog.errors import ReplogError, UnknownMemberError
from tests.integration.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
SESSION_MS = 2000
SERVER_ARGS = [
    "--group-session-timeout-ms-min", "500",
    "--group-heartbeat-interval-ms", "300",
    "--group-offsets-partitions", "4",
    "--group-offsets-snapshot-records", "100",  # failovers load from snapshots
]  # fmt: skip
PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=90_000)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(tmp_path / "cluster", 3, extra_args=SERVER_ARGS)
    c.start()
    yield c
    c.kill_all()


def coordinator_of(cluster: DevCluster, client: Client, group: str) -> int:
    address = client.groups.find_coordinator(group)
    (node,) = [i for i, a in cluster.addresses.items() if a == address]
    return node


class Producer:
    """Appends batches round-robin over the partitions (acks=all) in a thread; remembers
    every acknowledged record. Bounded in count and time."""

    RECORDS_MAX = 200_000
    RUN_S_MAX = 300.0

    def __init__(self, client: Client, topic: str, partitions: int) -> None:
        self.client = client
        self.topic = topic
        self.partitions = partitions
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        deadline = time.monotonic() + self.RUN_S_MAX
        while not self._stop.is_set() and n < self.RECORDS_MAX and time.monotonic() < deadline:
            p = (n // 10) % self.partitions
            batch = [b"r%07d" % (n + i) for i in range(10)]
            try:
                res = self.client.append(self.topic, p, batch, acks="all")
            except ReplogError as err:
                self.errors.append(err.reason)
                continue
            for i, value in enumerate(batch):
                self.acked[(p, res.base_offset + i)] = value
            n += len(batch)
            self._stop.wait(0.005)  # a steady load, not a flood: the machine is shared

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def wait_acked(self, count: int) -> None:
        wait_until(lambda: len(self.acked) >= count, f"{count} records acked ({self.errors[-3:]})")


class Member:
    """A group member in its own process (tests/integration/group_member.py)."""

    def __init__(self, name: str, work: Path, bootstrap: str, topic: str, group: str) -> None:
        self.name = name
        self.ledger = work / f"{name}.ledger"
        self.log = work / f"{name}.log"
        self.args = [bootstrap, topic, group, str(self.ledger), str(SESSION_MS)]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Member:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REPLOG_")}
        env["PYTHONPATH"] = str(ROOT)
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.group_member", *self.args],
                stdout=log,
                stderr=log,
                env=env,
                cwd=ROOT,
            )
        return self

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def wait_exit(self) -> int:
        assert self.proc is not None
        return self.proc.wait(60)

    def records(self) -> list[tuple[int, int, bytes]]:
        if not self.ledger.exists():
            return []
        out = []
        for line in self.ledger.read_text().splitlines():
            if line and not line.startswith("#"):
                p, o, v = line.split()
                out.append((int(p), int(o), bytes.fromhex(v)))
        return out

    def notes(self) -> list[str]:
        text = self.ledger.read_text() if self.ledger.exists() else ""
        return [line for line in text.splitlines() if line.startswith("#")]


def describe(client: Client, group: str) -> GroupDescription | None:
    try:
        return client.describe_group(group)
    except ReplogError:
        return None


def holders(d: GroupDescription) -> dict[str, set[tuple[str, int]]]:
    """client_id -> the partitions that member holds."""
    return {m.client_id: set(m.partitions) for m in d.members}


def settled_with(
    client: Client, group: str, names: set[str], partitions: int
) -> GroupDescription | None:
    """The group's description once exactly `names` are members and every partition is
    held (STABLE)."""
    d = describe(client, group)
    if d is None or d.state != "STABLE" or {m.client_id for m in d.members} != names:
        return None
    if sum(len(m.partitions) for m in d.members) != partitions:
        return None
    return d


class CommitWatch:
    """Samples the group's committed offsets in a thread: a commit that goes backwards
    (a zombie overwriting its successor's progress) is recorded."""

    def __init__(self, client: Client, group: str) -> None:
        self.client = client
        self.group = group
        self.highest: dict[tuple[str, int], int] = {}
        self.regressions: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + 600
        while not self._stop.wait(0.2) and time.monotonic() < deadline:
            try:
                offsets = self.client.committed_offsets(self.group)
            except ReplogError:
                continue
            self.samples += 1
            for c in offsets:
                key = (c.topic, c.partition)
                if c.offset < self.highest.get(key, -1):
                    self.regressions.append(f"{key}: {self.highest[key]} -> {c.offset}")
                self.highest[key] = max(self.highest.get(key, -1), c.offset)

    def __enter__(self) -> CommitWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def test_committed_offsets_survive_the_loss_of_the_coordinator_node(cluster: DevCluster) -> None:
    with Client(cluster.bootstrap, retry=PATIENT, timeout_s=10) as client:
        client.create_topic("t", 3, 3)
        offsets = {("t", p): 100 + p for p in range(3)}
        client.commit_offsets("fo", {tp: (o, f"m{o}") for tp, o in offsets.items()})
        first = coordinator_of(cluster, client, "fo")
        cluster.members[first].kill()
        got = {
            (c.topic, c.partition): (c.offset, c.metadata) for c in client.committed_offsets("fo")
        }
        assert got == {tp: (o, f"m{o}") for tp, o in offsets.items()}
        second = coordinator_of(cluster, client, "fo")
        assert second != first
        client.commit_offsets("fo", {("t", 0): 200})
        cluster.members[first].start()
        cluster.members[second].kill()  # the offsets written under the second one survive too
        got = {(c.topic, c.partition): c.offset for c in client.committed_offsets("fo")}
        assert got == {("t", 0): 200, ("t", 1): 101, ("t", 2): 102}


def test_a_member_replaced_after_its_session_cannot_commit_over_its_successor(
    cluster: DevCluster,
) -> None:
    with Client(cluster.bootstrap, retry=PATIENT, timeout_s=10) as client:
        client.create_topic("z", 2, 3)
        for p in range(2):
            client.append("z", p, [b"x"] * 20)
        zombie, _session = client.groups.join("zg", ["z"], session_timeout_ms=1000)
        assert zombie.partitions == {("z", 0), ("z", 1)}
        client.groups.commit("zg", {("z", 0): 1}, zombie.member_id, zombie.generation)
        # The zombie stops heartbeating (a long GC pause, a partition from the coordinator).
        with client.consumer("z", group="zg", session_timeout_ms=2000) as successor:
            taken: list[int] = []

            def everything_consumed() -> bool:
                taken.extend(r.offset for r in successor.poll(0.2))
                return len(taken) >= 39 and successor.assignment() == {("z", 0), ("z", 1)}

            wait_until(everything_consumed, "the successor takes both partitions and reads them")
            successor.commit()
            committed = {(c.topic, c.partition): c.offset for c in client.committed_offsets("zg")}
            assert min(committed.values()) > 1
            with pytest.raises(UnknownMemberError):
                client.groups.commit("zg", {("z", 0): 1}, zombie.member_id, zombie.generation)
            after = {(c.topic, c.partition): c.offset for c in client.committed_offsets("zg")}
            assert after == committed


# length: one scenario told top to bottom (setup, faults, checks); split, it would hide the story
def test_no_record_is_skipped_by_a_group_through_joins_leaves_kills_and_a_coordinator_failover(
    cluster: DevCluster, tmp_path: Path
) -> None:
    topic, group, partitions = "events", "ledger", 6
    with Client(cluster.bootstrap, retry=PATIENT, timeout_s=10) as client:
        client.create_topic(topic, partitions, 3)
        members = {
            name: Member(name, tmp_path, cluster.bootstrap, topic, group)
            for name in ("m1", "m2", "m3", "m4")
        }
        try:
            with (
                Producer(client, topic, partitions) as producer,
                CommitWatch(client, group) as watch,
            ):
                producer.wait_acked(300)
                for name in ("m1", "m2", "m3"):
                    members[name].start()
                wait_until(
                    lambda: settled_with(client, group, {"m1", "m2", "m3"}, partitions),
                    "three members share the partitions",
                )
                members["m4"].start()  # joins under load
                d = wait_until(
                    lambda: settled_with(client, group, {"m1", "m2", "m3", "m4"}, partitions),
                    "a fourth member gets partitions",
                )
                assert holders(d)["m4"]
                members["m2"].signal(signal.SIGTERM)  # leaves (commits, LeaveGroup)
                assert members["m2"].wait_exit() == 0
                wait_until(
                    lambda: settled_with(client, group, {"m1", "m3", "m4"}, partitions),
                    "the one that left is gone",
                )
                killed_at = time.monotonic()
                members["m1"].signal(signal.SIGKILL)
                wait_until(
                    lambda: settled_with(client, group, {"m3", "m4"}, partitions),
                    "the killed member's partitions move",
                )
                moved_s = time.monotonic() - killed_at
                assert moved_s < SESSION_MS / 1000 + 10, f"partitions moved after {moved_s:.1f}s"
                producer.wait_acked(len(producer.acked) + 300)

                coordinator = coordinator_of(cluster, client, group)
                cluster.members[coordinator].kill()  # members find the new one and rejoin
                producer.wait_acked(len(producer.acked) + 300)
                wait_until(
                    lambda: settled_with(client, group, {"m3", "m4"}, partitions),
                    "the members settle with the new coordinator",
                )
                cluster.members[coordinator].start()

                members["m3"].signal(signal.SIGSTOP)  # a zombie: paused past its session
                wait_until(
                    lambda: settled_with(client, group, {"m4"}, partitions),
                    "the paused member's partitions move",
                )
                members["m3"].signal(signal.SIGCONT)  # it finds out, and joins again
                wait_until(
                    lambda: settled_with(client, group, {"m3", "m4"}, partitions),
                    "the paused member rejoins",
                )
                producer.wait_acked(len(producer.acked) + 300)
                producer.stop()

                def caught_up() -> bool:
                    d = describe(client, group)
                    return d is not None and all(p.lag == 0 for p in d.partitions)

                wait_until(caught_up, "the group commits every acknowledged record")
            for name in ("m3", "m4"):
                members[name].signal(signal.SIGTERM)
                assert members[name].wait_exit() == 0
        finally:
            for m in members.values():
                m.signal(signal.SIGKILL)
                if m.proc is not None:
                    m.proc.wait(30)

        consumed = {(p, o): v for m in members.values() for p, o, v in m.records()}
        missing = sorted(k for k in producer.acked if k not in consumed)
        assert not missing, f"{len(missing)} acknowledged records never consumed: {missing[:10]}"
        wrong = [k for k, v in producer.acked.items() if consumed[k] != v]
        assert not wrong, f"records consumed with other values: {wrong[:10]}"
        assert watch.samples > 10 and not watch.regressions, watch.regressions[:5]
        deliveries = sum(len(m.records()) for m in members.values())
        print(
            f"acked {len(producer.acked)}, delivered {deliveries} "
            f"({deliveries - len(consumed)} again), SIGKILLed member's partitions moved in "
            f"{moved_s:.2f}s, notes {[n for m in members.values() for n in m.notes()][:8]}"
        )
