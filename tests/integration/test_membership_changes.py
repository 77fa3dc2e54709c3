"""Growing a cluster 3 -> 5 -> 3 nodes under an acks=all producer, without restarting any
member (`replog node add | decommission | remove`, docs/operations.md, Add or remove a node).

Nodes 1-3 start with the three-node peer list and never restart. Nodes 4 and 5 start on
empty data directories (their peer lists name the members and themselves) and are added
with `replog node add --wait`: each joins the metadata quorum as an observer, catches up,
becomes a voter, and takes replicas spread onto it. Then node 5 dies (SIGKILL) and is
decommissioned and removed dead, and node 1 (a member of every node's settings) is
decommissioned, removed and stopped. Throughout, every
acknowledged record stays readable; at the end the metadata quorum is {2, 3, 4}, a topic
can be created on those three, and node 2 restarted with its old settings (which still name
node 1) replays the same members from the metadata log.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import grpc
import pytest

from replog.client import Client
from replog.devcluster import DevCluster
from replog.errors import (
    InvalidArgumentError,
    NodeExistsError,
    NodeRemovedError,
    UnknownNodeError,
)
from replog.rpc_errors import from_rpc_error
from replog.v1 import admin_pb2, admin_pb2_grpc
from tests.integration.test_cluster import (
    PATIENT,
    SteadyProducer,
    leader_of,
    read_all,
    scrape,
)
from tests.integration.test_scale import _set_peers
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.slow


def _replog(*args: str, expect: int = 0) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "replog", *args], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == expect, done.stdout + done.stderr
    return json.loads(done.stdout) if done.stdout.strip().startswith("{") else done.stderr


def _answers_node_removed(address: str) -> bool:
    """Whether the node at `address` refuses GetMetadata as a removed node (NODE_REMOVED)."""
    channel = grpc.insecure_channel(address)
    try:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        stub.GetMetadata(admin_pb2.GetMetadataRequest(), timeout=10)
    except grpc.RpcError as exc:
        return isinstance(from_rpc_error(exc), NodeRemovedError)
    finally:
        channel.close()
    return False


def _quorum(client: Client) -> tuple[list[int], list[int]]:
    meta = client.refresh_metadata()
    return sorted(meta.metadata_voters), sorted(meta.metadata_observers)


# length: one scenario told top to bottom (setup, faults, checks); split, it would hide the story
def test_a_cluster_grows_to_five_nodes_and_back_to_three_without_restarts_under_load(
    tmp_path: Any,
) -> None:
    cluster = DevCluster(tmp_path / "cluster", 5, extra_args=["--flush", "always"])
    nodes = cluster.members
    cluster.release_ports()
    try:
        for i in (1, 2, 3):
            _set_peers(cluster, i, [1, 2, 3])
            nodes[i].start(wait=False)
        _set_peers(cluster, 4, [1, 2, 3, 4])
        _set_peers(cluster, 5, [1, 2, 3, 4, 5])
        for i in (1, 2, 3):
            nodes[i].wait_ready()
        three = ",".join(nodes[i].address for i in (1, 2, 3))
        cli = ["--address", three, "--timeout", "60", "-o", "json"]
        with Client(three, retry=PATIENT) as client:
            client.create_topic("load", 1, 3, format="raw")
            client.create_topic("spread", 6, 3, format="raw")
            for p in range(6):
                client.append("spread", p, [b"s%d" % p], acks="all")
            leader_of(client, "load")
            with SteadyProducer(client, "load") as producer:
                producer.wait_acked(200)
                # -- grow: 3 -> 5, nobody restarts ---------------------------------------
                for new in (4, 5):
                    nodes[new].start()
                    added = _replog(
                        "node", "add", str(new), nodes[new].address,
                        "--peer-address", nodes[new].peer_address, "--wait", *cli,
                    )  # fmt: skip
                    assert added["done"] is True and new in {n["id"] for n in added["nodes"]}
                    assert added["moves"], "replicas spread onto the new node"
                    producer.wait_acked(len(producer.acked) + 200)
                wait_until(
                    lambda: _quorum(client) == ([1, 2, 3, 4, 5], []),
                    "the metadata quorum has five voters",
                )
                metrics = scrape(nodes[2].metrics_address).splitlines()
                for line in ("replog_cluster_members 5.0", "replog_metadata_voters 5.0"):
                    assert line in metrics, line
                listed = _replog("node", "list", *cli)["nodes"]
                assert [n["metadata"] for n in listed] == ["voter"] * 5
                assert all(n["replicas"] > 0 for n in listed), listed
                client.create_topic("mid", 10, 3, format="raw")
                meta = client.refresh_metadata(["mid"])
                assert {r for p in meta.topics[0].partitions for r in p.replicas} == {1, 2, 3, 4, 5}
                for p in range(10):
                    client.append("mid", p, [b"m%d" % p], acks="all")
                # -- typed refusals over the wire ------------------------------------------
                refused = _replog("node", "remove", "5", *cli, expect=1)
                assert "NODE_NOT_EMPTY" in refused  # it hosts replicas
                with pytest.raises(NodeExistsError):
                    client.add_node(4, nodes[5].address.rpartition(":")[0] + ":1")
                with pytest.raises(UnknownNodeError):
                    client.remove_node(99)
                with pytest.raises(InvalidArgumentError):
                    client.add_node(6, "no-port")
                # the same again: accepted
                assert client.add_node(4, nodes[4].address, nodes[4].peer_address)
                # -- shrink: 5 -> 3. Node 5 dies for good (SIGKILL) and is removed dead;
                # node 1 is removed alive, then stopped.
                nodes[5].kill()
                producer.wait_acked(len(producer.acked) + 200)
                for gone in (5, 1):
                    plan = _replog("node", "decommission", str(gone), "--wait", *cli)
                    assert plan["done"] is True
                    removed = _replog("node", "remove", str(gone), "--wait", *cli)
                    assert removed["done"] is True
                    assert gone not in {n["id"] for n in removed["nodes"]}
                    if nodes[gone].running:  # removed, still running: no stale metadata
                        wait_until(
                            lambda g=gone: _answers_node_removed(nodes[g].address),
                            f"removed node {gone} refuses GetMetadata with NODE_REMOVED",
                        )
                        first = f"{nodes[gone].address},{nodes[2].address}"
                        with Client(first, retry=PATIENT) as fresh:  # it moves on to node 2
                            assert gone not in {n.id for n in fresh.refresh_metadata().nodes}
                        assert nodes[gone].stop() == 0
                    producer.wait_acked(len(producer.acked) + 200)
                wait_until(
                    lambda: _quorum(client) == ([2, 3, 4], []),
                    "the metadata quorum is {2, 3, 4}",
                )
                producer.wait_acked(len(producer.acked) + 200)
            records = dict(read_all(client, "load"))
            lost = [o for o, v in producer.acked.items() if records.get(o) != v]
            assert not lost, f"{len(lost)} acknowledged records lost or changed"
            for topic, count, tag in (("spread", 6, b"s"), ("mid", 10, b"m")):
                for p in range(count):
                    assert tag + b"%d" % p in client.fetch(topic, p, 0).records.values
            client.create_topic("final", 3, 3, format="raw")
            meta = client.refresh_metadata()
            assert sorted(n.id for n in meta.nodes) == [2, 3, 4]
            assert all(
                r in (2, 3, 4) for t in meta.topics for p in t.partitions for r in p.replicas
            )
        # node 2 restarts with its settings of the start (peers 1, 2, 3): the metadata log,
        # not the settings, says who the members are
        assert nodes[2].stop() == 0
        nodes[2].start()
        survivors = ",".join(nodes[i].address for i in (2, 3, 4))
        with Client(survivors, retry=PATIENT) as client:
            wait_until(
                lambda: (
                    sorted(n.id for n in client.refresh_metadata().nodes) == [2, 3, 4]
                    and _quorum(client) == ([2, 3, 4], [])
                ),
                "the restarted node knows the members from the metadata log",
            )
            res = client.append("final", 0, [b"after restart"], acks="all")
            assert client.fetch("final", 0, res.base_offset).records.values[:1] == [
                b"after restart"
            ]
    finally:
        cluster.kill_all()  # cleanup (a graceful stop waits out each node's hand-over)


def _metadata_of(address: str) -> admin_pb2.Metadata | None:
    """GetMetadata of one node (None: it does not answer)."""
    with grpc.insecure_channel(address) as channel:
        stub: Any = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        try:
            meta: admin_pb2.Metadata = stub.GetMetadata(admin_pb2.GetMetadataRequest(), timeout=5)
        except grpc.RpcError:
            return None
        return meta


def test_a_node_that_missed_the_additions_reaches_a_metadata_leader_it_was_never_told_of(
    tmp_path: Any,
) -> None:
    """Node 3 is down while nodes 4 and 5 are added, and the metadata leadership moves to
    node 4 (`replog partition transfer-leader __cluster 0 --to 4`). Node 3 comes back with
    its old peer list (1, 2, 3) and a metadata log that names neither: it asks its peers
    for the members (`Nodes.Identify`), reaches the leader, catches up and applies the
    additions (without the asking, it never does: checked by disabling it)."""
    cluster = DevCluster(tmp_path / "cluster", 5)
    nodes = cluster.members
    cluster.release_ports()
    try:
        for i in (1, 2, 3):
            _set_peers(cluster, i, [1, 2, 3])
            nodes[i].start(wait=False)
        _set_peers(cluster, 4, [1, 2, 3, 4])
        _set_peers(cluster, 5, [1, 2, 3, 4, 5])
        for i in (1, 2, 3):
            nodes[i].wait_ready()
        cli = ["--address", f"{nodes[1].address},{nodes[2].address}", "--timeout", "60"]
        with Client(nodes[1].address, retry=PATIENT) as client:
            client.create_topic("t", 1, 3, format="raw")
            leader_of(client, "t")
        assert nodes[3].stop() == 0
        for new in (4, 5):
            nodes[new].start()
            _replog(
                "node", "add", str(new), nodes[new].address,
                "--peer-address", nodes[new].peer_address, "--no-spread", "--wait", *cli,
            )  # fmt: skip

        def metadata_leader() -> int | None:
            for i in (1, 2, 4, 5):
                meta = _metadata_of(nodes[i].address)
                if meta is not None and meta.metadata_leader_id:
                    return meta.metadata_leader_id
            return None

        # the metadata leadership moves to node 4 (TransferLeadership of __cluster)
        _replog("partition", "transfer-leader", "__cluster", "0", "--to", "4", *cli)
        wait_until(lambda: metadata_leader() == 4, "node 4 leads the metadata")
        nodes[3].start()  # its settings and its log name nodes 1-3 only
        wait_until(
            lambda: (
                (meta := _metadata_of(nodes[3].address)) is not None
                and sorted(n.id for n in meta.nodes) == [1, 2, 3, 4, 5]
                and sorted(meta.metadata_voters) == [1, 2, 3, 4, 5]
            ),
            "node 3 learned the members added while it was down",
        )
        assert "members.discovered" in nodes[3].log_tail(200_000)
    finally:
        cluster.kill_all()  # cleanup (a graceful stop waits out each node's hand-over)
