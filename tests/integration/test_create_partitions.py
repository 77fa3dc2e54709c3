"""CreatePartitions on real servers: a topic grows (never shrinks), the new partitions take
appends and reads at once, keyed records of a producer made after the change use the new
count, and every refusal leaves the topic as it was."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from replog.client import AsyncClient, Client, RetryPolicy
from replog.client.partitioner import partition_for_key
from replog.devcluster import DevCluster
from replog.errors import InvalidArgumentError, TooManyPartitionsError, TopicNotFoundError
from replog.server.meta.placement import assign
from tests.integration.servers import ServerProcess
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration

PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=90_000)


def values_of(client: Client, topic: str, partition: int) -> list[bytes | None]:
    fetched = client.fetch(topic, partition, 0, max_bytes=1 << 20)
    return list(fetched.records.values)


def grow_and_use(client: Client, topic: str) -> None:
    """`topic` has 2 partitions: grow it to 5, append to and read every new partition,
    and send keyed records with a producer made afterwards."""
    assert client.create_partitions(topic, 5) == 5
    assert client.partition_count(topic) == 5
    assert [p.partition for p in client.describe_topic(topic)] == [0, 1, 2, 3, 4]
    for p in (2, 3, 4):
        client.append(topic, p, [f"new-{p}".encode()])
        assert values_of(client, topic, p)[-1] == f"new-{p}".encode()
    keys = [f"key-{i}".encode() for i in range(40)]
    assert {partition_for_key(k, 5) for k in keys} - {0, 1}  # some keys move to new ones
    producer = client.producer(topic, linger_ms=1)
    try:
        placed = [producer.send(b"v", key=k).result(60).partition for k in keys]
    finally:
        producer.close(60)
    assert placed == [partition_for_key(k, 5) for k in keys]  # murmur2(key) % 5


def test_a_topic_grows_and_its_new_partitions_serve_at_once(
    shared_server: ServerProcess,
) -> None:
    with Client(shared_server.address, timeout_s=30, retry=PATIENT) as client:
        client.create_topic("grow-orders", 2, format="raw")
        client.append("grow-orders", 0, [b"old-0"])
        grow_and_use(client, "grow-orders")
        assert values_of(client, "grow-orders", 0)[0] == b"old-0"  # old records stay


def test_refusals_change_nothing(shared_server: ServerProcess) -> None:
    with Client(shared_server.address, timeout_s=30, retry=RetryPolicy(attempts_max=3)) as c:
        c.create_topic("grow-refused", 3, format="raw")
        for count in (0, 2, 3):  # fewer, or the same: grow only
            with pytest.raises(InvalidArgumentError):
                c.create_partitions("grow-refused", count)
        with pytest.raises(TopicNotFoundError):
            c.create_partitions("grow-nope", 4)
        for internal in ("__consumer_offsets", "__cluster"):
            with pytest.raises(InvalidArgumentError):
                c.create_partitions(internal, 100)
        assert c.partition_count("grow-refused") == 3
        assert len(c.describe_topic("grow-refused")) == 3


def test_a_grow_past_partitions_max_is_refused_and_a_grow_survives_a_restart(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory("--partitions-max", "4").start()
    with Client(server.address, timeout_s=30, retry=RetryPolicy(attempts_max=3)) as c:
        c.create_topic("grow-capped", 2, format="raw")
        with pytest.raises(TooManyPartitionsError):
            c.create_partitions("grow-capped", 5)
        assert c.partition_count("grow-capped") == 2
        assert c.create_partitions("grow-capped", 4) == 4  # within the cap
        c.append("grow-capped", 3, [b"on-3"])
    server.kill()  # the grow is in the metadata log: a restart replays it
    server.start()
    with Client(server.address, timeout_s=30, retry=PATIENT) as c:
        assert c.partition_count("grow-capped") == 4
        assert values_of(c, "grow-capped", 3) == [b"on-3"]
        c.append("grow-capped", 3, [b"again"])
        assert values_of(c, "grow-capped", 3) == [b"on-3", b"again"]


@pytest.mark.slow
def test_three_nodes_start_the_new_replicas_where_placement_puts_them(tmp_path: Path) -> None:
    cluster = DevCluster(tmp_path / "cluster", 3)
    cluster.start()
    try:
        with Client(cluster.bootstrap, timeout_s=30, retry=PATIENT) as client:
            client.create_topic("grow-cluster", 2, 2, format="raw")
            grow_and_use(client, "grow-cluster")
            replicas = [p.replicas for p in client.describe_topic("grow-cluster")]
            assert replicas == list(assign("grow-cluster", 5, 2, [1, 2, 3]))
    finally:
        cluster.kill_all()


def test_cli_topic_alter_grows_and_reports_a_refusal(shared_server: ServerProcess) -> None:
    def replog(*args: str) -> subprocess.CompletedProcess[bytes]:
        cmd = [sys.executable, "-m", "replog", *args, "--address", shared_server.address]
        return subprocess.run(cmd, capture_output=True, timeout=60, check=False)

    assert replog("topic", "create", "grow-cli", "--partitions", "1").returncode == 0
    grown = replog("topic", "alter", "grow-cli", "--partitions", "3")
    assert grown.returncode == 0, grown.stderr
    assert b"topic grow-cli has 3 partition(s)" in grown.stdout
    refused = replog("topic", "alter", "grow-cli", "--partitions", "2")
    assert refused.returncode != 0
    assert b"INVALID_ARGUMENT" in refused.stderr


def test_the_async_client_grows_a_topic(shared_server: ServerProcess) -> None:
    async def scenario() -> None:
        async with AsyncClient(shared_server.address) as client:
            await client.create_topic("grow-async", 1, format="raw")
            assert await client.create_partitions("grow-async", 2) == 2
            assert (await client.list_topics())["grow-async"] == 2
            with pytest.raises(InvalidArgumentError):
                await client.create_partitions("grow-async", 2)

    asyncio.run(scenario())


def test_a_group_consumer_gets_the_new_partitions_without_rejoining(
    shared_server: ServerProcess,
) -> None:
    """The coordinator sees the count change at the next heartbeat and starts a new
    generation: the member is assigned the new partitions and reads them."""
    with Client(shared_server.address, timeout_s=30, retry=PATIENT) as client:
        client.create_topic("grow-group", 1, format="raw")
        client.append("grow-group", 0, [b"first"])
        with client.consumer(
            "grow-group", group="grow-g", auto_offset_reset="earliest", fetch_wait_ms=100
        ) as consumer:
            got: list[bytes | None] = []

            def polled(count: int) -> bool:
                got.extend(r.value for r in consumer.poll(0.2))
                return len(got) >= count

            wait_until(lambda: polled(1), "the first record")
            client.create_partitions("grow-group", 3)
            client.append("grow-group", 1, [b"on-1"])
            client.append("grow-group", 2, [b"on-2"])
            wait_until(lambda: polled(3), "the records of the new partitions")
            assert sorted(v or b"" for v in got) == [b"first", b"on-1", b"on-2"]
