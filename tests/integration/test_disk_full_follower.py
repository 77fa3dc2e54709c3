"""A follower on a full disk holds its place and catches up by itself (issue 25).

Node 3 of a 3-node cluster has its data directory on a small tmpfs; another file fills it
to the last byte. The majority (nodes 1 and 2) goes on committing acks=all appends; node 3
stays up, cannot write what it fetches and fetches again with backoff, without an election
(the partition's epoch does not move). Once space is freed it catches up by itself, and
every acknowledged record is there, on every node.
"""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from tests.integration.test_cluster import leader_of, read_all, segments
from tests.integration.test_disk_full import fill, mount_tmpfs
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration

PATIENT = RetryPolicy(attempts_max=200, backoff_max_ms=200, deadline_ms=60_000)
FULL_NODE = 3


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[DevCluster, Path]]:
    root = tmp_path / "cluster"
    disk = root / f"node{FULL_NODE}"
    mount_tmpfs(disk, "32m")
    cluster = DevCluster(root, 3)
    try:
        cluster.start()
        yield cluster, disk
    finally:
        cluster.kill_all()
        subprocess.run(["umount", "-l", str(disk)], check=False)


def storage_full(cluster: DevCluster, node: int) -> bool:
    url = f"http://{cluster.members[node].metrics_address}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return any(
        line.startswith("replog_storage_full{") and line.endswith(" 1.0")
        for line in text.splitlines()
    )


def test_a_follower_on_a_full_disk_keeps_its_place_and_catches_up(
    cluster: tuple[DevCluster, Path],
) -> None:
    nodes, disk = cluster
    with Client(nodes.bootstrap, retry=PATIENT) as client:
        client.create_topic("p", 1, 3)
        if leader_of(client, "p") == FULL_NODE:  # the follower is the one whose disk fills
            client.transfer_leadership("p", 0, to=1)
            wait_until(lambda: leader_of(client, "p") != FULL_NODE or None, "a new leader")
        acked = [b"before-%d" % i for i in range(100)]
        for i in range(0, len(acked), 10):
            client.append("p", 0, acked[i : i + 10], acks="all")
        epoch = client.describe_topic("p")[0].epoch
        ballast = disk / "ballast"
        fill(ballast)
        wait_until(lambda: storage_full(nodes, FULL_NODE) or None, "node 3 sees its disk full")
        for i in range(300):  # the majority commits; node 3 cannot write them
            value = b"during-%d-" % i + bytes(1000)
            client.append("p", 0, [value], acks="all")
            acked.append(value)
        sizes = {
            n: sum(map(len, segments(m.data_dir, "p").values())) for n, m in nodes.members.items()
        }
        assert sizes[FULL_NODE] < min(sizes[1], sizes[2]), sizes  # it lags
        assert nodes.members[FULL_NODE].running, nodes.members[FULL_NODE].log_tail()
        assert client.describe_topic("p")[0].epoch == epoch, "an election was held"
        ballast.unlink()  # space returns: node 3 catches up by itself
        dirs = [m.data_dir for m in nodes.members.values()]
        wait_until(
            lambda: len({sum(map(len, segments(d, "p").values())) for d in dirs}) == 1 or None,
            "node 3 catches up",
        )
        assert [v for _, v in read_all(client, "p")] == acked
        assert client.describe_topic("p")[0].epoch == epoch, "an election was held"
        assert not storage_full(nodes, FULL_NODE)
    log = nodes.members[FULL_NODE].log_file.read_text()
    assert "owner task died" not in log and "server.failed" not in log
