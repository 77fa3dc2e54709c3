"""Readiness (`replog.ready`, what the Kubernetes readiness probe asks for): a node is ready
only while every replica it hosts has caught up with its leader. A node cut off from its
peers turns unready; once healed it turns ready again only after it holds what the others
committed meanwhile."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.server.edge.readiness import READY_SERVICE
from tests.integration.faults import ProxyMesh
from tests.integration.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=90_000)
SERVING = health_pb2.HealthCheckResponse.SERVING


def ready(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=READY_SERVICE), timeout=5)
        except grpc.RpcError:
            return False
        return bool(reply.status == SERVING)


def log_bytes(node_dir: Path) -> int:
    return sum(p.stat().st_size for p in (node_dir / "r" / "partition_0").glob("*.log"))


def test_a_cut_off_node_is_unready_until_it_has_caught_up_again(tmp_path: Path) -> None:
    mesh = ProxyMesh()
    cluster = DevCluster(tmp_path / "cluster", 3, peer_address=mesh.route)
    cluster.start()
    try:
        addresses = cluster.addresses
        with Client(cluster.bootstrap, retry=PATIENT) as client:
            client.create_topic("r", 1, 3)
            client.append("r", 0, [b"first"], acks="all")
            wait_until(lambda: all(ready(a) for a in addresses.values()), "every node is ready")
            cut = max(addresses)
            metadata = client.refresh_metadata(["r"])
            if metadata.topics[0].partitions[0].leader_id == cut:
                cut = min(addresses)  # cut a follower of "r"
            mesh.isolate(cut)
            wait_until(lambda: not ready(addresses[cut]), "the cut-off node turns unready")
            majority = ",".join(a for i, a in addresses.items() if i != cut)
            with Client(majority, retry=PATIENT) as survivors:
                batch = [b"x" * 1000] * 1000
                for _ in range(20):
                    survivors.append("r", 0, batch, acks="all")
                latest = survivors.list_offsets("r")[0].latest
            assert all(ready(a) for i, a in addresses.items() if i != cut)
            mesh.heal()
            wait_until(lambda: ready(addresses[cut]), "the healed node is ready again")
            # Ready means it holds what was committed while it was away (nothing was
            # appended since: every replica's log is the same bytes).
            sizes = {i: log_bytes(m.data_dir) for i, m in cluster.members.items()}
            assert len(set(sizes.values())) == 1, sizes
            assert latest > 20_000
    finally:
        cluster.kill_all()
        mesh.close()
