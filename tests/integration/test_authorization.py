"""Authentication and ACLs over real TLS, between real processes.

A 3-node TLS cluster runs with `--authorization acl`, a token file (hashes only) and the
super user `User:admin`. Each RPC is tried by `User:alice` without an ACL (PERMISSION_DENIED),
with the ACL it needs (allowed), and after the ACL is removed (denied again); anonymous
callers and wrong tokens are UNAUTHENTICATED; a client certificate names its principal.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from replog import certs
from replog.client import Client, ClientTls, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import PermissionDeniedError, ReplogError, UnauthenticatedError
from replog.server.edge.auth import hash_token

TOKENS = {
    "User:admin": "admin-secret-token",
    "User:alice": "alice-secret-token",
    "User:mallory": "mallory-secret-token",
    "User:carol": "carol-secret-token",  # never granted a write
}
ONCE = RetryPolicy(attempts_max=1)
PATIENT = RetryPolicy(attempts_max=100, deadline_ms=60_000)
_names = itertools.count()


@dataclass
class Secured:
    cluster: DevCluster
    ca: ClientTls

    def client(self, principal: str | None, retry: RetryPolicy = ONCE) -> Client:
        token = TOKENS.get(principal) if principal else None
        return Client(self.cluster.bootstrap, tls=self.ca, token=token, retry=retry)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    work = tmp_path_factory.mktemp("authz")
    token_file = work / "tokens"
    token_file.write_text(
        "# principal sha256:<hex>\n" + "".join(f"{p} {hash_token(t)}\n" for p, t in TOKENS.items())
    )
    cluster = DevCluster(
        work / "cluster",
        3,
        tls=True,
        extra_args=[
            "--flush", "interval",
            "--authorization", "acl",
            "--token-file", str(token_file),
            "--super-users", "User:admin",
        ],
    )  # fmt: skip
    cluster.start()
    try:
        assert cluster.client_tls is not None
        yield Secured(cluster, ClientTls(cluster.client_tls.ca_file))
    finally:
        cluster.kill_all()


def new_topic(s: Secured) -> str:
    name = f"t{next(_names)}"
    with s.client("User:admin", PATIENT) as admin:
        admin.create_topic(name, 1, replication_factor=3)
        admin.append(name, 0, [b"x"], acks="all")
    return name


def test_a_caller_without_credentials_is_unauthenticated(secured: Secured) -> None:
    with secured.client(None) as anonymous, pytest.raises(UnauthenticatedError):
        anonymous.list_topics()


def test_a_wrong_token_is_unauthenticated(secured: Secured) -> None:
    with (
        Client(secured.cluster.bootstrap, tls=secured.ca, token="guess", retry=ONCE) as c,
        pytest.raises(UnauthenticatedError, match="not valid"),
    ):
        c.refresh_metadata()


def test_any_authenticated_caller_may_read_the_metadata(secured: Secured) -> None:
    with secured.client("User:alice") as alice:
        assert alice.refresh_metadata().nodes


# (RPC, what it needs, the call) -- `topic` is a fresh topic with one record
Call = Callable[[Client, str], Any]
RPCS: list[tuple[str, str, bool, Call]] = [
    ("Append", "write", False, lambda c, t: c.append(t, 0, [b"v"], acks="all")),
    ("Fetch", "read", False, lambda c, t: c.fetch(t, 0, 0)),
    ("StreamFrom", "read", False, lambda c, t: next(iter(c.consumer(t, 0, 0).batches()))),
    ("DescribeTopic", "describe", False, lambda c, t: c.describe_topic(t)),
    ("ListOffsets", "describe", False, lambda c, t: c.list_offsets(t)),
    ("DeleteTopic", "delete", False, lambda c, t: c.delete_topic(t)),
    ("CreateTopic", "create", False, lambda c, t: c.create_topic(t + "-new", 1)),
    ("ListTopics", "describe", True, lambda c, t: c.list_topics()),
    ("ListAcls", "describe", True, lambda c, t: c.list_acls()),
    (
        "AddAcl",
        "alter",
        True,
        lambda c, t: c.add_acl("User:carol", "read", topic=t),
    ),
]


def eventually_allowed(call: Callable[[], Any]) -> Any:
    """ACLs apply on every node from the replicated metadata: a few ms after the leader."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return call()
        except PermissionDeniedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def eventually_denied(call: Callable[[], Any]) -> PermissionDeniedError:
    deadline = time.monotonic() + 10
    while True:
        try:
            call()
        except PermissionDeniedError as err:
            return err
        assert time.monotonic() < deadline, "still allowed after the ACL was removed"
        time.sleep(0.05)


@pytest.mark.parametrize(("rpc", "operation", "on_cluster", "call"), RPCS, ids=[r[0] for r in RPCS])
def test_each_rpc_is_denied_without_its_acl_and_allowed_with_it(
    secured: Secured, rpc: str, operation: str, on_cluster: bool, call: Call
) -> None:
    topic = new_topic(secured)
    acl: dict[str, Any] = {"cluster": True} if on_cluster else {"topic": topic}
    if rpc == "CreateTopic":
        acl = {"topic": topic + "-new"}
    with (
        secured.client("User:alice", PATIENT) as alice,
        secured.client("User:admin", PATIENT) as admin,
    ):
        with pytest.raises(PermissionDeniedError) as denied:
            call(alice, topic)
        assert operation in denied.value.message and "User:alice" in denied.value.message
        admin.add_acl("User:alice", operation, **acl)
        eventually_allowed(lambda: call(alice, topic))
        if rpc in ("DeleteTopic", "CreateTopic"):
            return  # done once; the topic is gone (or made)
        admin.remove_acl("User:alice", operation, **acl)
        eventually_denied(lambda: call(alice, topic))


def test_a_prefix_acl_covers_the_topics_it_prefixes_and_no_other(secured: Secured) -> None:
    with (
        secured.client("User:admin", PATIENT) as admin,
        secured.client("User:alice", PATIENT) as alice,
    ):
        for name in ("orders.eu", "orders.us", "payments"):
            admin.create_topic(name, 1, replication_factor=3)
        admin.add_acl("User:alice", "write", topic="orders.", prefix=True)
        eventually_allowed(lambda: alice.append("orders.eu", 0, [b"a"]))
        alice.append("orders.us", 0, [b"a"])
        with pytest.raises(PermissionDeniedError):
            alice.append("payments", 0, [b"a"])
        with pytest.raises(PermissionDeniedError):
            alice.fetch("orders.eu", 0, 0)  # write does not grant read


def test_whoami_names_the_callers_principal_in_the_client_and_the_cli(secured: Secured) -> None:
    with secured.client("User:alice") as alice, secured.client("User:admin") as admin:
        assert alice.whoami() == {
            "principal": "User:alice",
            "authenticated_by": "token",
            "authorization": "acl",
            "super_user": False,
        }
        assert admin.whoami()["super_user"] is True
    with (
        Client(secured.cluster.bootstrap, tls=secured.ca, token="guess", retry=ONCE) as c,
        pytest.raises(UnauthenticatedError),
    ):
        c.whoami()
    cmd = [
        sys.executable, "-m", "replog", "whoami",
        "--address", secured.cluster.bootstrap, "--tls-ca", str(secured.ca.ca_file),
    ]  # fmt: skip
    text = subprocess.run(
        [*cmd, "--token", TOKENS["User:carol"]], capture_output=True, text=True, timeout=60
    )
    assert text.returncode == 0 and text.stdout == "User:carol, authenticated by token\n"
    doc = subprocess.run(
        [*cmd, "--token", TOKENS["User:admin"], "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(doc.stdout)["principal"] == "User:admin", doc.stderr
    anonymous = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert anonymous.returncode == 1 and "UNAUTHENTICATED" in anonymous.stderr


def test_a_client_certificate_names_its_principal(secured: Secured, tmp_path: Any) -> None:
    """A client certificate (replog://client/alice) is User:alice when no token is sent.
    The client listener here does not require certificates, so it never asks for one:
    the certificate path is covered by a node with --tls-client-auth require below."""
    cluster = secured.cluster
    ca = certs.Issued(cluster.tls_dir / "ca.pem", cluster.tls_dir / "ca-key.pem")
    bob = certs.issue_client(ca, tmp_path, "bob")
    tls = ClientTls(ca.cert_file, bob.cert_file, bob.key_file)
    with (
        Client(cluster.bootstrap, tls=tls, retry=ONCE) as c,
        pytest.raises(UnauthenticatedError),
    ):
        c.list_topics()


def test_the_cli_adds_lists_and_removes_acls_with_a_token(secured: Secured) -> None:
    t = secured.ca

    def replog(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [
            sys.executable, "-m", "replog", *args,
            "--address", secured.cluster.bootstrap, "--tls-ca", str(t.ca_file),
            "--token", TOKENS["User:admin"],
        ]  # fmt: skip
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)

    added = replog("acl", "add", "--principal", "User:dave", "--operation", "read", "--cluster")
    assert added.returncode == 0, added.stderr
    listed = replog("acl", "list")
    assert "User:dave\tread\tcluster" in listed.stdout
    removed = replog(
        "acl", "remove", "--principal", "User:dave", "--operation", "read", "--cluster"
    )
    assert removed.returncode == 0, removed.stderr
    assert "User:dave" not in replog("acl", "list").stdout
    with pytest.raises(ReplogError), secured.client("User:alice") as alice:
        alice.remove_acl("User:dave", "read", cluster=True)


def test_a_required_client_certificate_authenticates_its_principal(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from tests.integration.servers import ServerProcess

    work = tmp_path_factory.mktemp("mtls")
    ca = certs.create_ca(work / "tls")
    node = certs.issue_node(ca, work / "tls", 0)
    erin = certs.issue_client(ca, work / "tls", "erin")
    admin = certs.issue_client(ca, work / "tls", "admin")
    server = ServerProcess(
        work / "data",
        work,
        [
            "--tls-cert-file", str(node.cert_file),
            "--tls-key-file", str(node.key_file),
            "--tls-ca-file", str(ca.cert_file),
            "--tls-client-auth", "require",
            "--authorization", "acl",
            "--super-users", "User:admin",
        ],
    ).start()  # fmt: skip
    try:
        as_admin = ClientTls(ca.cert_file, admin.cert_file, admin.key_file)
        as_erin = ClientTls(ca.cert_file, erin.cert_file, erin.key_file)
        with Client(server.address, tls=as_admin, retry=PATIENT) as c:
            c.create_topic("secured", 1)
        with (
            Client(server.address, tls=as_erin, retry=ONCE) as c,
            pytest.raises(PermissionDeniedError, match=r"User:erin may not (idempotent_)?write"),
        ):
            c.append("secured", 0, [b"x"])
        with Client(server.address, tls=as_admin, retry=PATIENT) as c:
            c.add_acl("User:erin", "write", topic="secured")
        with Client(server.address, tls=as_erin, retry=ONCE) as c:
            assert c.append("secured", 0, [b"x"]).last_offset >= 1
            assert c.whoami()["principal"] == "User:erin"
            assert c.whoami()["authenticated_by"] == "certificate"
        with (
            Client(server.address, tls=ClientTls(ca.cert_file), retry=ONCE) as c,
            pytest.raises(ReplogError),  # no certificate: the handshake fails (UNAVAILABLE)
        ):
            c.list_topics()
    finally:
        server.kill()


def test_a_consumer_group_member_needs_read_on_its_group_and_its_topic(secured: Secured) -> None:
    topic = new_topic(secured)
    group = f"g{next(_names)}"
    with (
        secured.client("User:alice", PATIENT) as alice,
        secured.client("User:admin", PATIENT) as admin,
    ):
        denied = eventually_denied(lambda: alice.committed_offsets(group))
        assert f"group '{group}'" in denied.message
        admin.add_acl("User:alice", "describe", group=group)
        admin.add_acl("User:alice", "read", group=group)
        admin.add_acl("User:alice", "read", topic=topic)

        def consume() -> list[bytes]:
            with alice.consumer(topic, group=group, session_timeout_ms=2000) as consumer:
                got: list[bytes] = []
                deadline = time.monotonic() + 60
                while not got and time.monotonic() < deadline:
                    got += [r.value for r in consumer.poll(0.2)]
                consumer.commit()
                return got

        assert eventually_allowed(consume) == [b"x"]
        assert eventually_allowed(lambda: alice.committed_offsets(group))[0].offset >= 1
        for call in (lambda: alice.delete_group(group), alice.list_groups):
            with pytest.raises(PermissionDeniedError):
                call()  # delete on the group / describe on the cluster: not granted
        admin.remove_acl("User:alice", "read", group=group)
        eventually_denied(lambda: alice.committed_offsets(group))
        admin.add_acl("User:alice", "delete", group=group)
        eventually_allowed(lambda: alice.delete_group(group))
        acls = admin.list_acls()
        assert {"principal": "User:alice", "resource_type": "group", "resource_name": group,
                "prefix": False, "operation": "delete"} in acls  # fmt: skip


# -- the gaps of issue 28 -------------------------------------------------------------------


def test_a_commit_or_join_naming_an_unreadable_topic_is_denied_and_nothing_is_stored(
    secured: Secured,
) -> None:
    readable, secret = new_topic(secured), new_topic(secured)
    group = f"g-{readable}"
    with (
        secured.client("User:admin", PATIENT) as admin,
        secured.client("User:alice", PATIENT) as alice,
    ):
        admin.add_acl("User:alice", "read", group=group)
        admin.add_acl("User:alice", "read", topic=readable)
        eventually_allowed(lambda: alice.groups.commit(group, {(readable, 0): 1}))
        with pytest.raises(PermissionDeniedError, match=secret):
            alice.groups.commit(group, {(secret, 0): 1})
        with pytest.raises(PermissionDeniedError, match=secret):
            alice.groups.commit(group, {(readable, 0): 1, (secret, 0): 1})
        stored = {(o.topic, o.offset) for o in admin.groups.committed(group)}
        assert stored == {(readable, 1)}, "nothing of the denied commits was stored"
        # Offsets of a topic alice cannot read are left out of what she is shown.
        admin.groups.commit(group, {(secret, 0): 7})
        assert {o.topic for o in admin.groups.committed(group)} == {readable, secret}
        assert {o.topic for o in alice.groups.committed(group)} == {readable}
        with pytest.raises(PermissionDeniedError, match=secret):
            alice.groups.committed(group, [(secret, 0)])
        # A join naming an unreadable topic is refused: no member, no assignment.
        with pytest.raises(PermissionDeniedError, match=secret):
            alice.groups.join(group, [readable, secret])
        assert not admin.groups.describe(group).members
        first, _session = alice.groups.join(group, [readable])
        alice.groups.leave(group, first.member_id)


def test_another_users_producer_name_is_denied_and_the_owner_is_not_fenced(
    secured: Secured,
) -> None:
    topic = new_topic(secured)
    name = f"writer-{topic}"
    with secured.client("User:admin", PATIENT) as admin:
        for user in ("User:alice", "User:mallory"):
            admin.add_acl(user, "write", topic=topic)
        admin.add_acl("User:alice", "write", producer=name)

    def named(principal: str) -> Client:
        return Client(
            secured.cluster.bootstrap,
            tls=secured.ca,
            token=TOKENS[principal],
            retry=PATIENT,
            producer_name=name,
        )

    with named("User:alice") as owner, named("User:mallory") as thief:
        eventually_allowed(lambda: owner.append(topic, 0, [b"mine-1"], acks="all"))
        with pytest.raises(PermissionDeniedError, match="producer"):
            thief.append(topic, 0, [b"stolen"], acks="all")
        owner.append(topic, 0, [b"mine-2"], acks="all")  # not PRODUCER_FENCED
    with secured.client("User:admin", PATIENT) as admin:
        values = admin.fetch(topic, 0, 0).records.values
    assert b"stolen" not in values and values[-2:] == [b"mine-1", b"mine-2"]


def test_an_anonymous_idempotent_producer_needs_write_on_some_topic_or_a_grant(
    secured: Secured,
) -> None:
    with (
        secured.client("User:admin", PATIENT) as admin,
        secured.client("User:carol", PATIENT) as carol,
    ):
        with pytest.raises(PermissionDeniedError, match="idempotent_write"):
            carol.producer_identity()  # InitProducer without a name
        admin.add_acl("User:carol", "idempotent_write", cluster=True)
        assert eventually_allowed(carol.producer_identity).producer_epoch == 0


def test_metadata_lists_only_the_topics_the_caller_may_describe(secured: Secured) -> None:
    visible, hidden = new_topic(secured), new_topic(secured)
    with (
        secured.client("User:admin", PATIENT) as admin,
        secured.client("User:alice", PATIENT) as alice,
    ):
        admin.add_acl("User:alice", "write", topic=visible)
        eventually_allowed(lambda: alice.describe_topic(visible))
        names = {t.name for t in alice.refresh_metadata().topics}
        assert visible in names and hidden not in names
        assert hidden not in {t.name for t in alice.refresh_metadata([hidden]).topics}
        with pytest.raises(PermissionDeniedError):
            alice.describe_topic(hidden)
        assert {visible, hidden} <= {t.name for t in admin.refresh_metadata().topics}


def test_identify_answers_members_and_nodes_proving_their_id_only(
    secured: Secured, tmp_path: Any
) -> None:
    import grpc

    from replog.v1 import nodes_pb2, nodes_pb2_grpc

    cluster = secured.cluster
    ca = certs.Issued(cluster.tls_dir / "ca.pem", cluster.tls_dir / "ca-key.pem")
    member = certs.Issued(cluster.tls_dir / "node1.pem", cluster.tls_dir / "node1-key.pem")
    mallory = certs.issue_client(ca, tmp_path, "mallory")
    joining = certs.issue_node(ca, tmp_path / "n9", 9)

    def identify(who: certs.Issued, asking_as: int) -> str:
        creds = grpc.ssl_channel_credentials(
            ca.cert_file.read_bytes(), who.key_file.read_bytes(), who.cert_file.read_bytes()
        )
        with grpc.secure_channel(cluster.members[2].peer_address, creds) as channel:
            try:
                stub = nodes_pb2_grpc.NodesStub(channel)
                stub.Identify(nodes_pb2.IdentifyRequest(node_id=asking_as), timeout=10)
            except grpc.RpcError as err:
                return str(err.code().name)
        return "OK"

    assert identify(member, 1) == "OK"
    assert identify(joining, 9) == "OK"  # a node that joins: its certificate proves id 9
    assert identify(joining, 3) == "PERMISSION_DENIED"  # ... but not id 3
    assert identify(mallory, 0) == "PERMISSION_DENIED"  # a client certificate
    assert identify(mallory, 9) == "PERMISSION_DENIED"


def test_refusals_and_changes_are_in_the_audit_log(secured: Secured) -> None:
    topic = new_topic(secured)
    with secured.client("User:alice") as alice, pytest.raises(PermissionDeniedError):
        alice.delete_topic(topic)
    with (
        Client(secured.cluster.bootstrap, tls=secured.ca, token="guess", retry=ONCE) as c,
        pytest.raises(UnauthenticatedError),
    ):
        c.list_topics()
    with secured.client("User:admin", PATIENT) as admin:
        admin.add_acl("User:alice", "describe", topic=topic)
        admin.delete_topic(topic)

    def audit_lines() -> list[str]:
        nodes = secured.cluster.members.values()
        return [
            line
            for node in nodes
            for line in node.log_tail(10**8).splitlines()
            if "replog.audit" in line
        ]

    expected = [
        ("audit.denied", "principal=User:alice", "operation=delete", f"resource=topic:{topic}"),
        ("audit.unauthenticated", "outcome=UNAUTHENTICATED"),
        ("audit.change", "principal=User:admin", "operation=add_acl", f"topic:{topic}"),
        ("audit.change", "operation=delete", f"resource=topic:{topic}", "outcome=OK"),
    ]
    deadline = time.monotonic() + 30  # (log lines reach the files as they are written)
    while True:
        lines = audit_lines()
        missing = [e for e in expected if not any(all(p in ln for p in e) for ln in lines)]
        if not missing:
            break
        assert time.monotonic() < deadline, f"not in the audit log: {missing}\n{lines[-20:]}"
        time.sleep(0.1)
    assert not any("secret-token" in ln or "guess" in ln for ln in lines)  # no token logged
