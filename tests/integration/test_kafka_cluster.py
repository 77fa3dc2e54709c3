"""A Kafka client against a 3-node replog cluster through a leader SIGKILL: librdkafka's
idempotent producer (acks=all) keeps writing while the partition's leader is killed; it
finds the new leader through the Kafka Metadata of the surviving nodes (which list each
other's Kafka addresses, published in Nodes.Identify), and every record acknowledged to it
reads back exactly once, in order, through a Kafka consumer and through gRPC."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster, free_port

confluent_kafka = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECORDS = 400
KILL_AFTER = 150


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[DevCluster, dict[int, str]]]:
    c = DevCluster(tmp_path / "cluster", 3, extra_args=["--flush", "always"])
    kafka = {i: f"127.0.0.1:{free_port()}" for i in c.members}
    for i, node in c.members.items():
        node.args += ["--kafka-listen", kafka[i]]
    c.start()
    yield c, kafka
    c.kill_all()


def _leader(bootstrap: str, topic: str) -> int:
    client = admin.AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        t = client.list_topics(topic, timeout=30).topics[topic]
        if t.error is None and t.partitions[0].leader >= 0:
            return int(t.partitions[0].leader)
        time.sleep(0.2)
    raise AssertionError(f"no leader of {topic} in the Kafka metadata")


def test_every_acknowledged_record_reads_back_once_in_order_after_a_leader_sigkill(
    cluster: tuple[DevCluster, dict[int, str]],
) -> None:
    c, kafka = cluster
    bootstrap = ",".join(kafka.values())
    creator = admin.AdminClient({"bootstrap.servers": bootstrap})
    creator.create_topics([admin.NewTopic("events", 1, 3)])["events"].result(60)
    leader = _leader(bootstrap, "events")
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            "compression.type": "lz4",
        }
    )
    acked: list[tuple[int, int]] = []  # (record number, offset)
    failed: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append((int(msg.value()), msg.offset()))
        else:
            failed.append(err)

    killed = False
    for i in range(RECORDS):
        producer.produce("events", value=b"%d" % i, key=b"k", on_delivery=delivered)
        producer.poll(0)
        if i % 20 == 19:
            producer.flush(60)  # paces the writes: the kill lands between acknowledged ones
        if not killed and len(acked) >= KILL_AFTER:
            c.members[leader].kill()
            killed = True
    assert producer.flush(120) == 0
    assert killed and not failed, failed
    assert len(acked) == RECORDS  # the idempotent producer retried through the failover
    survivors = ",".join(a for i, a in kafka.items() if i != leader)
    got = _consume(survivors, RECORDS)
    numbers = [int(m.value()) for m in got]
    assert numbers == sorted(set(numbers)), "duplicates or reordering"
    assert {n for n, _ in acked} <= set(numbers)
    assert sorted(acked, key=lambda a: a[1]) == sorted(acked)  # offsets follow produce order
    assert {(int(m.value()), m.offset()) for m in got} >= set(acked)
    # The same records, at the same offsets, through gRPC.
    grpc_bootstrap = ",".join(a for i, a in c.addresses.items() if i != leader)
    with Client(grpc_bootstrap, timeout_s=60, retry=RetryPolicy(attempts_max=10)) as client:
        offset, seen = 0, []
        while len(seen) < len(got):
            result = client.fetch("events", 0, offset, max_wait_ms=500)
            seen += [(int(r.value), r.offset) for r in result.records.records()]  # type: ignore[union-attr]
            offset = result.next_offset
    assert seen == [(int(m.value()), m.offset()) for m in got]


def _consume(bootstrap: str, count: int) -> list[Any]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    got: list[Any] = []
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition("events", 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        deadline = time.monotonic() + 90
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        consumer.close()
    return got
