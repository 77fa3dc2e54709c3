"""`--join auto` between real processes over real TLS: a node adds itself, and only itself.

A TLS cluster of nodes 1-3 runs with `--join auto` (peer lists name nodes 1-3 only). Node 4
starts on an empty data directory with its own node certificate, the peer list of the
members and itself, and `--join auto`: with no admin call it is "joining" by its identity,
asks its peers `Nodes.Join`, becomes a member, an observer of the metadata quorum and then
a voter, takes replicas of a topic created afterwards, and never asks again once caught up
(it restarts without asking). An acks=all producer runs throughout and loses nothing.

Over the wire, against the peer listeners: a certificate that does not prove the id asked
for (another node's, a client's) gets PERMISSION_DENIED, a node id out of range or an
oversized address INVALID_ARGUMENT, and the membership does not change. A cluster started
with the default `--join manual` refuses a correctly certified node with
MEMBERSHIP_CHANGE_REFUSED (refusal=joins_disabled): asked over the wire and by a real
node 4 started with `--join auto`, which stays out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from replog import certs
from replog.client import Client
from replog.devcluster import DevCluster, NodeProcess
from replog.errors import (
    InvalidArgumentError,
    MembershipChangeRefusedError,
    PermissionDeniedError,
    ReplogError,
)
from replog.rpc_errors import from_rpc_error
from replog.server.cluster.identity import IDENTITY_FILE
from replog.v1 import nodes_pb2, nodes_pb2_grpc
from tests.integration.test_cluster import PATIENT, SteadyProducer, leader_of, read_all
from tests.integration.test_membership_changes import _quorum
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.slow

JOIN_DEADLINE_S = 120.0  # asking, adding, catching up and promotion on a loaded 2-core box


def _set_peers(cluster: DevCluster, node_id: int, ids: list[int]) -> None:
    """Keep only `ids` in node `node_id`'s peer list (id=address/peer_address entries)."""
    args = cluster.members[node_id].args
    at = args.index("--peers") + 1
    entries = [e for e in args[at].split(",") if int(e.split("=", 1)[0]) in ids]
    args[at] = ",".join(entries)


def _identity(node: NodeProcess) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((node.data_dir / IDENTITY_FILE).read_text())
    return data


def _members(client: Client) -> tuple[list[int], list[int], list[int]]:
    """(members, metadata voters, metadata observers), as a node answers GetMetadata."""
    meta = client.refresh_metadata()
    return sorted(n.id for n in meta.nodes), *_quorum(client)


def _membership_everywhere(cluster: DevCluster, ids: list[int]) -> dict[int, Any]:
    """What each of nodes `ids` says the membership is."""
    seen = {}
    for i in ids:
        with Client(cluster.members[i].address, tls=cluster.client_tls, retry=PATIENT) as c:
            seen[i] = _members(c)
    return seen


def _started(tmp_path: Path, *, join: str) -> DevCluster:
    """Nodes 1-3 of a four-node TLS DevCluster, started with `--join join`; node 4 (its
    certificate issued, its peer list the members and itself) is not started."""
    cluster = DevCluster(
        tmp_path / "cluster", 4, tls=True, extra_args=["--flush", "always", "--join", join]
    )
    cluster.release_ports()
    try:
        for i in (1, 2, 3):
            _set_peers(cluster, i, [1, 2, 3])
            cluster.members[i].start(wait=False)
        for i in (1, 2, 3):
            cluster.members[i].wait_ready()
    except BaseException:
        cluster.kill_all()
        raise
    return cluster


@pytest.fixture(scope="module")
def auto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    cluster = _started(tmp_path_factory.mktemp("auto"), join="auto")
    try:
        yield cluster
    finally:
        cluster.kill_all()  # cleanup (a graceful stop waits out each node's hand-over)


def _three(cluster: DevCluster) -> str:
    return ",".join(cluster.members[i].address for i in (1, 2, 3))


def _ask_join(
    cluster: DevCluster,
    target: int,
    identity: certs.Issued,
    node_id: int,
    address: str,
    peer_address: str = "",
) -> ReplogError | nodes_pb2.JoinResponse:
    """`Nodes.Join` on node `target`'s peer listener, presenting `identity` (mutual TLS);
    the typed error it failed with, or the answer."""
    root = (cluster.tls_dir / "ca.pem").read_bytes()
    creds = grpc.ssl_channel_credentials(
        root, identity.key_file.read_bytes(), identity.cert_file.read_bytes()
    )
    with grpc.secure_channel(cluster.members[target].peer_address, creds) as channel:
        stub: Any = nodes_pb2_grpc.NodesStub(channel)  # type: ignore[no-untyped-call]
        request = nodes_pb2.JoinRequest(node_id=node_id, address=address, peer_address=peer_address)
        try:
            answer: nodes_pb2.JoinResponse = stub.Join(request, timeout=30)
        except grpc.RpcError as exc:
            return from_rpc_error(exc)
    return answer


def _node_cert(cluster: DevCluster, node_id: int) -> certs.Issued:
    """The certificate DevCluster issued node `node_id` (URI SAN replog://node/<id>)."""
    d = cluster.tls_dir
    return certs.Issued(d / f"node{node_id}.pem", d / f"node{node_id}-key.pem")


def _refused_by(node: NodeProcess) -> set[int]:
    """The peers that refused node `node`'s Join as a refused membership change (its log:
    `join.refused` names the peer and the error's reason)."""
    lines = node.log_tail(1_000_000).splitlines()
    refused = [x for x in lines if "join.refused" in x and "MEMBERSHIP_CHANGE_REFUSED" in x]
    return {int(m) for line in refused for m in re.findall(r"\bpeer=(\d+)", line)}


def _running(node: NodeProcess) -> bool:
    """True while node `node` runs; fails at once (with its log) once it has exited, rather
    than at the end of a wait for something a dead node cannot do."""
    assert node.running, f"node {node.node_id} exited:\n{node.log_tail()}"
    return True


def _ca(cluster: DevCluster) -> certs.Issued:
    return certs.Issued(cluster.tls_dir / "ca.pem", cluster.tls_dir / "ca-key.pem")


def test_a_node_started_with_join_auto_becomes_a_voter_without_an_admin_call(
    auto: DevCluster,
) -> None:
    nodes = auto.members
    _set_peers(auto, 4, [1, 2, 3, 4])
    with Client(_three(auto), tls=auto.client_tls, retry=PATIENT) as client:
        client.create_topic("load", 1, 3, format="raw")
        leader_of(client, "load")
        with SteadyProducer(client, "load") as producer:
            producer.wait_acked(200)
            nodes[4].start()  # an empty data directory; no `replog node add`
            assert _identity(nodes[4])["start"] == "joining", _identity(nodes[4])
            wait_until(
                lambda: _running(nodes[4]) and _members(client) == ([1, 2, 3, 4], [1, 2, 3, 4], []),
                "node 4 is a member and a metadata voter",
                JOIN_DEADLINE_S,
            )
            wait_until(
                lambda: _running(nodes[4]) and _identity(nodes[4])["caught_up_at"] is not None,
                "node 4 caught up on the metadata",
                JOIN_DEADLINE_S,
            )
            # join.done: once node 4's own metadata log names it (it polls for that)
            wait_until(
                lambda: _running(nodes[4]) and "event=join.done" in nodes[4].log_tail(1_000_000),
                "node 4 saw itself listed and stopped asking",
                JOIN_DEADLINE_S,
            )
            log4 = nodes[4].log_tail(1_000_000)
            assert "event=join.asked" in log4, log4[-4000:]
            accepted = [nodes[i].log_tail(1_000_000) for i in (1, 2, 3)]
            assert any("join.accepted" in text and "node_id=4" in text for text in accepted)
            audited = [ln for text in accepted for ln in text.splitlines() if "audit.change" in ln]
            assert any(
                "operation=join" in ln and "resource=node:4" in ln and "outcome=OK" in ln
                for ln in audited
            ), audited[-10:]
            producer.wait_acked(len(producer.acked) + 200)
            # Caught up once, node 4 never asks again: restarted, it is a voter at once.
            asks = log4.count("join.asked"), log4.count("join.done")
            assert nodes[4].stop() == 0
            nodes[4].start()
            assert _identity(nodes[4])["caught_up_at"] is not None
            with Client(nodes[4].address, tls=auto.client_tls, retry=PATIENT) as own:
                wait_until(
                    lambda: (
                        _running(nodes[4]) and _members(own) == ([1, 2, 3, 4], [1, 2, 3, 4], [])
                    ),
                    "the restarted node 4 serves the membership from its log",
                    JOIN_DEADLINE_S,
                )
            producer.wait_acked(len(producer.acked) + 200)
            log4 = nodes[4].log_tail(1_000_000)
            assert (log4.count("join.asked"), log4.count("join.done")) == asks
        records = dict(read_all(client, "load"))
        lost = [o for o, v in producer.acked.items() if records.get(o) != v]
        assert not lost, f"{len(lost)} acknowledged records lost or changed"
        # A topic created now places replicas on node 4, and they take writes.
        client.create_topic("after", 8, 3, format="raw")
        meta = client.refresh_metadata(["after"])
        on4 = [p.partition for p in meta.topics[0].partitions if 4 in p.replicas]
        assert on4, "no replica of the new topic is on node 4"
        for p in on4:
            res = client.append("after", p, [b"on node 4"], acks="all")
            assert client.fetch("after", p, res.base_offset).records.values[:1] == [b"on node 4"]


def test_join_refuses_callers_whose_certificate_does_not_prove_the_id(
    auto: DevCluster, tmp_path: Path
) -> None:
    ca = _ca(auto)
    node9 = certs.issue_node(ca, tmp_path, 9)  # the cluster's CA, URI SAN replog://node/9
    mallory = certs.issue_client(ca, tmp_path, "mallory")
    with Client(_three(auto), tls=auto.client_tls, retry=PATIENT) as client:
        before = _members(client)
    assert 5 not in before[0]
    here = "127.0.0.1:1"  # an address of 127.0.0.1, which node 9's IP SAN names too
    # (identity, node id asked for, address, the typed error expected)
    cases: list[tuple[str, certs.Issued, int, str, type[ReplogError], str]] = [
        ("node 9 asks as node 5", node9, 5, here, PermissionDeniedError, "PERMISSION_DENIED"),
        ("a member asks as node 5", _node_cert(auto, 1), 5, here, PermissionDeniedError,
         "PERMISSION_DENIED"),
        ("a client certificate", mallory, 5, here, PermissionDeniedError, "PERMISSION_DENIED"),
        ("node id 0", node9, 0, here, InvalidArgumentError, "INVALID_ARGUMENT"),
        ("node id above the maximum", node9, 2**31, here, InvalidArgumentError,
         "INVALID_ARGUMENT"),
        ("an oversized address", node9, 9, "h" * 400 + ":1", InvalidArgumentError,
         "INVALID_ARGUMENT"),
    ]  # fmt: skip
    for what, identity, node_id, address, error, code in cases:
        for target in (1, 2, 3):
            got = _ask_join(auto, target, identity, node_id, address)
            assert isinstance(got, error), (what, target, got)
            assert got.code == code, (what, target, got.code, got.message)
    assert all(seen == before for seen in _membership_everywhere(auto, [1, 2, 3]).values())
    for i in (1, 2, 3):
        lines = auto.members[i].log_tail(1_000_000).splitlines()
        assert not [x for x in lines if "join.accepted" in x and "node_id=5" in x]
        refusals = [x for x in lines if "audit.change" in x and "resource=node:5" in x]
        assert any("outcome=PERMISSION_DENIED" in x for x in refusals), refusals[-5:]


def test_a_cluster_with_join_manual_refuses_joins(tmp_path: Path) -> None:
    cluster = _started(tmp_path, join="manual")
    nodes = cluster.members
    try:
        # Over the wire: node 4's own certificate proves its id, and still no.
        for target in (1, 2, 3):
            got = _ask_join(
                cluster, target, _node_cert(cluster, 4), 4, nodes[4].address, nodes[4].peer_address
            )
            assert isinstance(got, MembershipChangeRefusedError), (target, got)
            assert (got.code, got.reason, got.refusal) == (
                "FAILED_PRECONDITION",
                "MEMBERSHIP_CHANGE_REFUSED",
                "joins_disabled",
            ), got
        # A real node 4 with `--join auto` asks, is refused by each peer, and stays out. It
        # starts at once, maybe before the founders' first metadata election: peers that
        # report other starting voters (1-3) are no founders of its cluster, so it waits for
        # the quorum in their log and is "joining", never a founder ("bootstrap") of 1-4.
        _set_peers(cluster, 4, [1, 2, 3, 4])
        args = nodes[4].args
        args[args.index("--join") + 1] = "auto"
        nodes[4].start()
        assert _identity(nodes[4])["start"] == "joining"
        wait_until(
            lambda: _running(nodes[4]) and _refused_by(nodes[4]) == {1, 2, 3},
            "node 4 was refused by each of its peers",
            JOIN_DEADLINE_S,
        )
        log4 = nodes[4].log_tail(1_000_000)
        assert "join.asked" not in log4 and "join.done" not in log4
        assert "MEMBERSHIP_CHANGE_REFUSED" in log4
        seen = _membership_everywhere(cluster, [1, 2, 3])
        assert all(s == ([1, 2, 3], [1, 2, 3], []) for s in seen.values()), seen
    finally:
        cluster.kill_all()  # cleanup (a graceful stop waits out each node's hand-over)
