"""Every node names the leader of every partition, also of those it hosts no replica of (the
leader directory: nodes tell each other of leadership changes), through gRPC's GetMetadata
and Kafka's Metadata (librdkafka's AdminClient against each node's own Kafka listener);
after a leader's SIGKILL the survivors' answers move to the new leader."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster, free_port
from replog.v1 import admin_pb2, admin_pb2_grpc

admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Leaders = dict[tuple[str, int], int]  # (topic, partition) -> leader id


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[DevCluster, dict[int, str]]]:
    c = DevCluster(tmp_path / "cluster", 4)
    kafka = {i: f"127.0.0.1:{free_port()}" for i in c.members}
    for i, node in c.members.items():
        node.args += ["--kafka-listen", kafka[i]]
    c.start()
    yield c, kafka
    c.kill_all()


def _grpc_leaders(address: str, topics: list[str]) -> tuple[Leaders, dict[tuple[str, int], Any]]:
    with grpc.insecure_channel(address) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        answer = stub.GetMetadata(admin_pb2.GetMetadataRequest(topics=topics), timeout=30)
    leaders = {(t.name, p.partition): p.leader_id for t in answer.topics for p in t.partitions}
    replicas = {
        (t.name, p.partition): tuple(p.replicas) for t in answer.topics for p in t.partitions
    }
    return leaders, replicas


def _kafka_leaders(bootstrap: str, topics: list[str]) -> Leaders:
    client = admin.AdminClient({"bootstrap.servers": bootstrap})
    found = client.list_topics(timeout=30).topics
    return {
        (name, p): int(found[name].partitions[p].leader)
        for name in topics
        if name in found and found[name].error is None
        for p in found[name].partitions
    }


def _wait(what: str, check: Callable[[], Any], timeout_s: float = 90) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (grpc.RpcError, KeyError) as exc:
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"{what}: {last!r}")


def _agreed(nodes: dict[int, str], kafka: dict[int, str], topics: list[str], expected: int) -> Any:
    """Every node's GetMetadata and Kafka Metadata name one leader per partition (the same
    on every node, a replica of it): that map, or None."""
    seen: list[Leaders] = []
    for i in nodes:
        leaders, replicas = _grpc_leaders(nodes[i], topics)
        if len(leaders) != expected or any(
            leader not in replicas[key] for key, leader in leaders.items()
        ):
            return None
        seen += [leaders, _kafka_leaders(kafka[i], topics)]
    return seen[0] if all(s == seen[0] for s in seen) else None


def test_every_node_names_every_partitions_leader_and_follows_a_failover(
    cluster: tuple[DevCluster, dict[int, str]],
) -> None:
    c, kafka = cluster
    with Client(c.bootstrap, timeout_s=60, retry=RetryPolicy(attempts_max=10)) as client:
        client.create_topic("spread", 4, 2)  # each node hosts about half of the partitions
        client.create_topic("moves", 1, 3)  # on 3 of the 4 nodes
        topics = ["spread", "moves"]
        nodes = dict(c.addresses)
        leaders = _wait(
            "every node names each partition's leader",
            lambda: _agreed(nodes, kafka, topics, 5),
        )
        _, replicas = _grpc_leaders(nodes[1], topics)
        assert any(1 not in replicas[("spread", p)] for p in range(4))  # some not hosted on 1

        old = leaders[("moves", 0)]
        c.members[old].kill()
        survivors = {i: a for i, a in nodes.items() if i != old}
        outside = [i for i in survivors if i not in replicas[("moves", 0)]]
        assert outside  # a node that hosts no replica of it follows the failover too
        moved = _wait(
            "the survivors name the new leader of moves/0",
            lambda: (
                (got := _agreed(survivors, {i: kafka[i] for i in survivors}, ["moves"], 1))
                and got[("moves", 0)] != old
                and got
            ),
        )
        assert moved[("moves", 0)] in replicas[("moves", 0)]
        # and the new leader is the real one: it takes a write
        client.append("moves", 0, [b"after the failover"])
