"""The real image scales up the Kubernetes way: node 4 joins by itself (`REPLOG_JOIN=auto`).

As deploy/k8s runs it (docs/operations.md, Scale): every node with `REPLOG_JOIN=auto`, TLS
on every listener and mutual TLS between peer listeners, host networking, nodes 1-4 on
127.0.0.31-34. Nodes 1-3 run with the three-node peer list and are never restarted; node 4
starts on an empty data directory with the four-node list (the ConfigMap's new size) while
an acks=all producer writes, and with no admin call it asks to join (`Nodes.Join`, proven by
its certificate), becomes a member, a metadata observer and then a voter on every node, and
a topic created then places replicas on it. Leaving is by command (`replog node remove`):
node 4 is then out of every node's quorum, and nothing acknowledged is lost.
"""

from __future__ import annotations

import json
from pathlib import Path

from replog.server.cluster.identity import IDENTITY_FILE
from tests.containers.test_cluster_containers import (
    DEADLINE_S,
    STEP,
    SteadyProducer,
    assert_no_acked_record_lost,
)
from tests.containers.test_membership_containers import WAIT_S, _quorum_seen_by, _replog
from tests.containers.test_scale_containers import ScalingCluster, assert_wide_kept
from tests.integration.waiting import wait_until


def test_the_image_adds_a_node_that_asks_to_join_with_no_admin_call_under_load(
    image: str, tmp_path: Path
) -> None:
    cluster = ScalingCluster(image, tmp_path)
    cluster.env = {"REPLOG_JOIN": "auto"}
    try:
        cluster.start_members([1, 2, 3])
        with cluster.client() as client:
            client.create_topic("acked", 1, 3, format="raw")
        with SteadyProducer(cluster, "acked") as producer:
            producer.wait_acked(STEP)
            cluster.start_node(4, [1, 2, 3, 4])  # the pod of `kubectl scale --replicas=4`
            cluster.nodes[4].wait_serving()
            for i in (1, 2, 3, 4):
                wait_until(
                    lambda i=i: (q := _quorum_seen_by(cluster, i)) and q[0] == {1, 2, 3, 4},
                    f"node {i} sees node 4, which asked to join, voting in the metadata quorum",
                    DEADLINE_S,
                )
            identity = json.loads((cluster.roots[4] / IDENTITY_FILE).read_text())
            assert identity["start"] == "joining", identity
            # (the joining loop sees itself listed at its next poll, a moment after the
            # quorum names it; the log line follows)
            wait_until(
                lambda: "join.done" in cluster.nodes[4].logs(chars=10_000_000) or None,
                "node 4 logs join.done",
                DEADLINE_S,
            )
            logs = cluster.nodes[4].logs(chars=10_000_000)
            assert "join.asked" in logs and "join.done" in logs, logs[-2000:]
            cluster.members = [1, 2, 3, 4]
            producer.wait_acked(producer.count() + STEP, "acks go on with node 4 a member")
            with cluster.client() as client:
                client.create_topic("wide", 6, 3, format="raw")
                meta = client.refresh_metadata(["wide"])
                placed = {n for p in meta.topics[0].partitions for n in p.replicas}
                assert placed == {1, 2, 3, 4}, f"a new topic places replicas on node 4: {placed}"
                for p in range(6):
                    client.append("wide", p, [b"w%d" % p], acks="all")
            # leaving is by command: its replicas move away, then it is removed, then stopped
            out = _replog(cluster, "node", "decommission", "4", "--wait", "--wait-s", str(WAIT_S))
            assert out["done"] is True, out
            out = _replog(cluster, "node", "remove", "4", "--wait", "--wait-s", str(WAIT_S))
            assert out["done"] is True and {n["id"] for n in out["nodes"]} == {1, 2, 3}, out
            cluster.members = [1, 2, 3]
            for i in (1, 2, 3):
                wait_until(
                    lambda i=i: _quorum_seen_by(cluster, i) == ({1, 2, 3}, set()),
                    f"node {i} sees the metadata quorum without node 4",
                    DEADLINE_S,
                )
            assert cluster.nodes[4].stop() == 0
            producer.wait_acked(producer.count() + STEP, "acks go on without node 4")
        assert_no_acked_record_lost(cluster, "acked", producer.acked)
        assert_wide_kept(cluster)
    finally:
        for node in cluster.nodes.values():
            node.remove()
