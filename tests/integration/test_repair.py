"""Three `replog serve` processes: flipped bits are never served, and the replica repairs.

How the bits are flipped:

* a **follower's** segment: the node is stopped (SIGTERM), one bit of its first segment is
  flipped on disk, and it is started again. Recovery only re-verifies from the newest
  flushed position, so the flip (well below it) is what bit rot on a cold file looks like:
  found by the scrubber's first pass after the start, then repaired.
* the **leader's** segment: flipped while it runs, through another descriptor. On Linux that
  write goes to the same page cache the server's `pread`s read from, so the very next read
  of that block sees it, like rot under a cold cache; the leader must notice it on a read
  (a consumer's here), refuse it (DATA_LOSS `CORRUPT_DATA`), hand leadership over and
  refetch.

Both under a producer with acks=all. Afterwards every replica's segment files are
byte-identical, `replog verify` finds every stopped data dir clean, and every acknowledged
record is read back with the value that was acknowledged.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from replog.client import Client
from replog.devcluster import DevCluster
from replog.errors import CorruptDataError, ReplogError
from tests.integration.test_cluster import (
    PATIENT,
    SteadyProducer,
    leader_of,
    read_all,
    scrape,
    segments,
)
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.slow

TOPIC = "orders"
FLIP_POSITION = 3000  # inside the first segment's first 16 KiB block


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(
        tmp_path / "cluster",
        3,
        extra_args=[
            "--flush", "always",
            "--segment-bytes-max", "32768",  # several segments, the first one sealed
            "--leader-balance-interval-ms", "0",  # leadership moves only when this test says
        ],
    )  # fmt: skip
    c.start()
    yield c
    c.kill_all()


def first_segment(cluster: DevCluster, node: int, topic: str = TOPIC) -> Path:
    part = cluster.members[node].data_dir / topic / "partition_0"
    return sorted(part.glob("*.log"))[0]


def flip_bit(path: Path, position: int) -> None:
    """Flip one bit through a descriptor of our own (the page cache is shared)."""
    fd = os.open(path, os.O_RDWR)
    try:
        byte = os.pread(fd, 1, position)
        os.pwrite(fd, bytes([byte[0] ^ 0x04]), position)
    finally:
        os.close(fd)


def metric(cluster: DevCluster, node: int, name: str, topic: str = TOPIC) -> float | None:
    """A per-partition sample of node `node`'s metrics (None: not exported)."""
    text = scrape(cluster.members[node].metrics_address)
    pattern = rf'^{name}{{partition="0",topic="{topic}"}} ([0-9.e+-]+)$'
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else None


def check_acked(client: Client, acked: dict[int, bytes]) -> None:
    """Every acknowledged record is there with the value that was acknowledged, and no
    read returns a value that was never written (a flipped bit would)."""
    records = dict(read_all(client, TOPIC))
    missing = [o for o in acked if o not in records]
    assert not missing, f"acknowledged records lost: {missing[:10]}"
    wrong = [o for o, v in acked.items() if records[o] != v]
    assert not wrong, f"records served with other bytes than acked: {wrong[:10]}"
    assert all(re.fullmatch(rb"v\d{6}", v) for v in records.values()), "a changed value"


def converge_and_stop(cluster: DevCluster, client: Client) -> None:
    """Wait until every replica holds the leader's whole log, then stop every node: the
    followers first, so that no new leader writes an epoch marker that a node already
    stopped would lack."""

    def same_end() -> bool:
        ends = {metric(cluster, n, "replog_log_end_offset") for n in cluster.members}
        return len(ends) == 1 and None not in ends

    wait_until(same_end, "every replica holds the whole log")
    leader = leader_of(client, TOPIC)
    for node in sorted(cluster.members, key=lambda n: n == leader):
        assert cluster.members[node].stop() == 0


def assert_identical_and_verified(cluster: DevCluster) -> None:
    copies = {n: segments(m.data_dir, TOPIC) for n, m in cluster.members.items()}
    first = copies[1]
    assert first, "no segment files"
    for node, files in copies.items():
        assert files.keys() == first.keys(), (node, sorted(files), sorted(first))
        for name, data in files.items():
            assert data == first[name], f"node {node}'s {name} differs from node 1's"
    for node, member in cluster.members.items():
        done = subprocess.run(
            [sys.executable, "-m", "replog", "verify", str(member.data_dir)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (node, done.stdout, done.stderr)


def test_a_follower_with_a_flipped_bit_refetches_its_log_and_no_acked_record_is_lost(
    cluster: DevCluster,
) -> None:
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic(TOPIC, 1, 3)
        leader = leader_of(client, TOPIC)
        follower = next(n for n in cluster.members if n != leader)
        with SteadyProducer(client, TOPIC) as producer:
            producer.wait_acked(3000)  # > 32 KiB of frames: the first segment is sealed
            member = cluster.members[follower]
            assert member.stop() == 0
            flip_bit(first_segment(cluster, follower), FLIP_POSITION)
            member.start()
            wait_until(
                lambda: (metric(cluster, follower, "replog_repairs_total") or 0) >= 1,
                "the follower repaired its log",
            )
            producer.wait_acked(len(producer.acked) + 500)  # writes go on meanwhile
        log_text = member.log_tail(200_000)
        # found by the scrubber (its own line may come after the repair), reported, repaired
        assert f"event=corrupt.found topic={TOPIC}" in log_text
        assert "event=repair.start" in log_text
        assert leader_of(client, TOPIC) == leader, "repairing a follower moves no leadership"
        check_acked(client, producer.acked)
        assert metric(cluster, follower, "replog_corrupt_ranges") == 0
        converge_and_stop(cluster, client)
    assert_identical_and_verified(cluster)


def test_a_leader_with_a_flipped_bit_refuses_it_hands_over_and_repairs(
    cluster: DevCluster,
) -> None:
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic(TOPIC, 1, 3)
        leader = leader_of(client, TOPIC)
        with SteadyProducer(client, TOPIC) as producer:
            producer.wait_acked(3000)
            flip_bit(first_segment(cluster, leader), FLIP_POSITION)
            refused = 0
            try:  # the leader's read of the flipped block: refused, never served
                client.fetch(TOPIC, 0, 0, max_bytes=1 << 20)
            except CorruptDataError as err:
                assert err.reason == "CORRUPT_DATA"
                refused += 1
            assert refused == 1, "the corrupt block was served"
            wait_until(
                lambda: (metric(cluster, leader, "replog_repairs_total") or 0) >= 1,
                "the old leader handed over and repaired its log",
            )
            producer.wait_acked(len(producer.acked) + 500)
        assert leader_of(client, TOPIC) != leader
        log_text = cluster.members[leader].log_tail(200_000)
        assert f"event=corrupt.found topic={TOPIC}" in log_text
        assert "event=repair.handover" in log_text and "event=repair.start" in log_text
        check_acked(client, producer.acked)
        converge_and_stop(cluster, client)
    assert_identical_and_verified(cluster)


def test_a_single_replica_reports_its_corrupt_range_and_keeps_refusing_it(
    cluster: DevCluster,
) -> None:
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic("solo", 1, 1)
        node = client.describe_topic("solo")[0].replicas[0]  # the one replica leads
        acked = client.append("solo", 0, [b"v%06d" % i for i in range(3000)], acks="all")
        assert acked.base_offset >= 0
        flip_bit(first_segment(cluster, node, "solo"), FLIP_POSITION)
        for _ in range(2):  # refused every time: there is no other copy to repair from
            with pytest.raises(CorruptDataError):
                client.fetch("solo", 0, 0, max_bytes=1 << 20)
        wait_until(
            lambda: metric(cluster, node, "replog_repair_blocked", "solo") == 1,
            "the replica reports it cannot repair",
        )
        assert metric(cluster, node, "replog_corrupt_ranges", "solo") == 1
        (info,) = client.describe_topic("solo")
        assert [(c.replica_id, c.segment, c.first_offset) for c in info.corrupt_ranges] == [
            (node, first_segment(cluster, node, "solo").name, 0)
        ]
        assert "CRC32C" in info.corrupt_ranges[0].detail
        assert metric(cluster, node, "replog_repairs_total", "solo") == 0
        with pytest.raises(ReplogError):
            client.fetch("solo", 0, 0, max_bytes=1 << 20)
        assert "event=repair.impossible" in cluster.members[node].log_tail(200_000)
