"""The Kafka listener is no back door: a real `replog serve` with TLS, `--authorization acl`
and SCRAM credentials, and librdkafka (confluent-kafka) over SASL_SSL: an allowed principal
produces and consumes, one without an ACL is refused with TOPIC_AUTHORIZATION_FAILED (and
audited), a plaintext client gets no Kafka answer at all; with `--tls-client-auth require`
a client certificate is the principal, and a client without one gets no connection."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from replog import certs
from replog.client import Client, ClientTls, RetryPolicy
from replog.devcluster import free_port
from replog.kafka import protocol
from replog.kafka.protocol import ApiKey, RequestHeader
from replog.server.edge.auth import hash_token
from replog.server.kafka_edge import sasl
from tests.integration.servers import ServerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_api = pytest.importorskip("confluent_kafka.admin")

PASSWORDS = {"User:admin": "admin-pw", "User:alice": "alice-pw", "User:bob": "bob-pw"}
ADMIN_TOKEN = "admin-token"
PATIENT = RetryPolicy(attempts_max=100, deadline_ms=60_000)


def kafka_config(address: str, ca: Path, principal: str, mechanism: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": address,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.username": principal.removeprefix("User:"),
        "sasl.password": PASSWORDS[principal],
        "ssl.ca.location": str(ca),
    }


# length: one scenario told top to bottom (setup, faults, checks); split, it would hide the story
def test_sasl_ssl_scram_clients_are_held_to_the_acls_and_plaintext_is_refused(
    tmp_path: Path,
) -> None:
    ca = certs.create_ca(tmp_path / "tls")
    node = certs.issue_node(ca, tmp_path / "tls", 0)
    scram = tmp_path / "scram"
    scram.write_text(
        "".join(
            sasl.scram_credential(m, pw, iterations=4096).entry(p) + "\n"
            for p, pw in PASSWORDS.items()
            for m in sasl.MECHANISMS
        )
    )
    tokens = tmp_path / "tokens"
    tokens.write_text(f"User:admin {hash_token(ADMIN_TOKEN)}\n")
    address = f"127.0.0.1:{free_port()}"
    server = ServerProcess(
        tmp_path / "data",
        tmp_path,
        [
            "--tls-cert-file", str(node.cert_file),
            "--tls-key-file", str(node.key_file),
            "--tls-ca-file", str(ca.cert_file),
            "--authorization", "acl",
            "--super-users", "User:admin",
            "--token-file", str(tokens),
            "--kafka-scram-file", str(scram),
            "--kafka-listen", address,
        ],
    ).start()  # fmt: skip
    try:
        # The super-user creates the topic through Kafka (SASL/PLAIN with its gRPC bearer
        # token); the ACLs go in through gRPC.
        admin = admin_api.AdminClient(
            kafka_config(address, ca.cert_file, "User:admin", "PLAIN")
            | {"sasl.password": ADMIN_TOKEN}
        )
        admin.create_topics([admin_api.NewTopic("orders", 1, 1)])["orders"].result(60)
        grpc_tls = ClientTls(ca.cert_file)
        with Client(server.address, tls=grpc_tls, token=ADMIN_TOKEN, retry=PATIENT) as c:
            c.add_acl("User:alice", "write", topic="orders")
            c.add_acl("User:alice", "read", topic="orders")
            c.add_acl("User:alice", "read", group="alice-group")

        alice = kafka_config(address, ca.cert_file, "User:alice", "SCRAM-SHA-256")
        producer = confluent_kafka.Producer(alice | {"enable.idempotence": True})
        for i in range(5):
            producer.produce("orders", key=b"k", value=f"v{i}".encode())
        assert producer.flush(60) == 0
        consumer = confluent_kafka.Consumer(
            alice | {"group.id": "alice-group", "enable.auto.commit": False}
        )
        got: list[bytes] = []
        try:
            tp = confluent_kafka.TopicPartition("orders", 0, confluent_kafka.OFFSET_BEGINNING)
            consumer.assign([tp])
            deadline = time.monotonic() + 60
            while len(got) < 5 and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
            consumer.commit(asynchronous=False)  # read on the group and the topic: allowed
        finally:
            consumer.close()
        assert got == [f"v{i}".encode() for i in range(5)]

        # bob authenticates but holds no ACL: his produce is refused, typed.
        bob = kafka_config(address, ca.cert_file, "User:bob", "SCRAM-SHA-512")
        errors: list[Any] = []
        refused = confluent_kafka.Producer(bob | {"message.timeout.ms": 30_000})
        refused.produce("orders", value=b"no", on_delivery=lambda err, _msg: errors.append(err))
        refused.flush(60)
        del refused, producer  # their connections end before the node does
        assert [e.code() for e in errors] == [confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED]
        with Client(server.address, tls=grpc_tls, token=ADMIN_TOKEN, retry=PATIENT) as c:
            values = list(c.fetch("orders", 0, 0).records.values)
        assert b"no" not in values and values.count(b"v0") == 1, "bob wrote nothing"
        log = server.log_file.read_text()
        assert "audit.denied" in log and "User:bob" in log
        assert "audit.change" in log and "topic:orders" in log
        assert 'replog_kafka_refused_total{outcome="denied"}' in server.metrics()

        # Plaintext on the TLS port: no Kafka answer, the connection is closed.
        answer = plaintext_answer(address)
        assert answer == b"" or answer[:1] == b"\x15", answer[:20]  # nothing, or a TLS alert
    finally:
        assert server.terminate() == 0


def plaintext_answer(address: str) -> bytes:
    """What a plaintext ApiVersions request on `address` gets back before the node closes
    the connection (a TLS alert at most: never a Kafka response)."""
    host, port = address.rsplit(":", 1)
    request = protocol.encode_request(
        RequestHeader(ApiKey.API_VERSIONS, 3, 42, "plain"),
        {"client_software_name": "t", "client_software_version": "1"},
    )
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(request)
        out = b""
        while True:
            try:
                chunk = s.recv(4096)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
    if len(out) >= 8:
        (correlation,) = struct.unpack(">i", out[4:8])
        assert correlation != 42, "a Kafka answer came back in plaintext"
    return out


def test_a_required_client_certificate_is_the_kafka_principal(tmp_path: Path) -> None:
    ca = certs.create_ca(tmp_path / "tls")
    node = certs.issue_node(ca, tmp_path / "tls", 0)
    who = {n: certs.issue_client(ca, tmp_path / "tls", n) for n in ("admin", "erin")}
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

    def ssl_config(name: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": address,
            "security.protocol": "SSL",
            "ssl.ca.location": str(ca.cert_file),
            "ssl.certificate.location": str(who[name].cert_file),
            "ssl.key.location": str(who[name].key_file),
        }

    def produce_as_erin() -> list[Any]:
        errors: list[Any] = []
        producer = confluent_kafka.Producer(ssl_config("erin") | {"message.timeout.ms": 30_000})
        producer.produce("certs", value=b"e", on_delivery=lambda err, _m: errors.append(err))
        producer.flush(60)
        return errors

    try:
        admin = admin_api.AdminClient(ssl_config("admin"))
        admin.create_topics([admin_api.NewTopic("certs", 1, 1)])["certs"].result(60)
        denied = produce_as_erin()
        assert [e.code() for e in denied] == [confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED]
        as_admin = ClientTls(ca.cert_file, who["admin"].cert_file, who["admin"].key_file)
        with Client(server.address, tls=as_admin, retry=PATIENT) as c:
            c.add_acl("User:erin", "write", topic="certs")
        assert produce_as_erin() == [None], "User:erin, named by its certificate, may write"

        # Without a certificate the TLS handshake itself is refused: no Kafka answer.
        assert answer_without_certificate(address, ca.cert_file) == b""
    finally:
        assert server.terminate() == 0


def answer_without_certificate(address: str, ca_file: Path) -> bytes:
    """What an ApiVersions request over TLS without a client certificate gets back (b"":
    the handshake, or the first read after it with TLS 1.3, failed)."""
    context = ssl.create_default_context(cafile=str(ca_file))
    host, port = address.rsplit(":", 1)
    request = protocol.encode_request(RequestHeader(ApiKey.API_VERSIONS, 0, 1, "nocert"), {})
    try:
        with (
            socket.create_connection((host, int(port)), timeout=30) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            tls.sendall(request)
            return tls.recv(4096)
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return b""
