"""Six `replog serve` processes: nodes 1-5 vote on `__cluster`, node 6 observes it.

Node 6 fetches and applies the metadata log without voting; it hosts data partitions like
any node (their replicas are all voters), forwards admin calls to the `__cluster` leader,
and finds the new leader after a failover. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import TopicNotFoundError
from tests.integration.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=90_000)
NODES = 6
OBSERVER = 6
META = {"topic": "__cluster", "partition": "0"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(tmp_path / "cluster", NODES)
    c.start()
    yield c
    c.kill_all()


def scrape(address: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples as (name, labels, value) from the Prometheus text format."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
        text = str(reply.read().decode())
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        pairs = [p.split("=", 1) for p in rest.rstrip("}").split(",") if "=" in p]
        samples.append((name, {k: v.strip('"') for k, v in pairs}, float(value)))
    return samples


def metadata_samples(
    cluster: DevCluster, node: int, name: str
) -> list[tuple[dict[str, str], float]]:
    """`node`'s `name` samples for `__cluster` (none when the node is not running)."""
    member = cluster.members[node]
    if not member.running:
        return []
    return [
        (labels, value)
        for sample, labels, value in scrape(member.metrics_address)
        if sample == name and META.items() <= labels.items()
    ]


def metadata_role(cluster: DevCluster, node: int) -> str | None:
    """The role of `node`'s `__cluster` replica, from its metrics (None: not running)."""
    roles = [
        labels["role"]
        for labels, value in metadata_samples(cluster, node, "replog_replica_role")
        if value == 1
    ]
    return roles[0] if len(roles) == 1 else None


def metadata_leader(cluster: DevCluster) -> int | None:
    leaders = [i for i in cluster.members if metadata_role(cluster, i) == "leader"]
    return leaders[0] if len(leaders) == 1 else None


def partitions_seen(client: Client, topic: str) -> dict[int, tuple[int, tuple[int, ...]]]:
    """partition -> (leader, replicas) as the client's bootstrap node answers GetMetadata
    (that node itself: the client's routing may have moved its other calls elsewhere)."""
    import grpc

    from replog.v1 import admin_pb2

    node = client._node(client.routing.bootstraps[0])
    try:
        meta = node.admin.GetMetadata(admin_pb2.GetMetadataRequest(topics=[topic]), timeout=10)
    except grpc.RpcError:
        return {}
    return {p.partition: (p.leader_id, tuple(p.replicas)) for p in meta.topics[0].partitions}


def read_values(client: Client, topic: str, partition: int, count: int) -> list[bytes] | None:
    """The first `count` committed values of the partition (None: not all committed yet)."""
    values: list[bytes] = []
    offset = 0
    while len(values) < count:
        fetched = client.fetch(topic, partition, offset, max_bytes=1 << 20)
        if fetched.next_offset == offset:
            return None
        values += fetched.records.values
        offset = fetched.next_offset
    return values


# length: one scenario told top to bottom (setup, faults, checks); split, it would hide the story
def test_a_sixth_node_observes_the_metadata_forwards_admin_calls_and_takes_writes(
    cluster: DevCluster,
) -> None:
    observer = cluster.members[OBSERVER]
    with Client(observer.address, retry=PATIENT) as via6:
        # an admin call through the observer: forwarded to the __cluster leader
        via6.create_topic("wide", NODES, 3)
        wait_until(lambda: via6.list_topics().get("wide") == NODES, "node 6 applied the topic")
        batches = {p: [b"p%d-r%d" % (p, i) for i in range(5)] for p in range(NODES)}
        for p, values in batches.items():
            res = via6.append("wide", p, values, acks="all")
            assert res.last_offset - res.base_offset == len(values) - 1
        for p, values in batches.items():
            count = len(values)
            got = wait_until(
                lambda p=p, n=count: read_values(via6, "wide", p, n), f"wide/{p} reads back"
            )
            assert got == values

        # GetMetadata from node 6 agrees with a voter's, and names node 6 in replicas
        voter = next(i for i in range(1, 6) if cluster.members[i].running)
        with Client(cluster.members[voter].address, retry=PATIENT) as via_voter:

            def agreed() -> dict[int, tuple[int, tuple[int, ...]]] | None:
                mine, theirs = partitions_seen(via6, "wide"), partitions_seen(via_voter, "wide")
                if len(mine) != NODES or len(theirs) != NODES:
                    return None
                for p in range(NODES):
                    (l6, r6), (lv, rv) = mine[p], theirs[p]
                    if r6 != rv or len(r6) != 3:
                        return None
                    # a node that hosts the partition knows its leader; both must name it
                    if (OBSERVER in r6 and l6 <= 0) or (voter in rv and lv <= 0):
                        return None
                    if l6 > 0 and lv > 0 and l6 != lv:
                        return None
                return mine

            seen = wait_until(agreed, "node 6 and a voter agree on the metadata")
            assert any(OBSERVER in replicas for _, replicas in seen.values())

            def described() -> list[tuple[int, int | None, tuple[int, ...], int]] | None:
                rows = []
                for client in (via6, via_voter):
                    info = client.describe_topic("wide")
                    rows.append(
                        sorted(
                            (d.partition, d.leader_id, d.replicas, d.high_watermark) for d in info
                        )
                    )
                return rows[0] if rows[0] == rows[1] and len(rows[0]) == NODES else None

            desc = wait_until(described, "describe from node 6 agrees with a voter's")
            for p, leader, replicas, hw in desc:
                assert leader in replicas and hw >= len(batches[p])
                assert replicas == seen[p][1]

        # the observer never votes or leads __cluster; the leader tracks its progress
        leader = wait_until(lambda: metadata_leader(cluster), "one __cluster leader")
        assert 1 <= leader <= 5
        assert metadata_role(cluster, OBSERVER) == "follower"
        fetch_ages = metadata_samples(cluster, leader, "replog_follower_fetch_age_seconds")
        assert str(OBSERVER) in {labels["replica"] for labels, _ in fetch_ages}, (
            "the __cluster leader tracks the observer's fetches"
        )

        # the __cluster leader dies: node 6 finds the new one and forwards to it
        cluster.members[leader].kill()
        wait_until(
            lambda: (new := metadata_leader(cluster)) is not None and new != leader,
            "the voters elect a new __cluster leader",
        )
        via6.create_topic("after-failover", 1, 3)  # 2 of 3 survive the kill
        wait_until(
            lambda: "after-failover" in via6.list_topics(), "node 6 applied the second topic"
        )
        # The partition's replicas may apply the create a moment after node 6 (a replica that
        # has not answers UNKNOWN_TOPIC): append once every node knows the topic's leader.
        wait_until(
            lambda: any((d.leader_id or 0) > 0 for d in via6.describe_topic("after-failover")),
            "after-failover has a leader",
        )

        def appended() -> bool | None:
            try:
                via6.append("after-failover", 0, [b"still here"], acks="all")
            except TopicNotFoundError:
                return None
            return True

        wait_until(appended, "the append to after-failover is taken")
        got = wait_until(
            lambda: read_values(via6, "after-failover", 0, 1), "after-failover reads back"
        )
        assert got == [b"still here"]
        assert metadata_role(cluster, OBSERVER) == "follower"
