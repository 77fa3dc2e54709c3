"""A node stopped with SIGTERM hands the partitions it leads over before it goes."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from replog.client import Client
from replog.devcluster import DevCluster
from replog.errors import ReplogError
from tests.integration.test_cluster import PATIENT, SteadyProducer, leader_of, read_all
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(tmp_path / "cluster", 3)
    c.start()
    yield c
    c.kill_all()


def test_a_sigtermed_leader_hands_over_every_partition_and_writers_lose_nothing(
    cluster: DevCluster,
) -> None:
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic("handed", 1, 3)
        first = leader_of(client, "handed")
        epoch = client.describe_topic("handed")[0].epoch
        with SteadyProducer(client, "handed") as producer:
            producer.wait_acked(500)
            node = cluster.members[first]
            assert node.stop() == 0, node.log_tail()
            producer.wait_acked(len(producer.acked) + 500)
        second = leader_of(client, "handed")
        assert second != first
        # one election, started by the hand-over (TimeoutNow), not by a timeout
        assert client.describe_topic("handed")[0].epoch == epoch + 1
        lines = [ln for ln in node.log_tail(100_000).splitlines() if "handover.done" in ln]
        assert lines, node.log_tail()
        led, moved = (int(re.search(rf"{k}=(\d+)", lines[-1]).group(1)) for k in ("led", "moved"))  # type: ignore[union-attr]
        assert led >= 1 and moved == led, lines[-1]
        records = dict(read_all(client, "handed"))
        missing = [o for o, v in producer.acked.items() if records.get(o) != v]
        assert not missing, f"{len(missing)} acknowledged records lost"


def test_leadership_moves_on_request_to_a_chosen_voter_and_a_bad_target_is_refused(
    cluster: DevCluster,
) -> None:
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic("moved", 1, 3)
        first = leader_of(client, "moved")
        client.append("moved", 0, [b"before"], acks="all")
        target = next(n for n in cluster.members if n != first)
        assert client.transfer_leadership("moved", 0, to=target) == target
        assert wait_until(lambda: leader_of(client, "moved") == target or None, "moved")
        with pytest.raises(ReplogError) as err:
            client.transfer_leadership("moved", 0, to=99)
        assert err.value.code == "INVALID_ARGUMENT"
        client.append("moved", 0, [b"after"], acks="all")
        assert [v for _, v in read_all(client, "moved")] == [b"before", b"after"]
        # the CLI does the same; with no --to the freshest voter takes over
        done = subprocess.run(
            [sys.executable, "-m", "replog", "partition", "transfer-leader", "moved", "0",
             "--address", cluster.bootstrap],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "leadership handed to node" in done.stdout
        assert wait_until(lambda: leader_of(client, "moved") != target or None, "moved again")
