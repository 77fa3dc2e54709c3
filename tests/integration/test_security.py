"""Over real TLS, between real processes: forged replication messages change nothing.

A 3-node cluster runs with TLS (a CA of its own, mutual TLS on each node's peer listener).
Attackers dial the peer listeners directly with every kind of identity (no certificate, a
certificate from another CA, a client certificate of the cluster's CA, a member's
certificate claiming another member's id) and send what the issue's attacks sent: a
VoteRequest for the next epoch, one for epoch 2^64-1, a ReplicaFetchResponse carrying
records to a follower, a ReplicaFetchRequest claiming to be a follower that holds more than
it does. Each is refused, and every node's epoch, leader, log end and high watermark stay
as they were; no node crashes; acknowledged records read back unchanged.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc
import pytest

from replog import certs, frames
from replog.client import Client, ClientTls, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import UnavailableError
from replog.v1 import replication_pb2 as pb
from replog.v1 import replication_pb2_grpc

TOPIC = "guarded"
RECORDS = 20
U64_MAX = 2**64 - 1
SETTLE_S = 1.5  # long enough for an accepted forgery to show (elections, appends, HW)
PATIENT = RetryPolicy(attempts_max=100, deadline_ms=60_000)


@dataclass(frozen=True)
class Replica:
    epoch: int
    role: str
    log_end_offset: int
    high_watermark: int


def scrape(address: str) -> list[tuple[str, dict[str, str], float]]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
        text = str(reply.read().decode())
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        pairs = [p.split("=", 1) for p in rest.rstrip("}").split(",") if "=" in p]
        samples.append((name, {k: v.strip('"') for k, v in pairs}, float(value)))
    return samples


def replica_of(cluster: DevCluster, node: int) -> Replica:
    """Node `node`'s replica of TOPIC/0, from its metrics."""
    values: dict[str, float] = {}
    role = "?"
    for name, labels, value in scrape(cluster.members[node].metrics_address):
        if labels.get("topic") != TOPIC or labels.get("partition") != "0":
            continue
        if name == "replog_replica_role" and value == 1:
            role = labels["role"]
        else:
            values[name] = value
    return Replica(
        int(values["replog_replica_epoch"]),
        role,
        int(values["replog_log_end_offset"]),
        int(values["replog_high_watermark"]),
    )


def snapshot(cluster: DevCluster) -> dict[int, Replica]:
    return {i: replica_of(cluster, i) for i in cluster.members}


@dataclass
class Setup:
    cluster: DevCluster
    values: list[bytes]
    leader: int
    follower: int
    third: int  # neither the leader nor the follower under attack
    ids: dict[str, certs.Issued]  # identities attackers use
    ca: certs.Issued


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    work = tmp_path_factory.mktemp("secure")
    # No leadership moves of its own during the attacks: no leader balancing, and an
    # election timeout that a loaded 2-core machine does not trip by accident.
    quiet = [
        "--flush", "interval",
        "--leader-balance-interval-ms", "0",
        "--election-timeout-ms", "3000",
    ]  # fmt: skip
    cluster = DevCluster(work / "cluster", 3, tls=True, extra_args=quiet)
    cluster.start()
    try:
        ca = certs.Issued(cluster.tls_dir / "ca.pem", cluster.tls_dir / "ca-key.pem")
        other_ca = certs.create_ca(work / "other", "another CA")
        ids = {
            "mallory": certs.issue_client(ca, work / "ids", "mallory"),
            "outsider-node": certs.issue_node(ca, work / "ids", 9),
            **{
                f"other-ca-node{i}": certs.issue_node(other_ca, work / f"other{i}", i)
                for i in (1, 2, 3)
            },
        }
        values = [b"acked-%03d" % i for i in range(RECORDS)]
        with Client(cluster.bootstrap, tls=cluster.client_tls, retry=PATIENT) as client:
            client.create_topic(TOPIC, 1, replication_factor=3)
            client.append(TOPIC, 0, values, acks="all")
        state = wait_settled(cluster)
        leader = next(i for i, r in state.items() if r.role == "leader")
        follower, third = sorted(i for i in state if i != leader)
        yield Setup(cluster, values, leader, follower, third, ids, ca)
    finally:
        cluster.kill_all()


def wait_settled(cluster: DevCluster) -> dict[int, Replica]:
    """Every replica caught up with one leader (same epoch, LEO and HW everywhere)."""
    deadline = time.monotonic() + 30
    while True:
        state = snapshot(cluster)
        roles = sorted(r.role for r in state.values())
        if (
            roles == ["follower", "follower", "leader"]
            and len({(r.epoch, r.log_end_offset, r.high_watermark) for r in state.values()}) == 1
        ):
            return state
        assert time.monotonic() < deadline, f"the cluster did not settle: {state}"
        time.sleep(0.1)


def credentials(setup: Setup, identity: str | None) -> grpc.ChannelCredentials:
    """Channel credentials that trust the cluster's CA and present `identity` (a node's
    own certificate when it names `nodeN`, none when None)."""
    root = setup.ca.cert_file.read_bytes()
    if identity is None:
        return grpc.ssl_channel_credentials(root)
    if identity.startswith("node"):
        d = setup.cluster.tls_dir
        issued = certs.Issued(d / f"{identity}.pem", d / f"{identity}-key.pem")
    else:
        issued = setup.ids[identity]
    return grpc.ssl_channel_credentials(
        root, issued.key_file.read_bytes(), issued.cert_file.read_bytes()
    )


def send(setup: Setup, target: int, identity: str | None, envelopes: list[pb.Envelope]) -> str:
    """Send `envelopes` (each a few times) on an Exchange stream to `target`'s peer
    listener; the status code name the stream ended with ("OK": it was taken)."""
    address = setup.cluster.members[target].peer_address
    with grpc.secure_channel(address, credentials(setup, identity)) as channel:
        stub = replication_pb2_grpc.ReplicationStub(channel)
        try:
            stub.Exchange(iter(envelopes * 5), timeout=5)
        except grpc.RpcError as exc:
            return str(exc.code().name)
    return "OK"


# -- the forged messages ------------------------------------------------------------------


def vote_next_epoch(s: Setup, state: dict[int, Replica], sender: int) -> pb.Envelope:
    r = state[s.leader]
    return pb.Envelope(
        topic=TOPIC,
        partition=0,
        from_id=sender,
        vote_request=pb.VoteRequest(
            epoch=r.epoch + 1,
            candidate_id=sender,
            last_epoch=r.epoch,
            log_end_offset=r.log_end_offset + 1000,
        ),
    )


def vote_max_epoch(s: Setup, state: dict[int, Replica], sender: int) -> pb.Envelope:
    env = vote_next_epoch(s, state, sender)
    env.vote_request.epoch = U64_MAX
    return env


def records_to_follower(s: Setup, state: dict[int, Replica], sender: int) -> pb.Envelope:
    r = state[s.follower]
    env = pb.Envelope(topic=TOPIC, partition=0, from_id=sender)
    f = env.fetch_response
    f.epoch, f.leader_id, f.fetch_offset, f.last_fetched_epoch = (
        r.epoch,
        sender,
        r.log_end_offset,
        r.epoch,
    )
    rec = f.records
    rec.start_offset, rec.end_offset = r.log_end_offset, r.log_end_offset + 50
    rec.high_watermark = r.log_end_offset + 50
    rec.frames = frames.encode(r.log_end_offset, [b"forged-%d" % i for i in range(50)])
    return env


def fetch_claiming_follower(s: Setup, state: dict[int, Replica], sender: int) -> pb.Envelope:
    r = state[s.leader]
    return pb.Envelope(
        topic=TOPIC,
        partition=0,
        from_id=sender,
        fetch_request=pb.ReplicaFetchRequest(
            epoch=r.epoch,
            replica_id=sender,
            fetch_offset=r.log_end_offset + 100,
            last_fetched_epoch=r.epoch,
        ),
    )


Forge = Callable[[Setup, dict[int, Replica], int], pb.Envelope]
# (name, message, who receives it, whom the message claims to come from)
ATTACKS: list[tuple[str, Forge, str, str]] = [
    ("vote for the next epoch", vote_next_epoch, "each", "third"),
    ("vote for epoch 2^64-1", vote_max_epoch, "each", "third"),
    ("records to a follower", records_to_follower, "follower", "leader"),
    ("a fetch claiming to be a follower", fetch_claiming_follower, "leader", "follower"),
]
# (identity, the status every attack gets)
IDENTITIES: list[tuple[str | None, tuple[str, ...]]] = [
    (None, ("UNAVAILABLE",)),  # no client certificate: the TLS handshake fails
    ("other-ca", ("UNAVAILABLE",)),  # a node certificate signed by another CA
    ("mallory", ("PERMISSION_DENIED",)),  # a client certificate of the cluster's CA
    ("outsider-node", ("PERMISSION_DENIED",)),  # the certificate of node 9, not a member
    ("member-as-other", ("PERMISSION_DENIED",)),  # a member's certificate, another id
]


def role_node(s: Setup, role: str) -> int:
    return {"leader": s.leader, "follower": s.follower, "third": s.third}[role]


@pytest.mark.parametrize(("identity", "expected"), IDENTITIES, ids=lambda x: str(x))
@pytest.mark.parametrize(("attack", "forge", "target", "claimed"), ATTACKS, ids=lambda x: str(x))
def test_a_forged_replication_message_is_refused_and_changes_nothing(
    setup: Setup,
    identity: str | None,
    expected: tuple[str, ...],
    attack: str,
    forge: Forge,
    target: str,
    claimed: str,
) -> None:
    before = wait_settled(setup.cluster)
    sender = role_node(setup, claimed)
    envelope = forge(setup, before, sender)
    targets = list(setup.cluster.members) if target == "each" else [role_node(setup, target)]
    for node in targets:
        who = identity
        if identity == "other-ca":
            who = f"other-ca-node{sender}"
        elif identity == "member-as-other":
            # a member's own certificate, but not the member the envelope claims to be
            who = f"node{next(i for i in setup.cluster.members if i not in (sender, node))}"
        status = send(setup, node, who, [envelope])
        assert status in expected, f"{attack} from {who} to node {node}: {status}"
    time.sleep(SETTLE_S)
    after = snapshot(setup.cluster)
    assert after == before, f"{attack} changed the cluster"
    assert all(m.running for m in setup.cluster.members.values())
    assert read_back(setup) == setup.values


def test_a_member_sending_an_epoch_near_2_64_is_dropped_without_a_crash(setup: Setup) -> None:
    """Even a member's authenticated stream cannot push an impossible epoch: the envelope is
    dropped (and logged), the stream stays up, nothing changes, the owner task lives."""
    before = wait_settled(setup.cluster)
    for epoch in (U64_MAX, 2**63, 2**31):
        envelope = vote_max_epoch(setup, before, setup.third)
        envelope.vote_request.epoch = epoch
        for node in (setup.leader, setup.follower):
            assert send(setup, node, f"node{setup.third}", [envelope]) == "OK"
    time.sleep(SETTLE_S)
    assert snapshot(setup.cluster) == before
    assert all(m.running for m in setup.cluster.members.values())
    logged = setup.cluster.members[setup.leader].log_file.read_text(errors="replace")
    assert "replication.dropped" in logged
    # ... and the partition still takes acks=all appends.
    with Client(setup.cluster.bootstrap, tls=setup.cluster.client_tls, retry=PATIENT) as c:
        c.append(TOPIC, 0, [b"after"], acks="all")
    setup.values.append(b"after")
    assert read_back(setup) == setup.values


def test_the_client_listener_does_not_serve_replication(setup: Setup) -> None:
    node = setup.cluster.members[setup.leader]
    before = wait_settled(setup.cluster)
    envelope = vote_next_epoch(setup, before, setup.third)
    with grpc.secure_channel(node.address, credentials(setup, f"node{setup.third}")) as channel:
        stub = replication_pb2_grpc.ReplicationStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.Exchange(iter([envelope]), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert snapshot(setup.cluster) == before


def test_leader_news_is_taken_from_members_only(setup: Setup) -> None:
    """ShareLeaders (the leader directory's news) on the peer listener: a client's or a
    non-member node's certificate is refused; a member's is answered."""
    address = setup.cluster.members[setup.follower].peer_address
    forged = pb.LeaderNews(
        entries=[pb.LeaderEntry(topic=TOPIC, partition=0, epoch=2**30, leader_id=setup.third)],
        incarnation=12345,
    )
    for identity in ("mallory", "outsider-node"):
        with grpc.secure_channel(address, credentials(setup, identity)) as channel:
            stub = replication_pb2_grpc.ReplicationStub(channel)
            with pytest.raises(grpc.RpcError) as err:
                stub.ShareLeaders(forged, timeout=5)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, identity
    with grpc.secure_channel(address, credentials(setup, f"node{setup.third}")) as channel:
        stub = replication_pb2_grpc.ReplicationStub(channel)
        ack = stub.ShareLeaders(pb.LeaderNews(incarnation=12345), timeout=5)
    assert ack.incarnation != 0  # the receiver's own


def test_a_plaintext_client_cannot_talk_to_a_tls_node(setup: Setup) -> None:
    address = setup.cluster.members[1].address
    with (
        Client(address, timeout_s=3, retry=RetryPolicy(attempts_max=1)) as c,
        pytest.raises(UnavailableError),
    ):
        c.list_topics()


def read_back(setup: Setup) -> list[bytes]:
    with Client(setup.cluster.bootstrap, tls=setup.cluster.client_tls, retry=PATIENT) as c:
        got: list[bytes] = []
        offset = 0
        while True:
            res = c.fetch(TOPIC, 0, offset)
            got += [r.value for r in res.records.records()]
            if res.next_offset >= res.high_watermark:
                return got
            offset = res.next_offset


# -- rotation -----------------------------------------------------------------------------


def served_certificate(address: str) -> bytes:
    """The certificate a new TLS connection to `address` is shown (DER)."""
    import socket
    import ssl

    host, _, port = address.rpartition(":")
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_certificates_rotate_under_a_running_producer(setup: Setup) -> None:
    """Every node gets a new certificate and key on disk while a producer appends with
    acks=all: no append fails, new connections see the new certificates at once (no
    restart), and the replicas keep replicating over mutual TLS."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    cluster = setup.cluster
    stop = threading.Event()
    acked: list[bytes] = []
    errors: list[BaseException] = []

    def produce() -> None:
        with Client(cluster.bootstrap, tls=cluster.client_tls, retry=PATIENT) as c:
            i = 0
            while not stop.is_set():
                value = b"rotating-%05d" % i
                try:
                    c.append(TOPIC, 0, [value], acks="all")
                except BaseException as exc:  # recorded for the assertion below
                    errors.append(exc)
                    return
                acked.append(value)
                i += 1
                time.sleep(0.01)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        time.sleep(0.5)
        old = {i: served_certificate(m.address) for i, m in cluster.members.items()}
        for i in cluster.members:
            certs.issue_node(setup.ca, cluster.tls_dir, i, (cluster.host, "localhost"))
        new = {
            i: x509.load_pem_x509_certificate(
                (cluster.tls_dir / f"node{i}.pem").read_bytes()
            ).public_bytes(Encoding.DER)
            for i in cluster.members
        }
        deadline = time.monotonic() + 10
        for i, m in cluster.members.items():
            while served_certificate(m.address) != new[i]:
                assert time.monotonic() < deadline, f"node {i} still serves its old certificate"
                time.sleep(0.1)
            assert new[i] != old[i]
        # The peer listeners too (they require a client certificate: a member's new one).
        for i in cluster.members:
            assert (
                send(setup, i, f"node{setup.third if i != setup.third else setup.leader}", [])
                == "OK"
            )
        time.sleep(1.0)
    finally:
        stop.set()
        producer.join(30)
    assert not errors, errors
    assert len(acked) > 20
    setup.values.extend(acked)
    wait_settled(cluster)
    assert read_back(setup) == setup.values
    for m in cluster.members.values():
        assert "tls.reloaded" in m.log_file.read_text(errors="replace")


def test_control_the_same_vote_from_the_member_it_names_is_taken(setup: Setup) -> None:
    """The harness sees a change when a message is accepted: the vote for the next epoch,
    sent by the member it names, with that member's certificate, moves the epoch."""
    before = wait_settled(setup.cluster)
    envelope = vote_next_epoch(setup, before, setup.third)
    for node in (setup.leader, setup.follower):
        assert send(setup, node, f"node{setup.third}", [envelope]) == "OK"
    deadline = time.monotonic() + 10
    while snapshot(setup.cluster)[setup.leader].epoch == before[setup.leader].epoch:
        assert time.monotonic() < deadline, "an authenticated vote was not taken"
        time.sleep(0.1)


def test_a_tls_node_answers_plaintext_health_probes_on_its_health_listener(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """What the kubelet's gRPC probe sees: plaintext grpc.health.v1 on --health-listen,
    while the client listener itself speaks only TLS."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from replog.devcluster import free_port
    from tests.integration.servers import ServerProcess

    work = tmp_path_factory.mktemp("health")
    ca = certs.create_ca(work / "tls")
    node = certs.issue_node(ca, work / "tls", 0)
    health_address = f"127.0.0.1:{free_port()}"
    server = ServerProcess(
        work / "data",
        work,
        [
            "--tls-cert-file", str(node.cert_file),
            "--tls-key-file", str(node.key_file),
            "--tls-ca-file", str(ca.cert_file),
            "--health-listen", health_address,
        ],
    ).start()  # fmt: skip
    try:
        with grpc.insecure_channel(health_address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for service in ("", "replog.v1.Log"):
                reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
        with grpc.insecure_channel(server.address) as channel, pytest.raises(grpc.RpcError):
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=3)
        with Client(server.address, tls=ClientTls(ca.cert_file)) as client:
            client.create_topic("over-tls", 1)
            assert client.append("over-tls", 0, [b"x"]).last_offset >= 0
    finally:
        server.kill()
