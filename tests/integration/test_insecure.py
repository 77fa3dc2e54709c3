"""No plaintext cluster by accident (issue 28), between real processes.

A node that listens beyond loopback refuses to start in plaintext, with one line naming
`--insecure`. A plaintext cluster started `--insecure` on purpose warns and exports
`replog_insecure 1`, and its client ports serve no peer call: the attacks of the issue
(a forged vote, a BeginEpoch naming a leader that does not exist, records pushed to a
follower, a fetch claiming to be a follower that holds more, an Identify) sent to a client
port end UNIMPLEMENTED, and every replica's epoch, role, log end and high watermark stay as
they were.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from replog import certs, frames
from replog.client import Client, ClientTls, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import PermissionDeniedError, ReplogError
from replog.v1 import nodes_pb2, nodes_pb2_grpc, replication_pb2_grpc
from replog.v1 import replication_pb2 as pb
from tests.integration.test_security import (
    PATIENT,
    RECORDS,
    SETTLE_S,
    TOPIC,
    Replica,
    scrape,
    snapshot,
    wait_settled,
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    quiet = ["--flush", "interval", "--leader-balance-interval-ms", "0"]
    quiet += ["--election-timeout-ms", "3000"]
    c = DevCluster(tmp_path_factory.mktemp("insecure") / "cluster", 3, extra_args=quiet)
    c.start()
    try:
        with Client(c.bootstrap, retry=PATIENT) as client:
            client.create_topic(TOPIC, 1, replication_factor=3)
            client.append(TOPIC, 0, [b"acked-%03d" % i for i in range(RECORDS)], acks="all")
        wait_settled(c)
        yield c
    finally:
        c.kill_all()


def _roles(state: dict[int, Replica]) -> tuple[int, int, int]:
    leader = next(i for i, r in state.items() if r.role == "leader")
    follower, third = sorted(i for i in state if i != leader)
    return leader, follower, third


def forged(state: dict[int, Replica]) -> list[tuple[str, int, pb.Envelope]]:
    """(attack, target node, envelope): what the issue's plaintext attack script sent."""
    leader, follower, third = _roles(state)
    r = state[leader]
    env = {"topic": TOPIC, "partition": 0}
    vote = pb.Envelope(
        **env,
        from_id=third,
        vote_request=pb.VoteRequest(
            epoch=r.epoch + 1,
            candidate_id=third,
            last_epoch=r.epoch,
            log_end_offset=r.log_end_offset + 1000,
        ),
    )
    begin = pb.Envelope(
        **env, from_id=third, begin_epoch=pb.BeginEpoch(epoch=r.epoch + 1, leader_id=7)
    )
    push = pb.Envelope(**env, from_id=leader)
    f = push.fetch_response
    f.epoch, f.leader_id, f.fetch_offset, f.last_fetched_epoch = (
        r.epoch,
        leader,
        r.log_end_offset,
        r.epoch,
    )
    f.records.start_offset, f.records.end_offset = r.log_end_offset, r.log_end_offset + 5
    f.records.high_watermark = r.log_end_offset + 5
    f.records.frames = frames.encode(r.log_end_offset, [b"forged-%d" % i for i in range(5)])
    fetch = pb.Envelope(
        **env,
        from_id=follower,
        fetch_request=pb.ReplicaFetchRequest(
            epoch=r.epoch,
            replica_id=follower,
            fetch_offset=r.log_end_offset + 100,
            last_fetched_epoch=r.epoch,
        ),
    )
    return [
        ("vote", follower, vote),
        ("vote", leader, vote),
        ("begin epoch", follower, begin),
        ("records to a follower", follower, push),
        ("fetch claiming to be a follower", leader, fetch),
    ]


def test_peer_messages_sent_to_a_client_port_are_unimplemented_and_change_nothing(
    cluster: DevCluster,
) -> None:
    before = wait_settled(cluster)
    for attack, target, envelope in forged(before):
        address = cluster.members[target].address  # the client listener
        with grpc.insecure_channel(address) as channel:
            stub = replication_pb2_grpc.ReplicationStub(channel)
            with pytest.raises(grpc.RpcError) as err:
                stub.Exchange(iter([envelope] * 5), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED, attack
    for node in cluster.members.values():
        with (
            grpc.insecure_channel(node.address) as channel,
            pytest.raises(grpc.RpcError) as err,
        ):
            nodes_pb2_grpc.NodesStub(channel).Identify(nodes_pb2.IdentifyRequest(), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    time.sleep(SETTLE_S)  # long enough for an accepted forgery to show
    assert snapshot(cluster) == before
    assert all(n.running for n in cluster.members.values())


def test_an_insecure_node_warns_and_exports_its_gauge(cluster: DevCluster) -> None:
    for node in cluster.members.values():
        assert "--insecure" in node.args
        assert "security.insecure" in node.log_tail(10**7)
        samples = {name: value for name, _labels, value in scrape(node.metrics_address)}
        assert samples["replog_insecure"] == 1


def test_a_node_beyond_loopback_refuses_plaintext_with_one_line_naming_the_flag(
    tmp_path: Path,
) -> None:
    # A TEST-NET address: not this machine's, so nothing could be bound even by mistake.
    cmd = [sys.executable, "-m", "replog", "serve", "--data-dir", str(tmp_path / "d")]
    result = subprocess.run(
        [*cmd, "--listen", "192.0.2.1:0"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--insecure" in lines[0] and "TLS" in lines[0], result.stderr
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir())


def test_a_single_node_on_loopback_is_still_a_one_command_start(tmp_path: Path) -> None:
    from tests.integration.servers import ServerProcess

    server = ServerProcess(tmp_path / "data", tmp_path).start()
    try:
        with Client(server.address) as client:
            client.create_topic("t", 1)
            res = client.append("t", 0, [b"x"])
            assert client.fetch("t", 0, res.base_offset).records.values[:1] == [b"x"]
        assert "replog_insecure 0.0" in server.metrics()
        with (
            grpc.insecure_channel(server.address) as channel,
            pytest.raises(grpc.RpcError) as err,
        ):  # a single node serves no peer call either
            nodes_pb2_grpc.NodesStub(channel).Identify(nodes_pb2.IdentifyRequest(), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "security.insecure" not in server.log_text()
    finally:
        server.kill()


def test_the_dev_cluster_default_runs_with_client_certificates_acls_and_an_operator(
    tmp_path: Path,
) -> None:
    """What `replog dev-cluster` and `make run` start: TLS, a certificate required of every
    client, ACLs, and the operator certificate (`client_tls`) a super-user."""
    with DevCluster(tmp_path / "cluster", 1, tls=True, acl=True) as dev:
        operator = dev.client_tls
        assert operator is not None and operator.cert_file is not None
        with Client(dev.bootstrap, tls=operator, retry=PATIENT) as admin:
            admin.create_topic("ops", 1)
        ca_only = ClientTls(operator.ca_file)
        with (
            Client(dev.bootstrap, tls=ca_only, timeout_s=5, retry=RetryPolicy(attempts_max=1)) as c,
            pytest.raises(ReplogError),
        ):
            c.list_topics()  # no certificate: the handshake fails
        ca = certs.Issued(dev.tls_dir / "ca.pem", dev.tls_dir / "ca-key.pem")
        mallory = certs.issue_client(ca, tmp_path / "ids", "mallory")
        as_mallory = ClientTls(operator.ca_file, mallory.cert_file, mallory.key_file)
        with (
            Client(dev.bootstrap, tls=as_mallory, retry=RetryPolicy(attempts_max=1)) as c,
            pytest.raises(PermissionDeniedError),
        ):
            c.delete_topic("ops")
        with Client(dev.bootstrap, tls=operator, retry=PATIENT) as admin:
            assert "ops" in admin.list_topics()
