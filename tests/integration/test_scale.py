"""Growing a cluster by one node with a rolling restart, and shrinking it back
(docs/operations.md, Scale).

Three nodes serve an acks=all producer; node 4 starts on an empty data directory with the
four-node peer list (it is "joining" by its identity: not a voter of the quorum its peers'
metadata log holds, it votes for nobody), and nodes 1-3 restart one at a time with the same
list. Once the metadata leader's settings name node 4, its quorum keeper adds it as an
observer and promotes it once caught up, one voter per committed record (Raft's
single-server change). Nothing acknowledged is lost, node 4 catches up, becomes a metadata
voter and takes replicas of new topics. Then `replog node decommission 4` moves its
replicas away, nodes 1-3 restart with the three-node list and node 4 stops: still nothing
lost, and the metadata works on three nodes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from replog.client import Client
from replog.devcluster import DevCluster
from replog.server.cluster.identity import IDENTITY_FILE
from tests.integration.test_cluster import PATIENT, SteadyProducer, leader_of, read_all
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.slow


def _peers(cluster: DevCluster, ids: list[int]) -> str:
    nodes = cluster.members
    return ",".join(f"{i}={nodes[i].address}/{nodes[i].peer_address}" for i in ids)


def _set_peers(cluster: DevCluster, node_id: int, ids: list[int]) -> None:
    args = cluster.members[node_id].args
    args[args.index("--peers") + 1] = _peers(cluster, ids)


def _identity(data_dir: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((data_dir / IDENTITY_FILE).read_text())
    return data


# length: one scenario told top to bottom (setup, faults, checks); split, it would hide the story
def test_a_fourth_node_joins_and_leaves_by_rolling_restarts_under_load(tmp_path: Path) -> None:
    cluster = DevCluster(tmp_path / "cluster", 4, extra_args=["--flush", "always"])
    nodes = cluster.members
    cluster.release_ports()
    try:
        for i in (1, 2, 3):
            _set_peers(cluster, i, [1, 2, 3])
            nodes[i].start(wait=False)
        for i in (1, 2, 3):
            nodes[i].wait_ready()
        three = ",".join(nodes[i].address for i in (1, 2, 3))
        with Client(three, retry=PATIENT) as client:
            client.create_topic("before", 1, 3, format="raw")
            leader_of(client, "before")
            with SteadyProducer(client, "before") as producer:
                producer.wait_acked(300)
                nodes[4].start()  # the four-node peer list; an empty data directory
                four = _identity(nodes[4].data_dir)  # the quorum of the peers' log
                assert four["start"] == "joining", four
                assert (four["voters"], four["observers"]) == ([1, 2, 3], [4]), four
                for i in (1, 2, 3):  # one at a time: each waits for the previous one
                    assert nodes[i].stop() == 0
                    _set_peers(cluster, i, [1, 2, 3, 4])
                    nodes[i].start()
                    producer.wait_acked(len(producer.acked) + 200)
                wait_until(
                    lambda: _identity(nodes[4].data_dir)["caught_up_at"] is not None,
                    "node 4 caught up on the metadata",
                )
                wait_until(
                    lambda: set(client.refresh_metadata([]).metadata_voters) == {1, 2, 3, 4},
                    "node 4 promoted to metadata voter by the quorum keeper",
                )
                producer.wait_acked(len(producer.acked) + 200)
            assert not producer.errors or all(isinstance(e, str) for e in producer.errors)
        with Client(cluster.bootstrap, retry=PATIENT) as client:
            records = dict(read_all(client, "before"))
            lost = [o for o, v in producer.acked.items() if records.get(o) != v]
            assert not lost, f"{len(lost)} acknowledged records lost or changed"
            # a topic created now places replicas on all four nodes, node 4 included
            client.create_topic("after", 8, 3, format="raw")
            meta = client.refresh_metadata(["after"])
            hosts = {n for p in meta.topics[0].partitions for n in p.replicas}
            assert hosts == {1, 2, 3, 4}
            for p in range(8):
                res = client.append("after", p, [b"p%d" % p], acks="all")
                fetched = client.fetch("after", p, res.base_offset)
                assert fetched.records.values[:1] == [b"p%d" % p]
        # ...and leaves again: its replicas move away first (`replog node decommission`),
        # then nodes 1-3 restart one at a time with the three-node list, then node 4 stops.
        three_args = ["--address", three, "--timeout", "60"]
        listed = _replog("node", "list", "-o", "json", *three_args)
        assert {n["id"]: n["replicas"] > 0 for n in listed["nodes"]} == dict.fromkeys(
            (1, 2, 3, 4), True
        )
        plan = _replog("node", "decommission", "4", "--wait", "-o", "json", *three_args)
        assert plan["done"] is True and plan["moves"]
        with Client(three, retry=PATIENT) as client:
            with SteadyProducer(client, "before") as producer:
                producer.wait_acked(100)
                for i in (1, 2, 3):
                    assert nodes[i].stop() == 0
                    _set_peers(cluster, i, [1, 2, 3])
                    nodes[i].start()
                    producer.wait_acked(len(producer.acked) + 200)
                assert nodes[4].stop() == 0
                producer.wait_acked(len(producer.acked) + 200)
            records = dict(read_all(client, "before"))
            lost = [o for o, v in producer.acked.items() if records.get(o) != v]
            assert not lost, f"{len(lost)} acknowledged records lost or changed"
            for p in range(8):  # the moved partitions kept their records
                values = client.fetch("after", p, 0).records.values
                assert b"p%d" % p in values
            wait_until(
                lambda: set(client.refresh_metadata([]).metadata_voters) == {1, 2, 3},
                "node 4 out of the metadata quorum",
            )
            client.create_topic("final", 3, 3, format="raw")  # metadata works on three
            meta = client.refresh_metadata(["after", "final"])
            assert all(4 not in p.replicas for t in meta.topics for p in t.partitions)
    finally:
        cluster.kill_all()  # cleanup (a graceful stop waits out each node's hand-over)


def _replog(*args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "replog", *args], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
