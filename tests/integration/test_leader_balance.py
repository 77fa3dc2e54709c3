"""Leaders move back to each partition's preferred replica after a failure heals."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from replog.client import Client
from replog.devcluster import DevCluster
from replog.errors import ReplogError
from tests.integration.test_cluster import PATIENT
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.slow

TOPIC = "balanced"
PARTITIONS = 6


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(tmp_path / "cluster", 3, extra_args=["--leader-balance-interval-ms", "300"])
    c.start()
    yield c
    c.kill_all()


def leaders(client: Client) -> dict[int, tuple[int | None, int]] | None:
    """partition -> (leader, preferred replica), once every partition has a leader."""
    try:
        infos = client.describe_topic(TOPIC)
    except ReplogError:
        return None
    out = {i.partition: (i.leader_id, i.replicas[0]) for i in infos}
    return out if all(leader is not None for leader, _ in out.values()) else None


def on_preferred(client: Client) -> dict[int, tuple[int | None, int]] | None:
    now = leaders(client)
    return now if now and all(a == b for a, b in now.values()) else None


def test_leaders_return_to_their_preferred_replicas_after_a_node_comes_back(
    cluster: DevCluster,
) -> None:
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic(TOPIC, PARTITIONS, 3)
        wait_until(lambda: on_preferred(client), "every partition led by its preferred replica")
        victim = 1
        cluster.members[victim].kill()
        moved = wait_until(
            lambda: (now := leaders(client)) and all(a != victim for a, _ in now.values()) and now,
            "the survivors lead everything",
        )
        assert any(preferred == victim for _, preferred in moved.values())
        cluster.members[victim].start()
        final = wait_until(lambda: on_preferred(client), "leadership moved back")
        per_node = Counter(leader for leader, _ in final.values())
        assert max(per_node.values()) - min(per_node.values()) <= 1, per_node
        client.append(TOPIC, 0, [b"still writable"], acks="all")
