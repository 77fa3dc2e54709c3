"""The real image adds node 4 and removes it again without restarting nodes 1-3, under load.

The steps of docs/operations.md, Scale (`replog node add | decommission | remove`), with
containers in place of pods: TLS on every listener, mutual TLS between the nodes' peer
listeners (each on its own port), host networking, nodes 1-4 on 127.0.0.31-34. Nodes 1-3
start with the three-node peer list and are never restarted. Node 4 starts on an empty data
dir with the four-node list and is added with `replog node add 4 ADDRESS --peer-address
PEER --wait` (the CLI, over TLS) while an acks=all producer writes: it joins the metadata
quorum (observer, then voter), replicas spread onto it (the producer's partition among them,
over mutual TLS from its certificate) and a topic created then places replicas on it. Then
`replog node decommission 4 --wait` and `replog node remove 4 --wait`: nodes 1-3 drop it
from the metadata quorum and from then on refuse replication with its certificate, both a
new stream and one it opened while a member and holds open (they accepted both before),
and keep acknowledging while the removed node still runs; it is stopped last. Nothing
acknowledged is lost, and no member's stream was ever refused.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc

from replog.client import Client
from replog.errors import ReplogError
from replog.v1 import replication_pb2 as pb
from replog.v1 import replication_pb2_grpc
from tests.containers.test_cluster_containers import (
    DEADLINE_S,
    STEP,
    SteadyProducer,
    assert_no_acked_record_lost,
    probe_client,
)
from tests.containers.test_scale_containers import ScalingCluster
from tests.integration.waiting import wait_until

CLI_TIMEOUT_S = 300  # one `replog node ...` run, its --wait included
WAIT_S = 180  # what each run's --wait allows the cluster
STREAM_END_S = 30.0  # a replication stream closed by the test ends (or is refused) by then


def _replog(cluster: ScalingCluster, *args: str) -> dict[str, Any]:
    """`replog <args> -o json` from the host, over TLS to nodes 1-3; its JSON document."""
    tls = ["--tls-ca", str(cluster.pki.ca.cert_file)]
    command = [sys.executable, "-m", "replog", *args, "--address", cluster.bootstrap()]
    done = subprocess.run(
        [*command, *tls, "--timeout", "60", "-o", "json"],
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, f"replog {' '.join(args)}: {done.stdout}{done.stderr}"
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def _quorum_seen_by(cluster: ScalingCluster, node_id: int) -> tuple[set[int], set[int]] | None:
    """(voters, observers) of the metadata quorum as node `node_id` itself knows it."""
    with probe_client(cluster.nodes[node_id]) as probe:
        try:
            meta = probe.refresh_metadata()
        except ReplogError:
            return None
    return set(meta.metadata_voters), set(meta.metadata_observers)


class _StreamAsNode4:
    """A replication stream to node `target`'s peer listener with node 4's certificate, held
    open: `send` puts an envelope on it (for a topic nobody hosts: it reaches no replica),
    `end` closes it and says how it ended ("OK n": accepted, n envelopes read)."""

    def __init__(self, cluster: ScalingCluster, target: int) -> None:
        d = cluster.pki.root / "node4"
        creds = grpc.ssl_channel_credentials(
            cluster.pki.ca.cert_file.read_bytes(),
            (d / "node4-key.pem").read_bytes(),
            (d / "node4.pem").read_bytes(),
        )
        self.channel = grpc.secure_channel(cluster.nodes[target].peer_address, creds)
        stub = replication_pb2_grpc.ReplicationStub(self.channel)  # type: ignore[no-untyped-call]
        self.queue: queue.Queue[pb.Envelope | None] = queue.Queue()
        self.call = stub.Exchange.future(iter(self.queue.get, None), timeout=CLI_TIMEOUT_S)

    def send(self) -> None:
        self.queue.put(pb.Envelope(topic="nobody-hosts-this", partition=0, from_id=4))

    def end(self) -> str:
        self.queue.put(None)
        try:
            summary = self.call.result(timeout=STREAM_END_S)
        except grpc.RpcError as exc:
            return str(exc.code().name)
        finally:
            self.channel.close()
        return f"OK {summary.envelopes}"


def _opened_as_node_4(cluster: ScalingCluster, target: int) -> str:
    """How a new stream with node 4's certificate (no envelope) to node `target` ends."""
    return _StreamAsNode4(cluster, target).end()


def _replicas_on(client: Client, node_id: int) -> set[tuple[str, int]]:
    meta = client.refresh_metadata()
    parts = [(t.name, p) for t in meta.topics for p in t.partitions]
    return {(name, p.partition) for name, p in parts if node_id in p.replicas}


def _held_by(data_dir: Path, topic: str, partition: int, value: bytes) -> bool:
    """Whether the node with `data_dir` holds `value` in its copy of the partition (its
    segment files, byte for byte: frames keep values as they are)."""
    part = data_dir / topic / f"partition_{partition}"
    return any(value in f.read_bytes() for f in sorted(part.glob("*.log")))


# length: one scenario told top to bottom (setup, faults, checks); split, it would hide the story
def test_the_image_adds_and_removes_a_node_without_restarting_the_others_under_load(
    image: str, tmp_path: Path
) -> None:
    cluster = ScalingCluster(image, tmp_path)
    held: dict[int, _StreamAsNode4] = {}
    try:
        cluster.start_members([1, 2, 3])
        with cluster.client() as client:
            # "acked" sorts first: `spread` moves a replica of the producer's partition too
            client.create_topic("acked", 1, 3, format="raw")
            client.create_topic("spread", 4, 3, format="raw")
            for p in range(4):
                client.append("spread", p, [b"s%d" % p], acks="all")
        with SteadyProducer(cluster, "acked") as producer:
            producer.wait_acked(STEP)
            # -- node 4 joins: started on an empty dir, then added (nodes 1-3 keep running)
            cluster.start_node(4, [1, 2, 3, 4])
            node4 = cluster.nodes[4]
            node4.wait_serving()
            added = _replog(
                cluster, "node", "add", "4", node4.address,
                "--peer-address", node4.peer_address, "--wait", "--wait-s", str(WAIT_S),
            )  # fmt: skip
            assert added["done"] is True, added
            assert 4 in {n["id"] for n in added["nodes"]}, added
            moved = {(m["topic"], m["partition"]) for m in added["moves"]}
            assert ("acked", 0) in moved, f"spread moves the producer's partition: {added}"
            cluster.members = [1, 2, 3, 4]
            for i in (1, 2, 3, 4):
                wait_until(
                    lambda i=i: (q := _quorum_seen_by(cluster, i)) and q[0] == {1, 2, 3, 4},
                    f"node {i} sees node 4 voting in the metadata quorum",
                    DEADLINE_S,
                )
            producer.wait_acked(producer.count() + STEP, "acks go on with node 4 a replica")
            with cluster.client() as client:
                assert _replicas_on(client, 4) == moved
                # node 4's certificate is a peer's: its copies came over mutual TLS
                acked = producer.acked
                first_acked = acked[min(acked)]
                for topic, p in sorted(moved):
                    value = b"s%d" % p if topic == "spread" else first_acked
                    wait_until(
                        lambda t=topic, p=p, v=value: _held_by(node4.data_dir, t, p, v),
                        f"node 4's copy of {topic}/{p} holds {value!r}",
                        DEADLINE_S,
                    )
                assert _opened_as_node_4(cluster, 1) == "OK 0", "a member's stream is accepted"
                held.update({i: _StreamAsNode4(cluster, i) for i in (1, 2, 3)})
                for stream in held.values():
                    stream.send()
                client.create_topic("wide", 6, 3, format="raw")
                meta = client.refresh_metadata(["wide"])
                placed = {n for p in meta.topics[0].partitions for n in p.replicas}
                assert placed == {1, 2, 3, 4}, f"a new topic places replicas on node 4: {placed}"
                for p in range(6):
                    client.append("wide", p, [b"w%d" % p], acks="all")
            # -- node 4 leaves: every replica moved off, then removed, then stopped
            decommissioned = _replog(
                cluster, "node", "decommission", "4", "--wait", "--wait-s", str(WAIT_S)
            )
            assert decommissioned["done"] is True, decommissioned
            assert decommissioned["moves"], "node 4 hosted replicas to move away"
            removed = _replog(cluster, "node", "remove", "4", "--wait", "--wait-s", str(WAIT_S))
            assert removed["done"] is True, removed
            assert {n["id"] for n in removed["nodes"]} == {1, 2, 3}, removed
            cluster.members = [1, 2, 3]
            for i in (1, 2, 3):
                wait_until(
                    lambda i=i: _quorum_seen_by(cluster, i) == ({1, 2, 3}, set()),
                    f"node {i} sees the metadata quorum without node 4",
                    DEADLINE_S,
                )
                # (it stops being a peer once it applied the change: at most a fetch later)
                wait_until(
                    lambda i=i: _opened_as_node_4(cluster, i) == "PERMISSION_DENIED",
                    f"node {i} refuses replication from removed node 4's certificate",
                    DEADLINE_S,
                )
            # a stream it opened as a member, still open, is refused at its next envelope
            for stream in held.values():
                stream.send()
            ends = {i: stream.end() for i, stream in held.items()}
            assert ends == {i: "PERMISSION_DENIED" for i in (1, 2, 3)}, ends
            # node 4 still runs with its old view; the others go on without it
            assert node4.status() == "running", node4.logs()
            producer.wait_acked(producer.count() + STEP, "acks go on while removed node 4 runs")
            assert node4.stop() == 0, node4.logs()
            producer.wait_acked(producer.count() + STEP, "acks go on once node 4 stopped")
        assert_no_acked_record_lost(cluster, "acked", producer.acked)
        with cluster.client() as client:
            assert not _replicas_on(client, 4)
            assert sorted(n.id for n in client.refresh_metadata().nodes) == [1, 2, 3]
            for topic, count, tag in (("spread", 4, b"s"), ("wide", 6, b"w")):
                for p in range(count):
                    assert tag + b"%d" % p in client.fetch(topic, p, 0).records.values
        for i in (1, 2, 3):
            refused = [e for e in cluster.nodes[i].events() if e["event"] == "replication.refused"]
            assert refused, f"node {i} logged no refusal"
            assert all("node/4" in str(e.get("peer", "")) for e in refused), refused
    finally:
        for stream in held.values():
            stream.channel.close()
        for node in cluster.nodes.values():
            node.remove()
