"""The Groups service of one real node, through its gRPC API as any client would use it:
committed offsets, membership and fencing, delete, retention, and hostile input."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from replog.client import Client, RetryPolicy
from replog.errors import (
    GroupNotEmptyError,
    IllegalGenerationError,
    InvalidArgumentError,
    InvalidGroupNameError,
    NotCoordinatorError,
    OffsetMetadataTooLargeError,
    PartitionNotAssignedError,
    PartitionNotFoundError,
    ReplogError,
    TopicNotFoundError,
    UnknownGroupError,
    UnknownMemberError,
)
from replog.rpc_errors import from_rpc_error
from replog.v1 import groups_pb2 as g
from replog.v1 import groups_pb2_grpc
from tests.integration.servers import ServerProcess
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration

T = TypeVar("T")
RETRY_S = 60.0


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("groups")
    args = [
        "--group-offsets-retention-ms", "1500",
        "--retention-check-interval-ms", "200",
        "--group-session-timeout-ms-min", "300",
        "--group-metadata-bytes-max", "64",
    ]  # fmt: skip
    server = ServerProcess(work / "data", work, args).start()
    with Client(server.address) as client:
        client.create_topic("orders", 4)
        client.create_topic("audit", 1)
    yield server
    server.kill()


@pytest.fixture(scope="module")
def stub(node: ServerProcess) -> Iterator[Any]:
    with grpc.insecure_channel(node.address) as channel:
        stub = groups_pb2_grpc.GroupsStub(channel)
        # Clients find a group's coordinator first: the first time, that creates the topic.
        call(stub.FindCoordinator, g.FindCoordinatorRequest(group="any"))
        yield stub


def call(fn: Callable[..., T], request: object) -> T:
    """One call; retriable errors (the coordinator being elected or loading) are retried."""
    deadline = time.monotonic() + RETRY_S
    while True:
        try:
            return fn(request, timeout=10)
        except grpc.RpcError as exc:
            err = from_rpc_error(exc)
            if not err.retriable or time.monotonic() > deadline:
                raise err from None
            time.sleep(0.05)


def once(fn: Callable[..., T], request: object) -> T:
    try:
        return fn(request, timeout=10)
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from None


def offsets(*items: tuple[str, int, int]) -> list[g.OffsetCommit]:
    return [g.OffsetCommit(topic=t, partition=p, offset=o) for t, p, o in items]


def test_the_first_find_coordinator_creates_the_offsets_topic(
    node: ServerProcess, stub: Any
) -> None:
    found = call(stub.FindCoordinator, g.FindCoordinatorRequest(group="first"))
    assert found.address == node.address
    assert 0 <= found.partition < 8
    with Client(node.address) as client:
        assert client.list_topics()["__consumer_offsets"] == 8
        with pytest.raises(InvalidArgumentError):
            client.create_topic("__consumer_offsets", 1)
        with pytest.raises(InvalidArgumentError):
            client.delete_topic("__consumer_offsets")
        with pytest.raises(InvalidArgumentError):  # only coordinators write it
            client.append("__consumer_offsets", found.partition, [b'{"kind": "commit"}'])
        assert client.fetch("__consumer_offsets", found.partition, 0).high_watermark >= 1


def test_offsets_committed_outside_membership_read_back_with_their_metadata(stub: Any) -> None:
    request = g.CommitOffsetsRequest(
        group="tool",
        member_id="",
        generation=-1,
        offsets=[g.OffsetCommit(topic="orders", partition=1, offset=42, metadata="batch 7")],
    )
    call(stub.CommitOffsets, request)
    got = call(
        stub.FetchCommittedOffsets,
        g.FetchCommittedOffsetsRequest(
            group="tool",
            partitions=[g.TopicPartition(topic="orders", partition=p) for p in (0, 1)],
        ),
    )
    assert [(o.partition, o.offset, o.metadata) for o in got.offsets] == [
        (0, -1, ""),
        (1, 42, "batch 7"),
    ]
    assert got.offsets[1].commit_time_ms > 0


# length: one scenario told top to bottom (setup, faults, checks); split, it would hide the story
def test_members_share_the_partitions_and_a_zombie_cannot_commit(stub: Any) -> None:
    join = g.JoinGroupRequest(group="shared", topics=["orders"], session_timeout_ms=400)
    a = call(stub.JoinGroup, join)
    assert len(a.partitions) == 4 and a.session_timeout_ms == 400
    assert a.heartbeat_interval_ms <= 400 // 3
    b = call(stub.JoinGroup, join)
    assert list(b.partitions) == [] and b.reconciling
    ha = call(
        stub.Heartbeat,
        g.HeartbeatRequest(
            group="shared", member_id=a.member_id, generation=a.generation, owned=a.partitions
        ),
    )
    assert len(ha.partitions) == 2  # told to give two up; still reporting four
    ha = call(
        stub.Heartbeat,
        g.HeartbeatRequest(
            group="shared", member_id=a.member_id, generation=ha.generation, owned=ha.partitions
        ),
    )
    hb = call(
        stub.Heartbeat,
        g.HeartbeatRequest(group="shared", member_id=b.member_id, generation=b.generation),
    )
    assert len(hb.partitions) == 2
    mine = ha.partitions[0]
    commit = g.CommitOffsetsRequest(
        group="shared",
        member_id=a.member_id,
        generation=ha.generation,
        offsets=offsets((mine.topic, mine.partition, 5)),
    )
    call(stub.CommitOffsets, commit)
    theirs = hb.partitions[0]
    with pytest.raises(PartitionNotAssignedError):
        call(
            stub.CommitOffsets,
            g.CommitOffsetsRequest(
                group="shared", member_id=a.member_id, generation=ha.generation,
                offsets=offsets((theirs.topic, theirs.partition, 5)),
            ),
        )  # fmt: skip
    with pytest.raises(IllegalGenerationError):
        call(
            stub.CommitOffsets,
            g.CommitOffsetsRequest(
                group="shared", member_id=a.member_id, generation=ha.generation + 10,
                offsets=offsets((mine.topic, mine.partition, 6)),
            ),
        )  # fmt: skip
    with pytest.raises(GroupNotEmptyError):
        call(
            stub.CommitOffsets,
            g.CommitOffsetsRequest(
                group="shared", member_id="", generation=-1, offsets=offsets(("orders", 0, 1))
            ),
        )
    with pytest.raises(GroupNotEmptyError):
        call(stub.DeleteGroup, g.DeleteGroupRequest(group="shared"))

    # "a" goes silent: after its session timeout it is removed, and "b" takes everything.
    def b_has_all() -> bool:
        reply = call(
            stub.Heartbeat,
            g.HeartbeatRequest(
                group="shared", member_id=b.member_id, generation=hb.generation, owned=hb.partitions
            ),
        )
        hb.CopyFrom(reply)
        return len(reply.partitions) == 4

    wait_until(b_has_all, "the silent member's partitions move to the live one")
    with pytest.raises(UnknownMemberError):
        call(stub.CommitOffsets, commit)  # the zombie's commit is refused
    got = call(stub.FetchCommittedOffsets, g.FetchCommittedOffsetsRequest(group="shared"))
    assert [(o.topic, o.partition, o.offset) for o in got.offsets] == [
        (mine.topic, mine.partition, 5)
    ]
    described = call(stub.DescribeGroup, g.DescribeGroupRequest(group="shared"))
    assert [m.member_id for m in described.members] == [b.member_id]
    assert described.state == "STABLE"
    assert {p.member_id for p in described.partitions} == {b.member_id}
    committed = {(p.topic, p.partition): p for p in described.partitions}[
        (mine.topic, mine.partition)
    ]
    assert committed.committed_offset == 5 and committed.high_watermark >= 1
    call(stub.LeaveGroup, g.LeaveGroupRequest(group="shared", member_id=b.member_id))
    listed = call(stub.ListGroups, g.ListGroupsRequest())
    assert {x.group: (x.state, x.members) for x in listed.groups}["shared"] == ("EMPTY", 0)
    call(stub.DeleteGroup, g.DeleteGroupRequest(group="shared"))
    with pytest.raises(UnknownGroupError):
        call(stub.DescribeGroup, g.DescribeGroupRequest(group="shared"))


def test_an_idle_group_loses_its_offsets_after_retention(stub: Any) -> None:
    call(
        stub.CommitOffsets,
        g.CommitOffsetsRequest(
            group="idle", member_id="", generation=-1, offsets=offsets(("audit", 0, 3))
        ),
    )

    def gone() -> bool:
        got = call(stub.FetchCommittedOffsets, g.FetchCommittedOffsetsRequest(group="idle"))
        return not got.offsets

    wait_until(gone, "the idle group's offsets expire")
    with pytest.raises(UnknownGroupError):
        call(stub.DescribeGroup, g.DescribeGroupRequest(group="idle"))


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (g.JoinGroupRequest(group="", topics=["orders"]), InvalidGroupNameError),
        (g.JoinGroupRequest(group="x" * 256, topics=["orders"]), InvalidGroupNameError),
        (g.JoinGroupRequest(group="bad\nname", topics=["orders"]), InvalidGroupNameError),
        (g.JoinGroupRequest(group="v", topics=[]), InvalidArgumentError),
        (g.JoinGroupRequest(group="v", topics=["orders", "orders"]), InvalidArgumentError),
        (g.JoinGroupRequest(group="v", topics=["__consumer_offsets"]), InvalidArgumentError),
        (g.JoinGroupRequest(group="v", topics=["no/such"]), InvalidArgumentError),
        (
            g.JoinGroupRequest(group="v", topics=["orders"], session_timeout_ms=1),
            InvalidArgumentError,
        ),
        (
            g.JoinGroupRequest(group="v", topics=["orders"], client_id="x" * 300),
            InvalidArgumentError,
        ),
        (g.HeartbeatRequest(group="v", member_id=""), InvalidArgumentError),
        (g.HeartbeatRequest(group="v", member_id="m" * 200), InvalidArgumentError),
        (g.CommitOffsetsRequest(group="v", generation=-1), InvalidArgumentError),
        (
            g.CommitOffsetsRequest(group="v", generation=0, offsets=offsets(("orders", 0, 1))),
            InvalidArgumentError,
        ),
        (
            g.CommitOffsetsRequest(group="v", generation=-1, offsets=offsets(("orders", 0, -5))),
            InvalidArgumentError,
        ),
        (
            g.CommitOffsetsRequest(
                group="v", generation=-1, offsets=offsets(("orders", 0, 1), ("orders", 0, 2))
            ),
            InvalidArgumentError,
        ),
        (
            g.CommitOffsetsRequest(
                group="v",
                generation=-1,
                offsets=[g.OffsetCommit(topic="orders", offset=1, metadata="m" * 65)],
            ),
            OffsetMetadataTooLargeError,
        ),
        (
            g.CommitOffsetsRequest(group="v", generation=-1, offsets=offsets(("ghost", 0, 1))),
            TopicNotFoundError,
        ),
        (
            g.CommitOffsetsRequest(group="v", generation=-1, offsets=offsets(("orders", 9, 1))),
            PartitionNotFoundError,
        ),
        (
            g.FetchCommittedOffsetsRequest(
                group="v",
                partitions=[
                    g.TopicPartition(topic="orders", partition=p % 4) for p in range(10_001)
                ],
            ),
            InvalidArgumentError,
        ),
    ],
)
def test_hostile_input_gets_a_typed_error_and_changes_nothing(
    stub: Any, request_: Any, error: type[ReplogError]
) -> None:
    method = {
        g.JoinGroupRequest: stub.JoinGroup,
        g.HeartbeatRequest: stub.Heartbeat,
        g.CommitOffsetsRequest: stub.CommitOffsets,
        g.FetchCommittedOffsetsRequest: stub.FetchCommittedOffsets,
    }[type(request_)]
    with pytest.raises(error):
        call(method, request_)
    listed = call(stub.ListGroups, g.ListGroupsRequest())
    assert "v" not in {x.group for x in listed.groups}


def test_calls_for_a_group_on_a_node_without_the_offsets_topic_say_where_to_go(
    tmp_path: Path,
) -> None:
    server = ServerProcess(tmp_path / "data", tmp_path, []).start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            fresh = groups_pb2_grpc.GroupsStub(channel)
            with pytest.raises(NotCoordinatorError) as info:
                once(fresh.DescribeGroup, g.DescribeGroupRequest(group="x"))
            assert info.value.retriable  # (after FindCoordinator)
            assert list(call(fresh.ListGroups, g.ListGroupsRequest()).groups) == []
    finally:
        server.kill()


def test_unknown_members_are_told_so(stub: Any) -> None:
    with pytest.raises(UnknownMemberError):
        call(stub.Heartbeat, g.HeartbeatRequest(group="nobody", member_id="m-1", generation=1))
    with pytest.raises(UnknownMemberError):
        call(stub.LeaveGroup, g.LeaveGroupRequest(group="nobody", member_id="m-1"))


def test_log_retention_never_drops_a_live_groups_offsets(
    server_factory: Callable[..., ServerProcess],
) -> None:
    """With a node retention of 3 s and tiny segments, another group's commits roll the
    offsets log's segments past retention: the quiet group's offsets are rewritten in time,
    and survive a restart (which rebuilds them from what retention left)."""
    server = server_factory(
        "--retention-ms", "3000",
        "--retention-check-interval-ms", "200",
        "--segment-bytes-max", "2048",
        "--group-offsets-partitions", "1",
    ).start()  # fmt: skip
    with Client(server.address) as client:
        client.create_topic("kept", 1)
        client.append("kept", 0, [b"x"] * 10)
        client.commit_offsets("quiet", {("kept", 0): (7, "seven")})
        (written_at,) = client.list_offsets("__consumer_offsets")
        deadline = time.monotonic() + 120
        n = 0

        def old_records_gone() -> bool:
            nonlocal n
            for _ in range(20):  # another group keeps committing: segments fill and roll
                n += 1
                client.commit_offsets("busy", {("kept", 0): n % 10})
            (now,) = client.list_offsets("__consumer_offsets")
            assert time.monotonic() < deadline
            return now.earliest > written_at.latest

        wait_until(old_records_gone, "retention removes the segment of the first commit")
        (committed,) = client.committed_offsets("quiet")
        assert (committed.offset, committed.metadata) == (7, "seven")
    assert server.terminate() == 0
    # Down for longer than the log retention (the scenario, not a wait for a condition): at
    # the restart every closed segment is past retention, the quiet group's latest refresh
    # among them. The node keeps them until its coordinator has loaded the groups and
    # refreshed them (before, its retention pass raced the load: one run in many lost the
    # quiet group's offsets after the restart; this test does not force that race).
    time.sleep(3.5)
    logged = len(server.log_text())
    server.start()
    with Client(server.address, retry=RetryPolicy(attempts_max=200, deadline_ms=60_000)) as client:
        (committed,) = client.committed_offsets("quiet")
        assert (committed.offset, committed.metadata) == (7, "seven")
        wait_until(
            lambda: "retention.deleted topic=__consumer_offsets" in server.log_text()[logged:],
            "retention goes on once the coordinator has refreshed the groups",
        )
        (committed,) = client.committed_offsets("quiet")
        assert (committed.offset, committed.metadata) == (7, "seven")


def test_a_restarted_coordinator_loads_from_its_latest_snapshot(
    server_factory: Callable[..., ServerProcess],
) -> None:
    """Snapshots every 50 records: after 400 commits, a restart reads only the records
    since a snapshot, not the whole log, and every group's offsets are right."""
    args = ["--group-offsets-snapshot-records", "50", "--group-offsets-partitions", "1"]
    server = server_factory(*args).start()
    expected: dict[str, int] = {}
    with Client(server.address) as client:
        client.create_topic("snap", 1)
        for i in range(400):
            group = f"s{i % 7}"
            client.commit_offsets(group, {("snap", 0): i})
            expected[group] = i
        wait_until(lambda: "event=groups.snapshot " in server.log_text(), "a snapshot")
    assert server.terminate() == 0
    server.start()
    with Client(server.address, retry=RetryPolicy(attempts_max=200, deadline_ms=60_000)) as client:
        got = {g: client.committed_offsets(g)[0].offset for g in expected}
    assert got == expected
    loads = re.findall(r"event=groups.shard_loaded partition=0 records=(\d+)", server.log_text())
    # Not the 400 commits and more since the start. (How far behind the last snapshot is
    # depends on when its task ran on a loaded machine: 230 records were seen, so the bound
    # is "not everything", not a count tied to the snapshot interval.)
    assert int(loads[-1]) < 400, loads
