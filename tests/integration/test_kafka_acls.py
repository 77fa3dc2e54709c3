"""Kafka's ACL APIs over replog's own ACLs: confluent-kafka's AdminClient creates,
describes and deletes ACLs on a `replog serve` with mutual TLS and `--authorization acl`;
an ACL created through Kafka is enforced on gRPC, one added through gRPC is described and
enforced through Kafka; what replog's ACLs cannot hold (DENY) is refused with a typed
error; a principal without describe / alter on the cluster is refused
CLUSTER_AUTHORIZATION_FAILED."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from replog import certs
from replog.client import Client, ClientTls, RetryPolicy
from replog.devcluster import free_port
from replog.errors import PermissionDeniedError
from tests.integration.servers import ServerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_api = pytest.importorskip("confluent_kafka.admin")

pytestmark = [pytest.mark.integration]

PATIENT = RetryPolicy(attempts_max=100, deadline_ms=60_000)
TOPIC = "acl-topic"


def binding(principal: str, operation: Any, permission: Any = None, **kw: Any) -> Any:
    a = admin_api
    return a.AclBinding(
        kw.get("restype", a.ResourceType.TOPIC),
        kw.get("name", TOPIC),
        kw.get("pattern", a.ResourcePatternType.LITERAL),
        principal,
        "*",
        operation,
        permission or a.AclPermissionType.ALLOW,
    )


# length: one scenario told top to bottom (setup, faults, checks); split, it would hide the story
def test_acls_created_described_and_deleted_through_kafka_are_replogs_acls(
    tmp_path: Path,
) -> None:
    a = admin_api
    ca = certs.create_ca(tmp_path / "tls")
    node = certs.issue_node(ca, tmp_path / "tls", 0)
    who = {n: certs.issue_client(ca, tmp_path / "tls", n) for n in ("admin", "erin", "frank")}
    address = f"127.0.0.1:{free_port()}"
    server = ServerProcess(
        tmp_path / "data",
        tmp_path,
        [
            "--tls-cert-file", str(node.cert_file),
            "--tls-key-file", str(node.key_file),
            "--tls-ca-file", str(ca.cert_file),
            "--tls-client-auth", "require",
            "--authorization", "acl",
            "--super-users", "User:admin",
            "--kafka-listen", address,
        ],
    ).start()  # fmt: skip

    def kafka(name: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": address,
            "security.protocol": "SSL",
            "ssl.ca.location": str(ca.cert_file),
            "ssl.certificate.location": str(who[name].cert_file),
            "ssl.key.location": str(who[name].key_file),
        }

    def grpc_as(name: str) -> Client:
        tls = ClientTls(ca.cert_file, who[name].cert_file, who[name].key_file)
        return Client(server.address, tls=tls, retry=PATIENT)

    try:
        admin = a.AdminClient(kafka("admin"))
        admin.create_topics([a.NewTopic(TOPIC, 1, 1)])[TOPIC].result(60)
        everything = a.AclBindingFilter(
            a.ResourceType.ANY, None, a.ResourcePatternType.ANY, None, None,
            a.AclOperation.ANY, a.AclPermissionType.ANY,
        )  # fmt: skip

        # Without describe / alter on the cluster: CLUSTER_AUTHORIZATION_FAILED.
        erin_admin = a.AdminClient(kafka("erin"))
        # (librdkafka drops DescribeAcls' top-level error and answers []: kafka-python says it)
        assert erin_admin.describe_acls(everything, request_timeout=30).result(60) == []
        assert describe_refused(address, ca.cert_file, who["erin"])
        grant = binding("User:erin", a.AclOperation.WRITE)
        with pytest.raises(confluent_kafka.KafkaException) as refused:
            erin_admin.create_acls([grant], request_timeout=30)[grant].result(60)
        assert (
            refused.value.args[0].code() == confluent_kafka.KafkaError.CLUSTER_AUTHORIZATION_FAILED
        )

        # Created through Kafka: a replog ACL, listed and enforced through gRPC.
        prefixed = binding(
            "User:erin", a.AclOperation.READ, restype=a.ResourceType.GROUP,
            name="erin-", pattern=a.ResourcePatternType.PREFIXED,
        )  # fmt: skip
        deny = binding("User:erin", a.AclOperation.READ, a.AclPermissionType.DENY)
        results = admin.create_acls([grant, prefixed, deny], request_timeout=30)
        assert results[grant].result(60) is None and results[prefixed].result(60) is None
        with pytest.raises(confluent_kafka.KafkaException) as invalid:
            results[deny].result(60)  # replog's ACLs allow only: not expressible
        assert invalid.value.args[0].code() == confluent_kafka.KafkaError.INVALID_REQUEST
        with grpc_as("admin") as c:
            listed = {(x["principal"], x["operation"], x["resource_type"]) for x in c.list_acls()}
        assert listed == {("User:erin", "write", "topic"), ("User:erin", "read", "group")}
        with grpc_as("erin") as c:
            assert c.append(TOPIC, 0, [b"from erin"], acks="all").base_offset >= 0

        # Added through gRPC: described and enforced through Kafka.
        with grpc_as("admin") as c:
            c.add_acl("User:frank", "read", topic=TOPIC)
        frank = a.AclBindingFilter(
            a.ResourceType.TOPIC, TOPIC, a.ResourcePatternType.MATCH, "User:frank", None,
            a.AclOperation.ANY, a.AclPermissionType.ANY,
        )  # fmt: skip
        described = admin.describe_acls(frank, request_timeout=30).result(60)
        assert [(b.principal, b.operation, b.permission_type, b.host) for b in described] == [
            ("User:frank", a.AclOperation.READ, a.AclPermissionType.ALLOW, "*")
        ]
        assert frank_reads(kafka("frank")) == [b"from erin"]

        # Deleted through Kafka: gone from replog's ACLs, and erin's appends refused again.
        erins = a.AclBindingFilter(
            a.ResourceType.ANY, None, a.ResourcePatternType.ANY, "User:erin", None,
            a.AclOperation.ANY, a.AclPermissionType.ANY,
        )  # fmt: skip
        deleted = admin.delete_acls([erins], request_timeout=30)[erins].result(60)
        assert sorted((b.restype, b.name, b.resource_pattern_type) for b in deleted) == sorted(
            [
                (a.ResourceType.TOPIC, TOPIC, a.ResourcePatternType.LITERAL),
                (a.ResourceType.GROUP, "erin-", a.ResourcePatternType.PREFIXED),
            ]
        )
        with grpc_as("admin") as c:
            assert [x["principal"] for x in c.list_acls()] == ["User:frank"]
        with grpc_as("erin") as c, pytest.raises(PermissionDeniedError):
            c.append(TOPIC, 0, [b"refused"], acks="all")
    finally:
        assert server.terminate() == 0
    log = server.log_text()  # the changes are in the audit log, as gRPC's are
    assert "acl User:erin write topic:acl-topic" in log and "kafka:CREATE_ACLS" in log
    assert "remove_acl" in log and "kafka:DELETE_ACLS" in log


def describe_refused(address: str, ca_file: Path, issued: Any) -> bool:
    kafka_python = pytest.importorskip("kafka")
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
        ResourceType,
    )
    from kafka.errors import ClusterAuthorizationFailedError

    client = kafka_python.KafkaAdminClient(
        bootstrap_servers=address,
        security_protocol="SSL",
        ssl_cafile=str(ca_file),
        ssl_certfile=str(issued.cert_file),
        ssl_keyfile=str(issued.key_file),
        ssl_check_hostname=False,
        request_timeout_ms=30_000,
    )
    try:
        pattern = ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)
        acl_filter = ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY, pattern)
        with pytest.raises(ClusterAuthorizationFailedError):
            client.describe_acls(acl_filter)
        return True
    finally:
        client.close()


def frank_reads(config: dict[str, Any]) -> list[bytes]:
    consumer = confluent_kafka.Consumer(
        config | {"group.id": "frank-unused", "enable.auto.commit": False}
    )
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition(TOPIC, 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                return [msg.value()]
            if (
                msg is not None
                and msg.error().code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
            ):
                raise AssertionError("frank was refused")
        raise AssertionError("frank read nothing")
    finally:
        consumer.close()
