"""The Kafka listener's security layer: the API -> ACL table, the per-resource splits and
their typed errors, SASL PLAIN and SCRAM (RFC 5802 / RFC 7677 vectors), quotas' throttle."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
from pathlib import Path
from typing import Any

import pytest

from replog.errors import UnauthenticatedError
from replog.kafka.errors import ErrorCode
from replog.kafka.protocol import ApiKey, RequestHeader
from replog.server.edge.acl_table import TABLE as GRPC_TABLE
from replog.server.edge.auth import hash_token
from replog.server.edge.exposure import refusal
from replog.server.edge.quotas import Quotas
from replog.server.kafka_edge import authz, sasl
from replog.server.kafka_edge.apis import SESSION_APIS, SUPPORTED
from replog.server.kafka_edge.security import (
    KafkaSecurity,
    SecurityConfig,
    Session,
    certificate_principal,
)
from replog.server.meta.acls import AclEntry
from replog.server.meta.metadata import MetadataImage
from replog.server.meta.quotas import QuotaEntry

Body = dict[str, Any]


# -- the table ------------------------------------------------------------------------------


def test_every_served_kafka_api_has_an_entry_in_the_acl_table() -> None:
    missing = [ApiKey(k).name for k in SUPPORTED if k not in authz.TABLE]
    assert missing == [], f"Kafka APIs without an ACL rule: {missing}"


def test_every_kafka_rule_is_a_grpc_rule_and_only_pre_authentication_apis_are_open() -> None:
    for key, rule in authz.TABLE.items():
        if rule.method:
            assert rule.method in GRPC_TABLE, ApiKey(key).name
            assert GRPC_TABLE[rule.method].kind == "acl"
        else:
            assert key in (ApiKey.API_VERSIONS, *SESSION_APIS), ApiKey(key).name
    assert authz.TABLE[ApiKey.PRODUCE].operation == "write"
    assert authz.TABLE[ApiKey.FETCH].operation == "read"
    assert authz.TABLE[ApiKey.CREATE_TOPICS].operation == "create"
    assert authz.TABLE[ApiKey.DELETE_TOPICS].operation == "delete"
    assert authz.rule_for(9999) is authz.STRICTEST


def image_with(*acls: AclEntry) -> MetadataImage:
    image = MetadataImage()
    image.acls |= set(acls)
    return image


def acl(principal: str, operation: str, resource_type: str, name: str = "") -> AclEntry:
    return AclEntry(principal, resource_type, name, False, operation)


ALICE = "User:alice"


def security(*acls: AclEntry, **config: Any) -> KafkaSecurity:
    image = image_with(*acls)
    return KafkaSecurity(SecurityConfig(authorization=True, **config), lambda: image)


def run(sec: KafkaSecurity, session: Session, api: ApiKey, body: Body, version: int = 7) -> Any:
    seen: list[Body] = []

    async def handle(header: RequestHeader, given: Body) -> Body | None:
        seen.append(given)
        return ECHO[api](given)

    header = RequestHeader(api, version, 1, "test")
    return asyncio.run(sec.answer(session, header, body, handle)), seen


ECHO: dict[int, Any] = {
    ApiKey.PRODUCE: lambda b: {
        "responses": [
            {"name": t["name"], "partition_responses": [{"index": 0, "error_code": 0}]}
            for t in b["topic_data"]
        ]
    },
    ApiKey.METADATA: lambda b: {
        "topics": [{"name": n, "error_code": 0, "partitions": []} for n in ("a", "b", "secret")]
    },
    ApiKey.OFFSET_COMMIT: lambda b: {
        "topics": [
            {"name": t["name"], "partitions": [{"partition_index": 0, "error_code": 0}]}
            for t in b["topics"]
        ]
    },
    ApiKey.DELETE_TOPICS: lambda b: {
        "responses": [{"name": n, "error_code": 0} for n in b["topic_names"]]
    },
    ApiKey.INIT_PRODUCER_ID: lambda b: {"error_code": 0, "producer_id": 7, "producer_epoch": 0},
}


def produce_body(*topics: str, records: bytes = b"xx") -> Body:
    data = [{"name": t, "partition_data": [{"index": 0, "records": records}]} for t in topics]
    return {"acks": 1, "timeout_ms": 1000, "transactional_id": None, "topic_data": data}


def test_a_produce_writes_the_permitted_topics_and_refuses_the_others_typed() -> None:
    sec = security(acl(ALICE, "write", "topic", "a"))
    response, seen = run(sec, Session("p", ALICE), ApiKey.PRODUCE, produce_body("a", "b"))
    assert [t["name"] for t in seen[0]["topic_data"]] == ["a"]
    codes = {t["name"]: t["partition_responses"][0]["error_code"] for t in response["responses"]}
    assert codes == {"a": 0, "b": ErrorCode.TOPIC_AUTHORIZATION_FAILED}


def test_metadata_lists_only_describable_topics_and_a_named_secret_is_authorization_failed() -> (
    None
):
    sec = security(acl(ALICE, "read", "topic", "a"), acl(ALICE, "describe", "topic", "b"))
    listing, _ = run(sec, Session("p", ALICE), ApiKey.METADATA, {"topics": None})
    assert [t["name"] for t in listing["topics"]] == ["a", "b"]
    named, _ = run(sec, Session("p", ALICE), ApiKey.METADATA, {"topics": [{"name": "secret"}]})
    secret = [t for t in named["topics"] if t["name"] == "secret"]
    assert secret[0]["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_an_offset_commit_needs_read_on_the_group_and_on_each_topic() -> None:
    body = {
        "group_id": "g",
        "member_id": "",
        "topics": [
            {"name": n, "partitions": [{"partition_index": 0, "committed_offset": 1}]}
            for n in ("a", "secret")
        ],
    }
    no_group = security(acl(ALICE, "read", "topic", "a"))
    response, seen = run(no_group, Session("p", ALICE), ApiKey.OFFSET_COMMIT, body)
    assert seen == [], "nothing is committed without read on the group"
    codes = {p["error_code"] for t in response["topics"] for p in t["partitions"]}
    assert codes == {ErrorCode.GROUP_AUTHORIZATION_FAILED}
    with_group = security(acl(ALICE, "read", "topic", "a"), acl(ALICE, "read", "group", "g"))
    response, seen = run(with_group, Session("p", ALICE), ApiKey.OFFSET_COMMIT, body)
    assert [t["name"] for t in seen[0]["topics"]] == ["a"]
    codes = {t["name"]: t["partitions"][0]["error_code"] for t in response["topics"]}
    assert codes == {"a": 0, "secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED}


def test_an_idempotent_producer_needs_write_somewhere_else_cluster_authorization_failed() -> None:
    body = {"transactional_id": None, "transaction_timeout_ms": 1000}
    response, seen = run(security(), Session("p", ALICE), ApiKey.INIT_PRODUCER_ID, body, 4)
    assert seen == [] and response["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    writer = security(acl(ALICE, "write", "topic", "a"))
    response, _ = run(writer, Session("p", ALICE), ApiKey.INIT_PRODUCER_ID, body, 4)
    assert response["producer_id"] == 7


def test_anonymous_is_refused_everything_and_super_users_and_acl_off_everything() -> None:
    body = {"timeout_ms": 1000, "topic_names": ["a"]}
    sec = security(acl("User:*", "delete", "topic", "a"))
    anonymous, seen = run(sec, Session("p"), ApiKey.DELETE_TOPICS, body, 4)
    assert seen == [{"timeout_ms": 1000, "topic_names": []}]
    assert anonymous["responses"][0]["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    admin = security(super_users=frozenset({"User:root"}))
    assert run(admin, Session("p", "User:root"), ApiKey.DELETE_TOPICS, body, 4)[0]["responses"] == [
        {"name": "a", "error_code": 0}
    ]
    off = KafkaSecurity(SecurityConfig(), lambda: image_with())
    assert run(off, Session("p"), ApiKey.DELETE_TOPICS, body, 4)[0]["responses"][0] == {
        "name": "a",
        "error_code": 0,
    }


def test_a_client_certificate_names_its_principal_like_the_grpc_edge() -> None:
    cert = {"subjectAltName": (("DNS", "x"), ("URI", "replog://client/erin"))}
    assert certificate_principal(cert) == "User:erin"
    assert certificate_principal({"subjectAltName": (("URI", "replog://node/1"),)}) is None
    assert certificate_principal(None) is None


def test_a_principal_over_its_produce_quota_is_throttled_with_kafkas_throttle_time() -> None:
    image = image_with()
    image.quotas[ALICE] = QuotaEntry(ALICE, produce_bytes_per_s=1000)
    sec = KafkaSecurity(SecurityConfig(), lambda: image)
    now = [100.0]
    sec.quotas = Quotas(lambda _c: ALICE, lambda: image.quotas, clock=lambda: now[0])
    session = Session("p", ALICE)
    first, _ = run(sec, session, ApiKey.PRODUCE, produce_body("a", records=b"x" * 900))
    assert first.get("throttle_time_ms", 0) == 0 and session.mute_s == 0
    second, _ = run(sec, session, ApiKey.PRODUCE, produce_body("a", records=b"x" * 1100))
    assert second["throttle_time_ms"] == 1000  # 1000 bytes of debt at 1000 B/s
    assert session.mute_s == pytest.approx(1.0)


def test_plaintext_kafka_off_loopback_needs_tls_or_insecure() -> None:
    common: dict[str, Any] = dict(listen="127.0.0.1:1", peer_listen="", peers=0)
    refused = refusal(**common, tls=False, insecure=False, kafka_listen="0.0.0.0:9092")
    assert refused is not None and "\n" not in refused and "--insecure" in refused
    assert refusal(**common, tls=True, insecure=False, kafka_listen="0.0.0.0:9092") is None
    assert refusal(**common, tls=False, insecure=True, kafka_listen="0.0.0.0:9092") is None
    assert refusal(**common, tls=False, insecure=False, kafka_listen="127.0.0.1:9092") is None


# -- SASL -----------------------------------------------------------------------------------


def test_scram_sha_1_exchange_of_rfc_5802() -> None:
    salt = base64.b64decode("QSXCR+Q6sek8bf92")
    stored, server = sasl.scram_keys("sha1", "pencil", salt, 4096)
    credential = sasl.ScramCredential("SCRAM-SHA-1", 4096, salt, stored, server)
    scram = sasl.ScramServer("sha1", "SCRAM-SHA-1", lambda *_: credential, "3rfcNHYJY1ZVvWVs7j")
    server_first = scram.first(b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL")
    assert server_first == b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"
    final = scram.final(
        b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    )
    assert final == b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ="
    assert scram.principal == "User:user"


RFC7677_NONCE = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


def test_scram_sha_256_exchange_of_rfc_7677() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = sasl.scram_credential("SCRAM-SHA-256", "pencil", salt=salt, iterations=4096)
    scram = sasl.ScramServer(
        "sha256", "SCRAM-SHA-256", lambda *_: credential, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    )
    server_first = scram.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == f"r={RFC7677_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode()
    final = scram.final(
        f"c=biws,r={RFC7677_NONCE},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".encode()
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def client_proof(hash_name: str, password: str, server_first: bytes, bare: str) -> bytes:
    """A SCRAM client's final message for `server_first` (RFC 5802 section 3)."""
    attrs = dict(a.split("=", 1) for a in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac(
        hash_name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    stored = hashlib.new(hash_name, client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(stored, auth, hash_name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def scram_file(tmp_path: Path, password: str = "s3cret") -> Path:
    path = tmp_path / "scram"
    lines = [
        sasl.scram_credential(m, password, iterations=4096).entry(ALICE) for m in sasl.MECHANISMS
    ]
    path.write_text("# kafka users\n" + "\n".join(lines) + "\n")
    return path


def authenticate(sec: KafkaSecurity, session: Session, mechanism: str, password: str) -> Body:
    async def never(header: RequestHeader, body: Body) -> Body:
        raise AssertionError("SASL requests never reach the APIs")

    def call(api: ApiKey, body: Body) -> Any:
        return asyncio.run(sec.answer(session, RequestHeader(api, 1, 1, "t"), body, never))

    assert call(ApiKey.SASL_HANDSHAKE, {"mechanism": mechanism})["error_code"] == 0
    bare = "n=alice,r=abcdefgh"
    first = call(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": f"n,,{bare}".encode()})
    final = client_proof(sasl.MECHANISMS[mechanism], password, first["auth_bytes"], bare)
    return dict(call(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": final}))


@pytest.mark.parametrize("mechanism", sorted(sasl.MECHANISMS))
def test_a_scram_exchange_authenticates_its_user_and_a_wrong_password_closes(
    tmp_path: Path, mechanism: str
) -> None:
    sec = security(scram_file=scram_file(tmp_path), tls=None)
    session = Session("p")
    done = authenticate(sec, session, mechanism, "s3cret")
    assert done["error_code"] == 0 and done["auth_bytes"].startswith(b"v=")
    assert session.principal == ALICE and not session.close
    wrong = Session("p")
    failed = authenticate(sec, wrong, mechanism, "guess")
    assert failed["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert wrong.principal == "ANONYMOUS" and wrong.close


def test_an_unknown_scram_user_gets_a_stable_answer_and_fails() -> None:
    def lookup(*_: str) -> None:
        return None

    a = sasl.ScramServer("sha256", "SCRAM-SHA-256", lookup, "x").first(b"n,,n=nobody,r=abc")
    b = sasl.ScramServer("sha256", "SCRAM-SHA-256", lookup, "x").first(b"n,,n=nobody,r=abc")
    assert a == b, "the same salt for the same unknown user: nothing tells it is unknown"
    server = sasl.ScramServer("sha256", "SCRAM-SHA-256", lookup, "x")
    server.first(b"n,,n=nobody,r=abc")
    with pytest.raises(UnauthenticatedError):
        server.final(b"c=biws,r=abcx,p=" + base64.b64encode(b"0" * 32))


@pytest.mark.parametrize(
    "message",
    [b"p=tls-unique,,n=u,r=a", b"n,,r=a", b"n,a=bob,n=alice,r=a", b"n,,n=a=b,r=x", b"\xff", b""],
)
def test_malformed_scram_client_first_messages_are_refused(message: bytes) -> None:
    with pytest.raises(UnauthenticatedError):
        sasl.ScramServer("sha256", "SCRAM-SHA-256", lambda *_: None).first(message)


def test_plain_authenticates_a_bearer_token_of_its_user_only(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{ALICE} {hash_token('tok-a')}\n")
    sec = security(token_file=tokens)
    assert sec.mechanisms == ["PLAIN"]
    assert sasl.plain(b"\0alice\0tok-a", sec.tokens.principal if sec.tokens else None) == ALICE
    for message in (b"\0bob\0tok-a", b"\0alice\0nope", b"bob\0alice\0tok-a", b"alice\0tok-a"):
        with pytest.raises(UnauthenticatedError):
            sasl.plain(message, sec.tokens.principal if sec.tokens else None)


def test_a_request_other_than_authenticate_after_a_handshake_is_refused(tmp_path: Path) -> None:
    sec = security(scram_file=scram_file(tmp_path))
    session = Session("p")

    async def handle(header: RequestHeader, body: Body) -> Body:
        return {}

    async def go() -> None:
        hs = RequestHeader(ApiKey.SASL_HANDSHAKE, 1, 1, "t")
        unknown = await sec.answer(session, hs, {"mechanism": "GSSAPI"}, handle)
        assert unknown["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert "SCRAM-SHA-512" in unknown["mechanisms"]
        await sec.answer(session, hs, {"mechanism": "SCRAM-SHA-256"}, handle)
        with pytest.raises(UnauthenticatedError):
            await sec.answer(session, RequestHeader(ApiKey.METADATA, 9, 2, "t"), {}, handle)

    asyncio.run(go())
    assert session.close


def test_a_scram_file_line_out_of_shape_is_refused_with_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "scram"
    path.write_text(
        "User:alice SCRAM-SHA-256 iterations=10 salt=AA== stored_key=AA== server_key=AA==\n"
    )
    with pytest.raises(Exception, match=":1: expected"):
        sasl.ScramFile(path)


def test_the_cli_prints_a_scram_line_that_authenticates_its_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    from replog.cli import run as cli

    monkeypatch.setattr("sys.stdin", io.StringIO("s3cret\n"))
    argv = ["token", "scram", "--principal", ALICE, "--mechanism", "SCRAM-SHA-512"]
    assert cli([*argv, "--iterations", "4096"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("User:alice SCRAM-SHA-512 iterations=4096 ") and "s3cret" not in line
    (tmp_path / "scram").write_text(line)
    sec = security(scram_file=tmp_path / "scram")
    assert authenticate(sec, Session("p"), "SCRAM-SHA-512", "s3cret")["error_code"] == 0


def test_the_kafka_listener_runs_with_tls_and_acls_and_scram_credentials_need_tls(
    tmp_path: Path,
) -> None:
    from replog.errors import InvalidConfigError
    from replog.server.settings import Settings

    files = {}
    for name in ("tls_cert_file", "tls_key_file", "tls_ca_file"):
        (tmp_path / name).write_text("")
        files[name] = str(tmp_path / name)
    scram = scram_file(tmp_path)
    secured = {**files, "kafka_listen": "0.0.0.0:9092", "authorization": "acl"}
    settings = Settings.from_sources({**secured, "kafka_scram_file": str(scram)}, env={})
    assert settings.kafka_scram_file == scram and settings.tls is not None
    with pytest.raises(InvalidConfigError, match="kafka_scram_file needs TLS"):
        Settings.from_sources({"kafka_scram_file": str(scram)}, env={})
    with pytest.raises(InvalidConfigError, match="Kafka clients in plaintext"):
        Settings.from_sources({"kafka_listen": "0.0.0.0:9092"}, env={})


def test_a_rotated_ca_bundle_holds_from_the_next_handshake_a_removed_ca_included(
    tmp_path: Path,
) -> None:
    import math
    import shutil
    import ssl

    from replog import certs
    from replog.server.kafka_edge.security import ReloadingContext
    from replog.tls import TlsFiles

    old, new = certs.create_ca(tmp_path / "old"), certs.create_ca(tmp_path / "new", "new CA")
    node = certs.issue_node(old, tmp_path / "old", 0)
    clients = {"old": certs.issue_client(old, tmp_path / "c", "o")}
    clients["new"] = certs.issue_client(new, tmp_path / "c2", "n")
    ca_file = tmp_path / "ca.pem"
    shutil.copy(old.cert_file, ca_file)
    tls = ReloadingContext(
        TlsFiles(node.cert_file, node.key_file, ca_file), require_client_auth=True
    )

    async def accepted(who: str) -> bool:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                writer.write(await reader.readexactly(1))
                await writer.drain()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=tls.context)
        port = server.sockets[0].getsockname()[1]
        client = ssl.create_default_context(cafile=str(old.cert_file))
        client.load_cert_chain(clients[who].cert_file, clients[who].key_file)
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client, server_hostname="localhost"
            )
            writer.write(b"x")
            got = await reader.read(1)  # TLS 1.3: a refused certificate shows here
            writer.close()
            return got == b"x"
        except (ssl.SSLError, ConnectionError):
            return False
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(accepted("old")) and not asyncio.run(accepted("new"))
    shutil.copy(new.cert_file, ca_file)  # the old CA taken out, the new one in
    os.utime(ca_file, ns=(1, 1))  # a different signature whatever the clock's resolution
    tls.check(now=math.inf)
    assert tls.reloads == 1
    assert asyncio.run(accepted("new")) and not asyncio.run(accepted("old"))


def test_topic_checks_through_matchers_agree_with_the_grpc_rule_on_every_case() -> None:
    from replog.server.edge.acl_table import may as grpc_may

    acls = [
        AclEntry(ALICE, "topic", "orders.", True, "write"),
        AclEntry(ALICE, "topic", "audit", False, "read"),
        AclEntry("User:*", "topic", "public", False, "describe"),
        AclEntry("User:bob", "cluster", "", False, "all"),
        AclEntry(ALICE, "topic", "x", False, "all"),
        AclEntry(ALICE, "group", "orders.eu", False, "read"),
    ]
    image = image_with(*acls)
    sec = KafkaSecurity(SecurityConfig(authorization=True), lambda: image)
    names = ["orders.eu", "orders", "audit", "public", "x", "y", "orders.eu.x"]
    for principal in (ALICE, "User:bob", "User:carol"):
        may = sec.may(principal)
        for operation in ("read", "write", "describe", "delete", "create", "alter"):
            for name in names:
                expected = grpc_may(image.allowed, principal, operation, "topic", name)
                assert may(operation, "topic", name) == expected, (principal, operation, name)


def test_the_group_protocol_needs_read_on_the_group_and_describes_only_what_it_may() -> None:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup need read on the group (as gRPC's
    JoinGroup does); a refusal is GROUP_AUTHORIZATION_FAILED in the API's own answer shape
    (it encodes at the version asked), and the handler is never called. DescribeGroups
    answers each group it may not describe refused; ListGroups shows only the groups it
    may describe unless it may describe the cluster."""
    from replog.kafka import protocol

    sec = security(acl(ALICE, "read", "group", "mine"), acl(ALICE, "describe", "group", "mine"))
    session = sec.session("127.0.0.1:1", None)
    session.principal = ALICE
    bodies: dict[int, Body] = {
        ApiKey.JOIN_GROUP: {"group_id": "theirs", "member_id": "", "session_timeout_ms": 10_000}
        | {"rebalance_timeout_ms": 10_000, "protocol_type": "consumer", "protocols": []}
        | {"group_instance_id": None, "reason": None},
        ApiKey.SYNC_GROUP: {"group_id": "theirs", "member_id": "m", "generation_id": 1}
        | {"protocol_type": None, "protocol_name": None, "assignments": []}
        | {"group_instance_id": None},
        ApiKey.HEARTBEAT: {"group_id": "theirs", "member_id": "m", "generation_id": 1}
        | {"group_instance_id": None},
        ApiKey.LEAVE_GROUP: {"group_id": "theirs", "member_id": "m", "members": []},
    }
    for api, body in bodies.items():
        for version in sorted({0, 3, SUPPORTED[api][1]}):
            answer, seen = run(sec, session, api, body, version)
            assert seen == [] and answer["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
            header = RequestHeader(api, version, 1, "c")
            protocol.encode_response(header, answer, any_version=True)  # well formed
    ECHO[ApiKey.HEARTBEAT] = lambda b: {"error_code": 0}
    mine = bodies[ApiKey.HEARTBEAT] | {"group_id": "mine"}
    allowed, seen = run(sec, session, ApiKey.HEARTBEAT, mine, 3)
    assert seen == [mine] and allowed == {"error_code": 0}

    ECHO[ApiKey.DESCRIBE_GROUPS] = lambda b: {
        "groups": [{"group_id": g, "error_code": 0} for g in b["groups"]]
    }
    ECHO[ApiKey.LIST_GROUPS] = lambda b: {
        "error_code": 0,
        "groups": [{"group_id": g} for g in ("mine", "theirs")],
    }
    answer, seen = run(sec, session, ApiKey.DESCRIBE_GROUPS, {"groups": ["theirs", "mine"]}, 5)
    assert seen == [{"groups": ["mine"]}]
    codes = [(g["group_id"], g["error_code"]) for g in answer["groups"]]
    assert codes == [("theirs", ErrorCode.GROUP_AUTHORIZATION_FAILED), ("mine", 0)]
    answer, _ = run(sec, session, ApiKey.LIST_GROUPS, {"states_filter": []}, 4)
    assert [g["group_id"] for g in answer["groups"]] == ["mine"]


def test_the_admin_apis_split_their_resources_by_the_grpc_rules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CreatePartitions: alter on each topic; DescribeConfigs: describe on each topic (a
    broker resource: on the cluster); IncrementalAlterConfigs: alter likewise; DeleteGroups:
    delete on each group. The refused are answered in the API's shape (it encodes), the
    handler sees only the rest."""
    from replog.kafka import protocol
    from replog.server.edge import audit

    changes: list[tuple[str, str, str]] = []
    monkeypatch.setattr(
        audit,
        "change",
        lambda **kw: changes.append((kw["operation"], kw["resource"], kw["outcome"])),
    )
    sec = security(
        acl(ALICE, "alter", "topic", "a"),
        acl(ALICE, "describe", "topic", "a"),
        acl(ALICE, "delete", "group", "g"),
    )
    session = Session("p", ALICE)
    ECHO[ApiKey.CREATE_PARTITIONS] = lambda b: {
        "results": [{"name": t["name"], "error_code": 0} for t in b["topics"]]
    }
    topics = [{"name": n, "count": 3, "assignments": None} for n in ("a", "b")]
    body = {"topics": topics, "timeout_ms": 1000, "validate_only": False}
    answer, seen = run(sec, session, ApiKey.CREATE_PARTITIONS, body, 3)
    assert [t["name"] for t in seen[0]["topics"]] == ["a"]
    codes = {r["name"]: r["error_code"] for r in answer["results"]}
    assert codes == {"a": 0, "b": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    protocol.encode_response(RequestHeader(ApiKey.CREATE_PARTITIONS, 3, 1, "c"), answer)

    def resource(kind: int, name: str) -> Body:
        return {"resource_type": kind, "resource_name": name, "configuration_keys": None}

    resources = [resource(2, "a"), resource(2, "b"), resource(4, "1")]
    for api, key, version in (
        (ApiKey.DESCRIBE_CONFIGS, "results", 4),
        (ApiKey.INCREMENTAL_ALTER_CONFIGS, "responses", 1),
    ):
        ECHO[api] = lambda b, key=key: {
            key: [
                {"resource_type": r["resource_type"], "resource_name": r["resource_name"]}
                | {"error_code": 0, "configs": []}
                for r in b["resources"]
            ]
        }
        body = {"resources": resources, "validate_only": False, "include_synonyms": False}
        answer, seen = run(sec, session, api, body, version)
        assert [r["resource_name"] for r in seen[0]["resources"]] == ["a"]
        codes = {r["resource_name"]: r["error_code"] for r in answer[key]}
        assert codes == {
            "a": 0,
            "b": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            "1": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        }
        protocol.encode_response(RequestHeader(api, version, 1, "c"), answer)
    ECHO[ApiKey.DELETE_GROUPS] = lambda b: {
        "results": [{"group_id": g, "error_code": 0} for g in b["groups_names"]]
    }
    answer, seen = run(sec, session, ApiKey.DELETE_GROUPS, {"groups_names": ["g", "h"]}, 2)
    assert seen == [{"groups_names": ["g"]}]
    codes = {r["group_id"]: r["error_code"] for r in answer["results"]}
    assert codes == {"g": 0, "h": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    protocol.encode_response(RequestHeader(ApiKey.DELETE_GROUPS, 2, 1, "c"), answer)
    # the changes made are audited (the refusals are audited as denied)
    assert changes == [
        ("alter", "topic:a", "OK"),
        ("alter", "topic:a", "OK"),
        ("delete", "group:g", "OK"),
    ]
