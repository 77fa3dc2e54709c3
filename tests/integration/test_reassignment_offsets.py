"""Moving a partition of `__consumer_offsets` (the consumer groups' committed offsets) off
its leader's node, or off a follower's, while a group consumes and commits: the offsets
committed before the move are still there after it, the group goes on consuming and
committing (every acknowledged record reaches it), and the node left out deletes its
replica."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from replog.client import Client
from replog.devcluster import DevCluster
from replog.errors import ReplogError
from replog.server.control.topics import OFFSETS_TOPIC
from tests.integration.test_cluster import PATIENT
from tests.integration.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TOPIC, GROUP, PARTITIONS = "orders", "billing", 2
SESSION_MS = 3000
DEADLINE_S = 120.0
SERVER_ARGS = [
    "--group-offsets-partitions", "1",  # every group's offsets on partition 0
    "--group-session-timeout-ms-min", "500",
    "--group-heartbeat-interval-ms", "300",
]  # fmt: skip


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(tmp_path / "cluster", 4, extra_args=SERVER_ARGS)
    c.start()
    yield c
    c.kill_all()


class Producer:
    """Appends batches of 10 (acks=all) to the topic's partitions in turn, in a thread;
    remembers every acknowledged record. Bounded in count and time."""

    RECORDS_MAX = 100_000
    RUN_S_MAX = 300.0

    def __init__(self, client: Client) -> None:
        self.client = client
        self.acked: set[tuple[int, int]] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        deadline = time.monotonic() + self.RUN_S_MAX
        while not self._stop.is_set() and n < self.RECORDS_MAX and time.monotonic() < deadline:
            p = (n // 10) % PARTITIONS
            try:
                res = self.client.append(TOPIC, p, [b"r%07d" % (n + i) for i in range(10)])
            except ReplogError as err:
                self.errors.append(err.reason)
                continue
            self.acked.update((p, res.base_offset + i) for i in range(10))
            n += 10
            self._stop.wait(0.01)  # a steady load, not a flood: the machine is shared

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


class Member:
    """One member of GROUP in a thread: polls, and commits what it got after each poll.
    Bounded in time."""

    RUN_S_MAX = 300.0

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.seen: set[tuple[int, int]] = set()
        self.commits = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + self.RUN_S_MAX
        with (
            Client(self.bootstrap, retry=PATIENT, timeout_s=10) as client,
            client.consumer(TOPIC, group=GROUP, session_timeout_ms=SESSION_MS) as consumer,
        ):
            while not self._stop.is_set() and time.monotonic() < deadline:
                try:
                    records = consumer.poll(0.2)
                    self.seen.update((r.partition, r.offset) for r in records)
                    if records:
                        consumer.commit()
                        self.commits += 1
                except ReplogError as err:  # e.g. the coordinator moved: it finds the next
                    self.errors.append(err.reason)

    def __enter__(self) -> Member:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)


def committed(client: Client) -> dict[int, int]:
    try:
        return {c.partition: c.offset for c in client.committed_offsets(GROUP)}
    except ReplogError:
        return {}


def offsets_leader(client: Client) -> int | None:
    """The leader of the offsets partition (the group's coordinator), from DescribeTopic
    (answered by a replica: GetMetadata's leader is 0 on a node that hosts none)."""
    try:
        return client.describe_topic(OFFSETS_TOPIC)[0].leader_id or None
    except ReplogError:
        return None


def moved(client: Client, target: tuple[int, ...]) -> bool:
    """The offsets partition is on `target` alone, its move recorded as complete."""
    try:
        info = client.describe_topic(OFFSETS_TOPIC)[0]
    except ReplogError:
        return False
    return (
        not info.target_replicas
        and set(info.replicas) == set(target)
        and not info.observers
        and info.leader_id in target
    )


@pytest.mark.parametrize("leaving", ["coordinator", "follower"])
def test_committed_offsets_survive_moving_their_partition_to_another_node(
    cluster: DevCluster, leaving: str
) -> None:
    """`leaving`: the node the move leaves out is the coordinator's (the leader of the
    offsets partition: it hands leadership over, the group's next coordinator loads the
    offsets from the log and the members join it again), or a follower's."""
    with Client(cluster.bootstrap, retry=PATIENT, timeout_s=10) as client:
        client.create_topic(TOPIC, PARTITIONS, 3)
        with Producer(client) as producer, Member(cluster.bootstrap) as member:
            wait_until(
                lambda: sum(committed(client).values()) >= 200,
                "the group commits its progress",
                DEADLINE_S,
            )
            old = client.describe_topic(OFFSETS_TOPIC)[0].replicas
            assert len(old) == 3
            coordinator = wait_until(lambda: offsets_leader(client), "a coordinator is known")
            (new,) = set(cluster.members) - set(old)
            out = coordinator if leaving == "coordinator" else min(set(old) - {coordinator})
            target = (*(r for r in old if r != out), new)
            before = committed(client)
            client.reassign_partition(OFFSETS_TOPIC, 0, target)
            wait_until(lambda: moved(client, target), f"{old} moved to {target}", DEADLINE_S)

            after = committed(client)
            assert set(after) == set(before)
            assert all(after[p] >= before[p] for p in before), (before, after)
            # The group goes on: its commits advance past the move.
            wait_until(
                lambda: (
                    (now := committed(client)) and all(now[p] > after[p] for p in after) and now
                ),
                "the group commits again after the move",
                DEADLINE_S,
            )
            assert wait_until(lambda: offsets_leader(client), "a leader") != out
            producer.stop()
            acked = set(producer.acked)
            ends = {p: 1 + max(o for q, o in acked if q == p) for p in range(PARTITIONS)}
            wait_until(
                lambda: committed(client) == ends,
                f"the group commits every acknowledged record ({ends})",
                DEADLINE_S,
            )
            missing = acked - member.seen
            assert not missing, f"{len(missing)} acknowledged records never consumed"
        wait_until(
            lambda: not (cluster.members[out].data_dir / OFFSETS_TOPIC).exists(),
            f"node {out} deleted its replica of {OFFSETS_TOPIC}",
            DEADLINE_S,
        )
        logs = (cluster.members[new].data_dir / OFFSETS_TOPIC / "partition_0").glob("*.log")
        assert sum(p.stat().st_size for p in logs) > 0
        # A client that never saw the old coordinator reads the same offsets.
        with Client(cluster.members[new].address, retry=PATIENT, timeout_s=10) as fresh:
            assert committed(fresh) == ends
        assert member.commits > 0
