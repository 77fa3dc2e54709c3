"""The real image grows from 3 to 4 nodes and shrinks back, under an acks=all producer.

The steps of docs/operations.md, Scale, with containers in place of pods (TLS on, host
networking, nodes 1-4 on 127.0.0.31-34): node 4 starts with the four-node peer list, nodes
1-3 are replaced one at a time by containers with that list (a pod deleted and recreated),
node 4 catches up and takes replicas of a new topic; then every replica moves off node 4
(`replog node decommission`'s plan, through ReassignPartition), nodes 1-3 are replaced
again with the three-node list and node 4 stops. Nothing acknowledged is lost.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from replog.cli.nodes import plan
from replog.client import Client
from replog.server.cluster.identity import IDENTITY_FILE
from tests.containers.conftest import free_ports
from tests.containers.nodes import Node, Pki, data_dir_for
from tests.containers.test_cluster_containers import (
    DEADLINE_S,
    STEP,
    ContainerCluster,
    SteadyProducer,
    assert_no_acked_record_lost,
)
from tests.integration.waiting import wait_until

HOSTS = {1: "127.0.0.31", 2: "127.0.0.32", 3: "127.0.0.33", 4: "127.0.0.34"}


class ScalingCluster(ContainerCluster):
    """Nodes 1-4 prepared, each started with the peer list it is given."""

    def __init__(self, image: str, root: Path) -> None:  # not super(): its own hosts
        self.image = image
        self.pki = Pki(root / "tls")
        self.ports = {i: free_ports(host, 3) for i, host in HOSTS.items()}
        self.roots = {i: data_dir_for(root / f"node{i}") for i in HOSTS}
        self.nodes: dict[int, Node] = {}
        self.members: list[int] = []
        self.env: dict[str, str] = {}  # settings every node started from now on gets

    def peers(self, ids: Iterable[int]) -> str:
        return ",".join(
            f"{i}={HOSTS[i]}:{self.ports[i][0]}/{HOSTS[i]}:{self.ports[i][1]}" for i in ids
        )

    def start_node(self, node_id: int, members: list[int]) -> None:
        """A new container for `node_id` (its data dir kept) with `members` as peers."""
        old = self.nodes.get(node_id)
        if old is not None:
            assert old.stop() == 0, old.logs()
            old.remove()
        host, ports = HOSTS[node_id], self.ports[node_id]
        env = {"REPLOG_NODE_ID": str(node_id), "REPLOG_PEERS": self.peers(members), **self.env}
        node = Node(
            self.image, host, ports[0], self.roots[node_id], self.pki,
            peer_port=ports[1], health_port=ports[2], env=env, node_id=node_id,
        )  # fmt: skip
        self.nodes[node_id] = node
        node.start(wait=False)

    def start_members(self, members: list[int]) -> None:
        """Start `members`, each with them as its peer list; wait until they all serve."""
        self.members = list(members)
        for i in members:
            self.start_node(i, members)
        for i in members:
            self.nodes[i].wait_serving()

    def bootstrap(self, excluding: Iterable[int] = ()) -> str:
        skip = set(excluding)
        return ",".join(self.nodes[i].address for i in self.members if i not in skip)


def _identity(cluster: ScalingCluster, node_id: int) -> dict[str, object]:
    data: dict[str, object] = json.loads((cluster.roots[node_id] / IDENTITY_FILE).read_text())
    return data


def _healthy(client: Client, topic: str) -> bool:
    try:
        part = client.refresh_metadata([topic]).topics[0].partitions[0]
    except Exception:
        return False
    return part.leader_id > 0


def test_the_image_grows_from_three_to_four_nodes_and_back_under_load(
    image: str, tmp_path: Path
) -> None:
    cluster = ScalingCluster(image, tmp_path)
    try:
        cluster.start_members([1, 2, 3])
        with cluster.client() as client:
            client.create_topic("scaled", 1, 3, format="raw")
            wait_until(lambda: _healthy(client, "scaled"), "a leader", DEADLINE_S)
        with SteadyProducer(cluster, "scaled") as producer:
            producer.wait_acked(STEP)
            # grow: node 4 first, then each of nodes 1-3 replaced with the 4-node list
            cluster.start_node(4, [1, 2, 3, 4])
            cluster.nodes[4].wait_serving()
            assert _identity(cluster, 4)["start"] == "joining"  # no voter of the log's quorum
            for i in (3, 2, 1):
                cluster.start_node(i, [1, 2, 3, 4])
                cluster.nodes[i].wait_serving()
                producer.wait_acked(producer.count() + STEP, f"acks go on after node {i}")
            cluster.members = [1, 2, 3, 4]
            wait_until(
                lambda: _identity(cluster, 4)["caught_up_at"] is not None,
                "node 4 caught up on the metadata",
                DEADLINE_S,
            )
            with cluster.client() as client:
                client.create_topic("wide", 6, 3, format="raw")
                meta = client.refresh_metadata(["wide"])
                assert {n for p in meta.topics[0].partitions for n in p.replicas} == set(HOSTS)
                for p in range(6):
                    client.append("wide", p, [b"w%d" % p], acks="all")
                # shrink: every replica off node 4, then nodes 1-3 with the 3-node list
                for move in plan(client.refresh_metadata(), 4):
                    client.reassign_partition(move.topic, move.partition, move.target)

                def off_node_4() -> bool:
                    meta = client.refresh_metadata()
                    return all(4 not in p.replicas for t in meta.topics for p in t.partitions)

                wait_until(off_node_4, "every replica moved off node 4", DEADLINE_S * 3)
            for i in (3, 2, 1):
                cluster.start_node(i, [1, 2, 3])
                cluster.nodes[i].wait_serving()
                producer.wait_acked(producer.count() + STEP, f"acks go on after node {i} again")
            cluster.members = [1, 2, 3]
            assert cluster.nodes[4].stop() == 0
            producer.wait_acked(producer.count() + STEP, "acks go on without node 4")
        assert_no_acked_record_lost(cluster, "scaled", producer.acked)
        assert_wide_kept(cluster)
    finally:
        for node in cluster.nodes.values():
            node.remove()


def assert_wide_kept(cluster: ScalingCluster) -> None:
    """Topic "wide" (6 partitions, `w<p>` appended to each) still holds its records."""
    with cluster.client() as client:
        for p in range(6):
            assert b"w%d" % p in client.fetch("wide", p, 0).records.values
