"""The control plane on one node and on three: topics of every valid name length can be
deleted and created again, and a local failure leaves everything else working."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from replog.client import AppendResult, Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import UnavailableError
from replog.v1 import admin_pb2, admin_pb2_grpc
from tests.integration.servers import ServerProcess
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration

PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=90_000)
TOPIC_NAME_CHARS_MAX = 249


def name_of_length(k: int) -> str:
    """A distinct valid topic name of exactly `k` characters."""
    return (f"t{k}-" + "x" * TOPIC_NAME_CHARS_MAX)[:k]


NAMES = [name_of_length(k) for k in range(1, TOPIC_NAME_CHARS_MAX + 1)]


def topic_dirs(data_dir: Path) -> list[str]:
    """Topic directories left on disk (the metadata log and the trash aside; files such as
    `node-identity.json` are not topics)."""
    skip = ("__cluster", ".trash~")
    return sorted(p.name for p in data_dir.iterdir() if p.is_dir() and p.name not in skip)


def no_replica_failures(metrics: str) -> bool:
    return not [
        line
        for line in metrics.splitlines()
        if line.startswith("replog_replica_failures{") and not line.endswith(" 0.0")
    ]


def test_every_name_length_can_be_deleted_and_created_again_on_one_node(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", tmp_path)
    try:
        server.start()
        with Client(server.address, timeout_s=30, retry=RetryPolicy(attempts_max=3)) as client:
            for round_ in range(2):
                for name in NAMES:
                    client.create_topic(name, 1)
                    res = client.append(name, 0, [b"round-%d" % round_])
                    fetched = client.fetch(name, 0, res.base_offset)
                    assert fetched.records.values == [b"round-%d" % round_]  # never the old one
                    client.delete_topic(name)
                assert client.list_topics() == {}
            wait_until(lambda: topic_dirs(tmp_path / "data") == [], "every topic dir is gone")
            assert no_replica_failures(server.metrics())
        assert server.terminate() == 0
    finally:
        server.kill()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(tmp_path / "cluster", 3)
    c.start()
    yield c
    c.kill_all()


def test_every_name_length_can_be_deleted_and_created_again_on_three_nodes(
    cluster: DevCluster,
) -> None:
    with Client(cluster.bootstrap, timeout_s=30, retry=PATIENT) as client:
        for _round in range(2):
            for name in NAMES:
                client.create_topic(name, 1, replication_factor=3)
                client.delete_topic(name)
            assert client.list_topics() == {}
        # Nothing is wedged: a topic created now works, on every node.
        client.create_topic("after", 1, replication_factor=3)
        res = client.append("after", 0, [b"still working"], acks="all")
        assert client.fetch("after", 0, res.base_offset).records.values == [b"still working"]
    for node in cluster.members.values():
        wait_until(lambda n=node: topic_dirs(n.data_dir) == ["after"], "deleted topics are gone")


def test_a_local_failure_is_reported_for_its_partition_retried_and_blocks_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = tmp_path / "no-space"
    flag.touch()
    monkeypatch.setenv("FAULTY_SERVE_TASK", "no-space")
    monkeypatch.setenv("FAULTY_SERVE_FLAG", str(flag))
    server = ServerProcess(tmp_path / "data", tmp_path, module="tests.integration.faulty_serve")
    try:
        server.start()
        with Client(server.address, timeout_s=30, retry=RetryPolicy(attempts_max=1)) as client:
            client.create_topic("broken-orders", 2)  # committed; its directory cannot be made
            with pytest.raises(UnavailableError, match="No space left"):
                client.append("broken-orders", 0, [b"x"])
            (p0, p1) = client.describe_topic("broken-orders")
            assert (p0.leader_id, p1.leader_id) == (None, None)  # no replica running
            metrics = server.metrics()
            assert (
                'replog_replica_failures{action="create",partition="",topic="broken-orders"}'
                in (metrics)
            )
            # Every other command and topic works meanwhile.
            client.create_topic("fine", 1)
            assert client.append("fine", 0, [b"ok"]).base_offset == 2  # marker, header
            client.delete_topic("fine")
            flag.unlink()  # the disk has room again: the retry (with backoff) succeeds
            res = wait_until(lambda: _append_or_none(client), "broken-orders recovers")
            assert res.base_offset == 2  # the epoch marker, the batch header
            assert no_replica_failures(server.metrics())
        assert "replica.failed" in server.log_text() and "replica.recovered" in server.log_text()
    finally:
        server.kill()


def _append_or_none(client: Client) -> AppendResult | None:
    try:
        return client.append("broken-orders", 0, [b"at last"])
    except UnavailableError:
        return None


def test_describe_topic_answers_a_page_of_partitions(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", tmp_path)
    try:
        server.start()
        with (
            Client(server.address, timeout_s=30, retry=PATIENT) as client,
            grpc.insecure_channel(server.address) as channel,
        ):
            client.create_topic("paged", 40, format="raw")
            client.append("paged", 12, [b"x", b"y"])
            stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]

            def describe(**paging: int) -> admin_pb2.TopicDescription:
                request = admin_pb2.DescribeTopicRequest(name="paged", **paging)
                answer: admin_pb2.TopicDescription = stub.DescribeTopic(request, timeout=30)
                assert answer.partition_count == 40
                return answer

            page = describe(first_partition=10, partitions_max=5)
            assert [p.partition for p in page.partitions] == [10, 11, 12, 13, 14]
            assert page.partitions[2].high_watermark >= 2  # (its records, after control ones)
            last = describe(first_partition=38, partitions_max=5)
            assert [p.partition for p in last.partitions] == [38, 39]
            assert list(describe(first_partition=40).partitions) == []
            assert [p.partition for p in describe().partitions] == list(range(40))
        assert server.terminate() == 0
    finally:
        server.kill()
