"""Compacted topics on three `replog serve` processes: the log cleaner under load, a node
SIGKILLed while it compacts, then every replica holds each key's latest acknowledged value
at its offset, tombstoned keys are gone after delete.retention.ms, and the disk use shrank.
Small segments, small counts: the full-size figures are bench/compaction.py's."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from replog import frames
from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster, NodeProcess
from replog.errors import InvalidRecordError, ReplogError
from replog.records import DecodedRecords, Record, decode_frames
from replog.storage import PartitionLog, StorageConfig
from replog.storage.names import partition_dir
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.slow

PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=90_000)
KEYS = 30
GONE = 8  # keys k00..k07 are deleted (tombstones) half-way
CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",
    "delete.retention.ms": "1500",
    "min.cleanable.dirty.ratio": "0.05",
}
_CLEANED = re.compile(r"event=cleaner\.cleaned topic=t partition=0 .*cleaned_end=(\d+)")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(
        tmp_path / "cluster",
        3,
        extra_args=["--flush", "never", "--cleaner-interval-ms", "100"],
    )
    c.start()
    yield c
    c.kill_all()


def key(k: int) -> bytes:
    return b"k%02d" % k


def cleaned_end(node: NodeProcess) -> int:
    """The furthest end of a cleaning pass over t/0 that the node logged (-1: none yet)."""
    return max(map(int, _CLEANED.findall(node.log_tail(10**8))), default=-1)


def metric(node: NodeProcess, name: str) -> float:
    url = f"http://{node.metrics_address}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    (value,) = re.findall(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(value)


def leader_of(client: Client) -> int:
    def known() -> int | None:
        try:
            (p,) = client.describe_topic("t")
        except ReplogError:
            return None
        return p.leader_id

    return wait_until(known, "t/0 has a leader")


def replica_records(node: NodeProcess) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of a stopped node's replica, read from disk."""
    plog = PartitionLog(partition_dir(node.data_dir, "t", 0), "t", 0, StorageConfig())
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = plog.log_start_offset
    try:
        while offset < plog.log_end_offset:
            data = plog.read_uncommitted(offset, 1 << 20)
            if not data:
                break
            batch = decode_frames(data)
            out += zip(batch.offsets, batch.keys, batch.values, strict=True)
            offset = frames.next_offset(data, offset)
    finally:
        plog.close()
    return out


def test_a_compacted_topic_keeps_each_keys_latest_value_on_every_replica(
    cluster: DevCluster,
) -> None:
    latest: dict[bytes, tuple[int, bytes]] = {}  # key -> (offset, value) acknowledged
    produced_bytes = 0

    def produce(client: Client, rounds: range, keys: range) -> None:
        nonlocal produced_bytes
        for r in rounds:
            batch = [Record(b"r%03d-%s" % (r, b"v" * 60), key=key(k)) for k in keys]
            result = client.append("t", 0, batch, acks="all")
            for i, k in enumerate(keys):
                latest[key(k)] = (result.base_offset + i, batch[i].value or b"")
            produced_bytes += sum(len(r.value or b"") + 40 for r in batch)

    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic("t", 1, 3, configs=CONFIGS)
        with pytest.raises(InvalidRecordError, match="no key"):
            client.append("t", 0, [Record(b"keyless")], acks="all")
        produce(client, range(0, 15), range(KEYS))
        leader = leader_of(client)
        wait_until(lambda: cleaned_end(cluster.members[leader]) > 0, "the leader compacts")
        cluster.members[leader].kill()  # SIGKILL while it compacts (it cleans every 100 ms)
        produce(client, range(15, 25), range(KEYS))
        cluster.members[leader].start()
        gone = client.append("t", 0, [Record(None, key=key(k)) for k in range(GONE)], acks="all")
        for k in range(GONE):
            latest.pop(key(k))
        expired_at = time.monotonic() + 1.5  # delete.retention.ms after the tombstones
        produce(client, range(25, 30), range(GONE, KEYS))
        wait_until(lambda: time.monotonic() > expired_at or None, "the tombstones expired")
        produce(client, range(30, 40), range(GONE, KEYS))  # closes the tombstones' segment
        (offsets,) = client.list_offsets("t")
        end = offsets.latest

        def all_cleaned_past_it() -> bool | None:  # a pass begun after the tombstones expired
            return all(cleaned_end(n) >= end - 200 for n in cluster.members.values()) or None

        wait_until(all_cleaned_past_it, "every replica cleaned past the tombstones' expiry")
        for node in cluster.members.values():
            assert metric(node, "replog_cleaner_segments_rewritten_total") > 0
            assert metric(node, "replog_cleaner_bytes_after_total") < metric(
                node, "replog_cleaner_bytes_before_total"
            )
        read: dict[bytes, tuple[int, bytes | None]] = {}
        offset = 0
        while offset < end:
            fetched = client.fetch("t", 0, offset, max_bytes=1 << 20)
            got = fetched.records
            assert isinstance(got, DecodedRecords)
            for o, name, v in zip(got.offsets, got.keys, got.values, strict=True):
                assert name is not None
                read[name] = (o, v)
            offset = fetched.next_offset
        assert read == latest, "the leader serves each key's latest value at its offset"
        assert gone.base_offset > 0
    for node in cluster.members.values():
        assert node.stop() == 0
    for node_id, node in cluster.members.items():
        held = replica_records(node)
        at = [o for o, _, _ in held]
        assert at == sorted(set(at)), f"node {node_id}: offsets ascend"
        last = {k: (o, v) for o, k, v in held if k is not None}
        assert last == latest, f"node {node_id}: every key's latest acknowledged value"
        assert not any(k in {key(g) for g in range(GONE)} for _, k, _ in held), (
            f"node {node_id}: tombstoned keys are gone"
        )
        on_disk = sum(p.stat().st_size for p in partition_dir(node.data_dir, "t", 0).glob("*.log"))
        assert on_disk < produced_bytes / 3, f"node {node_id}: disk use shrank ({on_disk} B)"
