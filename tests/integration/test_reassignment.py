"""Moving a partition's replicas to other nodes (ReassignPartition) under an acks=all
producer: every acknowledged record is readable afterwards, the node left out deletes its
replica, the new node holds the log; also when the leader's own node leaves, and when a
node is killed half way."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from replog.client import Client, RetryPolicy
from replog.client.results import PartitionInfo
from replog.devcluster import DevCluster
from replog.errors import (
    InvalidArgumentError,
    ReassignmentInProgressError,
    ReplogError,
    TooManyPartitionsError,
)
from replog.v1 import admin_pb2, admin_pb2_grpc
from tests.integration.test_cluster import PATIENT, SteadyProducer, leader_of, read_all
from tests.integration.test_large_cluster import scrape
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.slow

TOPIC = "move-me"  # placed on nodes 1, 2, 3 of 4 (metadata.assign)
DEADLINE_S = 120.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(tmp_path / "cluster", 4)
    c.start()
    yield c
    c.kill_all()


def partition(client: Client) -> PartitionInfo | None:
    try:
        return client.describe_topic(TOPIC)[0]
    except ReplogError:
        return None


def completed(client: Client, target: tuple[int, ...]) -> PartitionInfo | None:
    """The partition once its reassignment is done: no target, voters = `target`."""
    info = partition(client)
    if info is None or info.target_replicas or set(info.replicas) != set(target):
        return None
    return info if not info.observers and info.leader_id in target else None


def move(cluster: DevCluster, leaving: str, half_way: bool = False) -> None:
    """Reassign TOPIC/0 from its 3 replicas to 2 of them and the fourth node, removing
    the leader (`leaving="leader"`) or a follower. `half_way`: the fourth node is down when
    the move starts, so the leader stops at "catching up" with it as an observer; then the
    fourth node restarts and the leader is SIGKILLed and restarted: another leader must
    resume from the log's membership and the metadata's target."""
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic(TOPIC, 1, 3)
        old = wait_until(lambda: partition(client), "the topic is described").replicas
        assert set(old) == {1, 2, 3}
        leader = leader_of(client, TOPIC)
        (new,) = set(cluster.members) - set(old)
        out = leader if leaving == "leader" else next(r for r in old if r != leader)
        target = (*(r for r in old if r != out), new)
        with (
            Client(cluster.bootstrap, retry=PATIENT) as producing,
            SteadyProducer(producing, TOPIC) as producer,
        ):
            producer.wait_acked(2000)
            if half_way:
                cluster.members[new].kill()
            replicas, recorded = client.reassign_partition(TOPIC, 0, target)
            assert (set(replicas), recorded) == (set(old), target)
            if half_way:
                stuck = wait_until(
                    lambda: (
                        (i := partition(client))
                        and i.observers == (new,)
                        and "catching up" in i.reassignment_step
                        and i
                    ),
                    f"node {new} joined as an observer and the leader waits for it",
                    DEADLINE_S,
                )
                assert stuck.target_replicas == target
                cluster.members[new].start()
                assert stuck.leader_id is not None
                cluster.members[stuck.leader_id].kill()
                cluster.members[stuck.leader_id].start()
            info = wait_until(
                lambda: completed(client, target), f"{old} moved to {target}", DEADLINE_S
            )
            acked_during = len(producer.acked)
            producer.wait_acked(acked_during + 500)  # and the new replicas take writes
        acked = dict(producer.acked)
        assert info.leader_id != out
        wait_until(
            lambda: not (cluster.members[out].data_dir / TOPIC).exists(),
            f"node {out} deleted its replica",
            DEADLINE_S,
        )
        read = dict(read_all(client, TOPIC))
        missing = [o for o, v in acked.items() if read.get(o) != v]
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
        logs = list((cluster.members[new].data_dir / TOPIC / "partition_0").glob("*.log"))
        assert sum(p.stat().st_size for p in logs) > 0
        final = wait_until(
            lambda: (i := completed(client, target)) and len(i.replica_status) == 3 and i,
            "the leader reports the progress of every new replica",
        )
        assert {s.replica_id for s in final.replica_status} == set(target)


def test_replicas_move_to_another_node_and_every_acked_record_stays(
    cluster: DevCluster,
) -> None:
    move(cluster, leaving="follower")


def test_the_leaders_own_node_leaves_after_handing_leadership_over(cluster: DevCluster) -> None:
    move(cluster, leaving="leader")


def test_a_reassignment_resumes_after_its_leader_is_killed_half_way(
    cluster: DevCluster,
) -> None:
    move(cluster, leaving="follower", half_way=True)


def test_invalid_reassignments_are_refused_with_typed_errors(cluster: DevCluster) -> None:
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic(TOPIC, 1, 3)
        old = wait_until(lambda: partition(client), "the topic is described").replicas
        with pytest.raises(InvalidArgumentError, match="not nodes of the cluster"):
            client.reassign_partition(TOPIC, 0, (*old[:2], 9))
        with pytest.raises(InvalidArgumentError, match="distinct"):
            client.reassign_partition(TOPIC, 0, (old[0], old[0]))
        (new,) = set(cluster.members) - set(old)
        client.reassign_partition(TOPIC, 0, (*old[:2], new))
        try:
            client.reassign_partition(TOPIC, 0, (new, *old[1:]))
        except ReassignmentInProgressError as exc:
            assert exc.reason == "REASSIGNMENT_IN_PROGRESS"
        else:  # the first one completed already: the partition is on its target
            assert completed(client, (*old[:2], new)) is not None


@pytest.fixture
def small(tmp_path: Path) -> Iterator[DevCluster]:
    """4 nodes that each host at most one partition replica."""
    c = DevCluster(tmp_path / "cluster", 4, extra_args=["--partitions-max", "1"])
    c.start()
    yield c
    c.kill_all()


def test_a_move_to_a_node_without_room_is_refused_before_anything_is_recorded(
    small: DevCluster,
) -> None:
    brief = RetryPolicy(deadline_ms=5_000)  # the refusal is retriable: do not wait it out
    with Client(small.bootstrap, retry=PATIENT) as client:
        client.create_topic(TOPIC, 1, 3)
        old = wait_until(lambda: partition(client), "the topic is described").replicas
        (new,) = set(small.members) - set(old)
        client.create_topic("full1", 1, 1)  # placed on node 4 (metadata.assign)
        assert client.describe_topic("full1")[0].replicas == (new,) == (4,)
        with (
            Client(small.bootstrap, retry=brief) as hasty,
            pytest.raises(TooManyPartitionsError) as refused,
        ):
            hasty.reassign_partition(TOPIC, 0, (*old[1:], new))
        assert refused.value.limit == "partitions_max" and refused.value.limit_value == 1
        assert f"node {new} hosts 1" in refused.value.message
        info = partition(client)
        assert info is not None and not info.target_replicas and info.replicas == old
        # A move that adds no replica (a new preferred leader) needs no room.
        reordered = (*old[1:], old[0])
        assert client.reassign_partition(TOPIC, 0, reordered)[1] == reordered
        wait_until(lambda: completed(client, reordered), "the reorder completed", DEADLINE_S)


def test_a_client_cannot_complete_a_reassignment(cluster: DevCluster) -> None:
    """Completing makes the removed nodes delete their replicas: only the partition's leader
    may send it (a call between nodes), never a client, whatever its permissions."""
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic(TOPIC, 1, 3)
        old = wait_until(lambda: partition(client), "the topic is described").replicas
        (new,) = set(cluster.members) - set(old)
        forged = admin_pb2.ReassignPartitionRequest(
            topic=TOPIC, partition=0, replicas=[*old[:2], new], complete=True
        )
        stub = admin_pb2_grpc.AdminStub(grpc.insecure_channel(cluster.members[new].address))
        with pytest.raises(grpc.RpcError) as refused:
            stub.ReassignPartition(forged, timeout=30)
        assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert tuple(partition(client).replicas) == tuple(old)  # nothing changed


def test_the_cli_reassigns_and_describe_shows_the_move(cluster: DevCluster) -> None:
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic(TOPIC, 1, 3)
        old = wait_until(lambda: partition(client), "the topic is described").replicas
        (new,) = set(cluster.members) - set(old)
        target = (new, *old[1:])
        cluster.members[new].kill()  # the move waits for it: describe shows it under way
        ids = ",".join(map(str, target))
        moved = replog("partition", "reassign", TOPIC, "0", "--replicas", ids, cluster=cluster)
        assert moved.returncode == 0, moved.stderr
        assert f"moving to {ids}" in moved.stdout.decode()

        def under_way() -> str | None:
            shown = replog("topic", "describe", TOPIC, cluster=cluster).stdout.decode()
            waiting = f"->{ids} observers={new} step='observers [{new}] catching up'"
            return shown if waiting in shown else None

        wait_until(under_way, "describe shows the move waiting for the new node", DEADLINE_S)
        doc = json.loads(
            replog("topic", "describe", TOPIC, "--output", "json", cluster=cluster).stdout
        )
        assert doc["partitions"][0]["target_replicas"] == list(target)
        cluster.members[new].start()
        wait_until(lambda: completed(client, target), "the move completed", DEADLINE_S)
        bad = replog("partition", "reassign", TOPIC, "0", "--replicas", "1,x", cluster=cluster)
        assert bad.returncode != 0


def samples(cluster: DevCluster, name: str, **labels: str) -> list[tuple[int, float]]:
    """(node, value) of every running node's `name` samples that have `labels`."""
    return [
        (i, value)
        for i, member in cluster.members.items()
        if member.running
        for sample, found, value in scrape(member.metrics_address)
        if sample == name and labels.items() <= found.items()
    ]


def moves_everywhere(cluster: DevCluster, count: int) -> bool:
    """Every running node's metadata shows `count` moves in progress."""
    found = samples(cluster, "replog_reassignments_in_progress")
    running = [i for i, m in cluster.members.items() if m.running]
    return sorted(i for i, v in found if v == count) == running


def test_the_metrics_show_a_move_under_way_and_none_once_it_completed(
    cluster: DevCluster,
) -> None:
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic(TOPIC, 1, 3)
        old = wait_until(lambda: partition(client), "the topic is described").replicas
        client.append(TOPIC, 0, [b"v" * 100] * 50, acks="all")
        assert moves_everywhere(cluster, 0)
        (new,) = set(cluster.members) - set(old)
        target = (*old[1:], new)
        cluster.members[new].kill()  # the move waits for it: the metrics show it under way
        client.reassign_partition(TOPIC, 0, target)
        wait_until(lambda: moves_everywhere(cluster, 1), "every node counts the move")
        lag = f"replog_reassignment_lag_records{{replica={new}}}"
        ((leader, behind),) = wait_until(
            lambda: samples(cluster, "replog_reassignment_lag_records", replica=str(new)),
            f"the leader exports {lag}",
        )
        assert behind >= 50  # it holds nothing yet
        assert leader in old
        cluster.members[new].start()
        wait_until(lambda: completed(client, target), "the move completed", DEADLINE_S)
        wait_until(lambda: moves_everywhere(cluster, 0), "every node counts no move")
        assert samples(cluster, "replog_reassignment_lag_records") == []


def replog(*args: str, cluster: DevCluster) -> subprocess.CompletedProcess[bytes]:
    cmd = [sys.executable, "-m", "replog", *args, "--address", cluster.bootstrap]
    return subprocess.run(cmd, capture_output=True, timeout=60, check=False)


@pytest.fixture
def throttled(tmp_path: Path) -> Iterator[DevCluster]:
    """4 nodes whose leaders serve a move's new replicas at 128 KiB/s (64 KiB answers)."""
    args = ["--reassignment-fetch-bytes-per-s", "131072", "--fetch-bytes-max", "65536"]
    c = DevCluster(tmp_path / "cluster", 4, extra_args=args)
    c.start()
    yield c
    c.kill_all()


def filled(cluster: DevCluster, client: Client) -> tuple[tuple[int, ...], int, list[bytes]]:
    """TOPIC with ~0.5 MB: its replicas, the node outside them, the values."""
    client.create_topic(TOPIC, 1, 3)
    old = wait_until(lambda: partition(client), "the topic is described").replicas
    values = [b"r%09d" % i + b"." * 40 for i in range(8_000)]
    for i in range(0, len(values), 1000):
        client.append(TOPIC, 0, values[i : i + 1000], acks="all")
    (new,) = set(cluster.members) - set(old)
    return old, new, values


def catching_up_throttled(client: Client) -> PartitionInfo | None:
    info = partition(client)
    return info if info and "throttled fetches" in info.reassignment_step else None


def test_a_throttled_move_drops_catch_up_fetches_and_still_completes(
    throttled: DevCluster,
) -> None:
    with Client(throttled.bootstrap, retry=PATIENT) as client:
        old, new, values = filled(throttled, client)
        target = (*old[1:], new)
        client.reassign_partition(TOPIC, 0, target)
        wait_until(lambda: catching_up_throttled(client), "the catch-up is throttled", DEADLINE_S)
        wait_until(lambda: completed(client, target), "the move completed", DEADLINE_S)
        assert [v for _, v in read_all(client, TOPIC)] == values


def test_a_cancelled_move_goes_back_and_the_new_node_deletes_its_copy(
    throttled: DevCluster,
) -> None:
    with Client(throttled.bootstrap, retry=PATIENT) as client:
        old, new, values = filled(throttled, client)
        client.reassign_partition(TOPIC, 0, (*old[1:], new))
        info = wait_until(
            lambda: catching_up_throttled(client), "the new node copies the log", DEADLINE_S
        )
        assert info.observers == (new,)
        assert (throttled.members[new].data_dir / TOPIC).exists()
        replicas, target = client.reassign_partition(TOPIC, 0, old)  # cancel
        assert (set(replicas), target) == (set(old), old)
        wait_until(lambda: completed(client, old), "the move was undone", DEADLINE_S)
        wait_until(
            lambda: not (throttled.members[new].data_dir / TOPIC).exists(),
            f"node {new} deleted its copy",
            DEADLINE_S,
        )
        assert [v for _, v in read_all(client, TOPIC)] == values
