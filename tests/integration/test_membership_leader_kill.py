"""The metadata leader dies (SIGKILL) in the middle of a metadata quorum change, twice, under
an acks=all producer (issue #15, operations without downtime).

Nodes 1-3 start with the three-node peer list; node 4 starts on an empty data directory
(its peer list: the members and itself) and is added with `replog node add --no-spread
--wait`. As soon as a node reports node 4 (a member or a metadata observer), the `__cluster`
leader is killed: the change it had begun (observer, catch-up, promotion) is left to the next
leader, and the killed node restarts with its old settings. Node 4 ends a metadata voter.
Then the metadata leadership moves to node 4 and node 4 is removed (`replog node remove
--wait`): as soon as a node reports it no member, the metadata leader (node 4 itself, while
it hands over, or the node it handed to) is killed and restarted. Node 4 is stopped once it
left the quorum (a removed node is not told: it keeps its old view, and a client that fails
over to it would read that). The quorum ends {1, 2, 3}, every acknowledged record reads back
unchanged and a topic can still be created.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
import pytest

from replog.client import Client
from replog.devcluster import DevCluster, NodeProcess
from replog.v1 import admin_pb2, admin_pb2_grpc
from tests.integration.test_cluster import PATIENT, SteadyProducer, leader_of, read_all
from tests.integration.test_membership_changes import _quorum, _replog
from tests.integration.test_scale import _set_peers
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.slow

T = TypeVar("T")
CHANGE_S = 120.0  # a quorum change through a leader's death, on a loaded 2-core machine


class _Watch:
    """GetMetadata of every running node over channels kept open, so that one pass over the
    nodes takes milliseconds: the leader is found in the same pass that shows the change."""

    def __init__(self, nodes: dict[int, NodeProcess]) -> None:
        self.nodes = nodes
        self.channels = {i: grpc.insecure_channel(n.address) for i, n in nodes.items()}
        self.stubs: dict[int, Any] = {
            i: admin_pb2_grpc.AdminStub(c)  # type: ignore[no-untyped-call]
            for i, c in self.channels.items()
        }

    def views(self) -> dict[int, admin_pb2.Metadata]:
        """The metadata of every running node that answers."""
        views: dict[int, admin_pb2.Metadata] = {}
        for i, stub in self.stubs.items():
            if not self.nodes[i].running:
                continue
            with contextlib.suppress(grpc.RpcError):
                views[i] = stub.GetMetadata(admin_pb2.GetMetadataRequest(), timeout=5)
        return views

    def leader_when(
        self, shown: Callable[[admin_pb2.Metadata], bool]
    ) -> tuple[int, admin_pb2.Metadata] | None:
        """The node that reports itself the `__cluster` leader, and its view, in a pass in
        which some node's view is `shown`; None: not yet."""
        views = self.views()
        if not any(shown(m) for m in views.values()):
            return None
        for i, meta in views.items():
            if meta.metadata_leader_id == i:
                return i, meta
        return None

    def catch(
        self, shown: Callable[[admin_pb2.Metadata], bool], what: str
    ) -> tuple[int, admin_pb2.Metadata]:
        """`leader_when`, polled without a pause (a step of the keeper is one record: the
        window is short), for `CHANGE_S` at the most."""
        deadline = time.monotonic() + CHANGE_S
        while (found := self.leader_when(shown)) is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting until {what}; {self.describe()}")
        return found

    def describe(self) -> str:
        """Every node's view: its metadata leader, voters, observers and members."""
        return "; ".join(
            f"node {i}: leader {m.metadata_leader_id}, quorum {_quorum_of(m)}, "
            f"members {sorted(n.id for n in m.nodes)}"
            for i, m in self.views().items()
        )

    def until(self, condition: Callable[[], T | None], what: str) -> T:
        """`wait_until` with the nodes' views in the failure."""
        try:
            return wait_until(condition, what, CHANGE_S)
        except AssertionError as err:
            raise AssertionError(f"{err}; {self.describe()}") from None

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()


def _quorum_of(meta: admin_pb2.Metadata) -> tuple[list[int], list[int]]:
    return sorted(meta.metadata_voters), sorted(meta.metadata_observers)


def _kill_and_restart(node: NodeProcess) -> None:
    node.kill()
    node.start()  # the same settings and data directory


def _start_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "replog", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish_cli(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, out + err
    return out


def _start_three_of_four(cluster: DevCluster) -> None:
    """Nodes 1-3 up with the three-node peer list; node 4 (down) names them and itself."""
    for i, peers in ((1, [1, 2, 3]), (2, [1, 2, 3]), (3, [1, 2, 3]), (4, [1, 2, 3, 4])):
        _set_peers(cluster, i, peers)
    up = [cluster.members[i] for i in (1, 2, 3)]
    for node in up:
        node.start(wait=False)
    for node in up:
        node.wait_ready()


# length: one scenario told top to bottom (setup, faults, checks); split, it would hide the story
def test_the_metadata_leader_dies_in_the_middle_of_adding_and_of_removing_a_node(
    tmp_path: Any,
) -> None:
    cluster = DevCluster(tmp_path / "cluster", 4, extra_args=["--flush", "always"])
    cluster.release_ports()
    nodes = cluster.members
    watch = _Watch(nodes)
    adding: subprocess.Popen[str] | None = None
    removing: subprocess.Popen[str] | None = None
    try:
        _start_three_of_four(cluster)
        three = ",".join(nodes[i].address for i in (1, 2, 3))
        cli = ["--address", three, "--timeout", "60", "-o", "json"]
        with Client(three, retry=PATIENT) as client:
            client.create_topic("load", 1, 3, format="raw")
            leader_of(client, "load")
            watch.until(
                lambda: _quorum(client) == ([1, 2, 3], []), "the metadata quorum is {1, 2, 3}"
            )
            with SteadyProducer(client, "load") as producer:
                producer.wait_acked(200)
                # -- add node 4; its metadata leader dies as soon as node 4 shows -------------
                nodes[4].start()
                adding = _start_cli(
                    "node", "add", "4", nodes[4].address,
                    "--peer-address", nodes[4].peer_address, "--no-spread", "--wait", *cli,
                )  # fmt: skip

                first, view = watch.catch(
                    lambda m: 4 in {n.id for n in m.nodes} | set(m.metadata_observers),
                    "a node reports node 4, and a metadata leader",
                )
                _kill_and_restart(nodes[first])
                kills = [f"node {first} (its quorum {_quorum_of(view)}) while adding"]
                added = _finish_cli(adding)
                assert '"done": true' in added, added
                watch.until(
                    lambda: _quorum(client) == ([1, 2, 3, 4], []),
                    "node 4 is a metadata voter",
                )
                producer.wait_acked(len(producer.acked) + 200)
                # -- remove node 4 while it leads the metadata; the leader dies again -------
                _replog("partition", "transfer-leader", "__cluster", "0", "--to", "4", *cli[:4])
                watch.until(
                    lambda: (led := watch.leader_when(lambda m: True)) and led[0] == 4,
                    "node 4 leads the metadata",
                )
                removing = _start_cli("node", "remove", "4", "--wait", *cli)

                second, view = watch.catch(
                    lambda m: 4 not in {n.id for n in m.nodes},
                    "a node reports node 4 no member, and a metadata leader",
                )
                _kill_and_restart(nodes[second])
                kills.append(f"node {second} (its quorum {_quorum_of(view)}) while removing")
                removed = _finish_cli(removing)
                assert '"done": true' in removed, removed
                # as operators do (docs/operations.md): a node removed is stopped once it left
                # the quorum; while it runs it answers with its view of when it left (the
                # leader stops sending to it), and a client that fails over to it reads that
                assert nodes[4].stop() == 0
                watch.until(
                    lambda: _quorum(client) == ([1, 2, 3], []),
                    "the metadata quorum is {1, 2, 3} again",
                )
                producer.wait_acked(len(producer.acked) + 200)
            print("killed the metadata leader:", "; ".join(kills))
            records = dict(read_all(client, "load"))
            lost = [o for o, v in producer.acked.items() if records.get(o) != v]
            assert not lost, f"{len(lost)} acknowledged records lost or changed"
            client.create_topic("after", 3, 3, format="raw")
            meta = client.refresh_metadata(["after"])
            assert sorted(n.id for n in meta.nodes) == [1, 2, 3]
            assert {r for p in meta.topics[0].partitions for r in p.replicas} == {1, 2, 3}
            res = client.append("after", 0, [b"after the kills"], acks="all")
            assert client.fetch("after", 0, res.base_offset).records.values[:1] == [
                b"after the kills"
            ]
            for i in (1, 2, 3):
                meta = watch.until(lambda i=i: watch.views().get(i), f"node {i} answers")
                assert sorted(n.id for n in meta.nodes) == [1, 2, 3], i
                assert sorted(meta.metadata_voters) == [1, 2, 3], i
    finally:
        for proc in (adding, removing):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
        watch.close()
        cluster.kill_all()  # cleanup (a graceful stop waits out each node's hand-over)
