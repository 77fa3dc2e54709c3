"""Admin RPCs, metadata, health, reflection and metrics on a real server."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from replog.client import Client
from replog.errors import InvalidArgumentError, MembershipChangeRefusedError, UnknownNodeError
from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration


def test_topics_are_created_listed_described_and_deleted(client: Client) -> None:
    client.create_topic("admin-orders", 3)
    assert client.list_topics()["admin-orders"] == 3
    client.append("admin-orders", 2, [b"a", b"b"])
    parts = client.describe_topic("admin-orders")
    assert [p.partition for p in parts] == [0, 1, 2]
    p2 = parts[2]
    assert (p2.leader_id, p2.replicas, p2.log_start_offset) == (0, (0,), 0)
    # Offset 0 of each partition is its first leader's epoch marker (a cluster of one).
    assert (p2.high_watermark, p2.log_end_offset, p2.segment_count) == (3, 3, 1)
    assert p2.size_bytes > 2 * 13  # the marker, then two 13-byte frames
    offsets = client.list_offsets("admin-orders", [2, 0])
    assert [(o.partition, o.earliest, o.latest) for o in offsets] == [(2, 0, 3), (0, 0, 1)]
    client.delete_topic("admin-orders")
    assert "admin-orders" not in client.list_topics()


def test_metadata_names_this_node_as_leader_of_every_partition(
    shared_server: ServerProcess, client: Client
) -> None:
    client.create_topic("admin-meta", 2)
    meta = client.refresh_metadata(["admin-meta"])
    assert [(n.id, n.address) for n in meta.nodes] == [(0, shared_server.address)]
    (topic,) = meta.topics
    assert [(p.partition, p.leader_id, list(p.replicas)) for p in topic.partitions] == [
        (0, 0, [0]),
        (1, 0, [0]),
    ]


def test_health_reports_serving_for_the_server_and_each_service(
    shared_server: ServerProcess,
) -> None:
    with grpc.insecure_channel(shared_server.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "replog.v1.Log", "replog.v1.Admin"):
            resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_replog_services(shared_server: ServerProcess) -> None:
    with grpc.insecure_channel(shared_server.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        (resp,) = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
        names = {s.name for s in resp.list_services_response.service}
    assert {"replog.v1.Log", "replog.v1.Admin", "grpc.health.v1.Health"} <= names


def test_metrics_expose_requests_appends_and_partition_offsets(
    shared_server: ServerProcess, client: Client
) -> None:
    client.create_topic("admin-metrics", 1)
    client.append("admin-metrics", 0, [b"12345"] * 3)
    text = shared_server.metrics()
    assert 'replog_requests_total{code="OK",method="Append"}' in text
    assert 'replog_high_watermark{partition="0",topic="admin-metrics"} 4.0' in text
    assert 'replog_log_end_offset{partition="0",topic="admin-metrics"} 4.0' in text
    assert 'replog_segments{partition="0",topic="admin-metrics"} 1.0' in text
    assert "replog_append_records_total" in text
    assert 'replog_request_seconds_bucket{le="0.001",method="Append"}' in text


def test_a_single_node_refuses_to_grow_and_to_lose_its_only_member(client: Client) -> None:
    """A node started without --peers is a cluster of one that does not grow (its address
    may be a port it picked); RemoveNode of an unknown node or of the last member is typed."""
    with pytest.raises(MembershipChangeRefusedError) as refused:
        client.add_node(2, "127.0.0.1:1")
    assert refused.value.refusal == "single_node"
    with pytest.raises(UnknownNodeError):
        client.remove_node(7)
    with pytest.raises(InvalidArgumentError, match="last member"):
        client.remove_node(0)
    assert [n.id for n in client.refresh_metadata().nodes] == [0]
