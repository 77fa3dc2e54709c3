"""Per-topic configs on a real node (`server/meta/topic_configs.py`): a topic's segment size
and retention are its own, change at run time without a restart, and a refused change
changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from replog.client import Client, PartitionInfo, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import InvalidArgumentError, RecordTooLargeError, TopicNotFoundError
from replog.records import DecodedRecords, Record
from replog.storage.names import partition_dir
from tests.integration.servers import ServerProcess
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration

RECORD = b"x" * 200


def partition(client: Client, topic: str) -> PartitionInfo:
    (p,) = client.describe_topic(topic)
    return p


def test_segment_size_and_retention_are_the_topics_and_change_at_run_time(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory("--retention-check-interval-ms", "100").start()
    with Client(server.address, timeout_s=30, retry=RetryPolicy(attempts_max=3)) as client:
        client.create_topic("t", 1, configs={"segment.bytes": "1024", "retention.bytes": "1000000"})
        configs = client.describe_configs("t")
        assert (configs["segment.bytes"].value, configs["segment.bytes"].source) == (
            "1024",
            "topic",
        )
        assert configs["retention.ms"].value == "-1"  # the node keeps everything
        assert configs["retention.ms"].source == "default"
        for _ in range(10):
            client.append("t", 0, [RECORD] * 4, acks="all")
        before = partition(client, "t")
        assert before.segment_count >= 5  # rolled at the topic's 1 KiB, not the node's 1 MiB
        assert before.log_start_offset == 0

        client.alter_configs("t", set={"retention.bytes": "2048"})
        after = wait_until(
            lambda: (p := partition(client, "t")).log_start_offset > 0 and p,
            "retention deletes the oldest segments",
        )
        assert after.size_bytes <= 2048 + 1024  # the limit, plus the active segment
        assert after.high_watermark == before.high_watermark  # committed records stay

        # A refused change changes nothing, and records nothing.
        with pytest.raises(InvalidArgumentError, match="must be one of"):
            client.alter_configs("t", set={"cleanup.policy": "archive"})
        with pytest.raises(InvalidArgumentError, match="both set and deleted"):
            client.alter_configs("t", set={"retention.ms": "1"}, delete=["retention.ms"])
        with pytest.raises(TopicNotFoundError):
            client.alter_configs("nope", set={"retention.ms": "1"})
        with pytest.raises(InvalidArgumentError):
            client.create_topic("u", 1, configs={"segment.ms": "0"})
        assert "u" not in client.list_topics()
        now = client.describe_configs("t")
        assert now["cleanup.policy"].source == "default"
        assert now["retention.bytes"].value == "2048"
        assert now["retention.ms"].source == "default"
    server.terminate()
    server.start()  # the configs are replayed from the metadata log
    with Client(server.address, timeout_s=30, retry=RetryPolicy(attempts_max=3)) as client:
        assert client.describe_configs("t")["retention.bytes"].value == "2048"
        for _ in range(5):
            client.append("t", 0, [RECORD] * 4, acks="all")
        wait_until(  # the topic's segment size and retention again, not the node's
            lambda: partition(client, "t").size_bytes <= 2048 + 1024,
            "retention keeps the partition to the topic's retention.bytes after a restart",
        )


def test_max_message_bytes_and_the_timestamp_type_take_effect_at_once(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory().start()
    with Client(server.address, timeout_s=30, retry=RetryPolicy(attempts_max=3)) as client:
        client.create_topic("t", 1)
        client.append("t", 0, [RECORD], acks="all")
        client.alter_configs(
            "t", set={"max.message.bytes": "100", "message.timestamp.type": "LogAppendTime"}
        )
        with pytest.raises(RecordTooLargeError):
            client.append("t", 0, [RECORD], acks="all")
        configs = client.describe_configs("t")
        assert configs["message.timestamp.type"].value == "LogAppendTime"
        assert client.topic_config("t") == ("envelope", "log_append_time")
        stamped = client.append("t", 0, [Record(b"v", timestamp_ms=1000)], acks="all")
        read = client.fetch("t", 0, stamped.base_offset).records
        assert isinstance(read, DecodedRecords)
        assert read.timestamps[0] > 1000  # the leader's clock replaced the producer's
        client.alter_configs("t", delete=["max.message.bytes"])
        client.append("t", 0, [RECORD], acks="all")
        assert client.describe_configs("t")["max.message.bytes"].source == "default"


def test_the_cli_creates_shows_and_alters_a_topics_configs(
    shared_server: ServerProcess,
) -> None:
    def replog(*args: str) -> subprocess.CompletedProcess[bytes]:
        cmd = [sys.executable, "-m", "replog", *args, "--address", shared_server.address]
        return subprocess.run(cmd, capture_output=True, timeout=60, check=False)

    made = replog("topic", "create", "cli-configs", "--config", "retention.ms=60000")
    assert made.returncode == 0, made.stderr
    altered = replog(
        "topic", "alter", "cli-configs", "--config", "segment.bytes=4096",
        "--delete-config", "retention.ms",
    )  # fmt: skip
    assert altered.returncode == 0, altered.stderr
    shown = json.loads(replog("topic", "configs", "cli-configs", "-o", "json").stdout)
    rows = {c["name"]: (c["value"], c["source"]) for c in shown["configs"]}
    assert rows["segment.bytes"] == ("4096", "topic")
    assert rows["retention.ms"][1] == "default"
    refused = replog("topic", "alter", "cli-configs", "--config", "cleanup.policy=archive")
    assert refused.returncode == 1 and b"must be one of" in refused.stderr
    with Client(shared_server.address) as client:
        (topic,) = client.refresh_metadata(["cli-configs"]).topics
        assert dict(topic.configs) == {"segment.bytes": "4096"}


@pytest.mark.slow
def test_an_alter_on_any_node_reaches_every_replica(tmp_path: Path) -> None:
    """A node that is not the metadata leader forwards AlterConfigs there; every replica
    (followers too) takes the new retention without a restart."""
    cluster = DevCluster(
        tmp_path / "cluster", 3, extra_args=["--retention-check-interval-ms", "100"]
    )
    cluster.start()
    try:
        patient = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=90_000)
        with Client(cluster.bootstrap, retry=patient) as client:
            client.create_topic("t", 1, 3, configs={"segment.bytes": "1024"})
            for _ in range(10):
                client.append("t", 0, [RECORD] * 4, acks="all")
            leader_id = client.refresh_metadata().metadata_leader_id
        other = next(n for i, n in cluster.members.items() if i != leader_id)
        with Client(other.address, retry=patient) as client:
            client.alter_configs("t", set={"retention.bytes": "2048"})

        def first_offsets() -> list[int]:
            return [
                min(int(f.stem) for f in partition_dir(n.data_dir, "t", 0).glob("*.log"))
                for n in cluster.members.values()
            ]

        wait_until(
            lambda: all(first > 0 for first in first_offsets()),
            "every replica deletes its oldest segments",
            deadline_s=120,
        )
    finally:
        cluster.kill_all()
