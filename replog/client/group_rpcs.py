"""The Groups calls as data, once for the threaded and the asyncio client (sans-I/O).

Each call of `replog.v1.Groups` is built here as a `GroupRpc`: the group whose coordinator
answers it (None: any node), the stub method, its request, how its answer reads, its
deadline, its retry policy and whether an attempt that got no answer may be sent again.
`groups.GroupCalls` (threads) and `aio_groups.AsyncGroupCalls` (asyncio) only send them
(`run`, blocking or awaited) and expose each builder as a method of the same signature
(`twins.TwinCall`: one method table, `GroupCalls`), so the two twins cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from replog.client.group_wire import (
    CommittedOffset,
    GroupDescription,
    GroupSummary,
    TopicPartition,
    answer,
    committed_offsets,
    dead_attempt,
    description,
    follow,
    summaries,
    wire_offsets,
    wire_tps,
)
from replog.client.member_rules import Answer
from replog.client.retry import RetryPolicy
from replog.client.twins import TwinCall
from replog.errors import ReplogError
from replog.v1 import groups_pb2

T = TypeVar("T")


class GroupClient(Protocol):
    """The settings a Groups call reads from its client (`Client` or `AsyncClient`)."""

    timeout_s: float
    attempt_timeout_s: float
    retry: RetryPolicy


class CoordinatorMap:
    """What both twins keep: each group's coordinator address as last found."""

    client: GroupClient

    def __init__(self, client: Any) -> None:
        self.client = client
        self.coordinators: dict[str, str] = {}  # group -> coordinator address

    def learned(self, group: str, address: str) -> str:
        self.coordinators[group] = address
        return address

    def timeout_of(self, rpc: GroupRpc[Any]) -> float:
        return self.client.attempt_timeout_s if rpc.timeout_s is None else rpc.timeout_s

    def policy_of(self, rpc: GroupRpc[Any]) -> RetryPolicy:
        return rpc.retry or self.client.retry

    def failed(self, rpc: GroupRpc[Any], err: ReplogError, address: str) -> ReplogError:
        """The error an attempt of `rpc` at `address` raises (`group_wire.dead_attempt`)."""
        return dead_attempt(err, address) if rpc.retry_dead else err

    def follow(self, rpc: GroupRpc[Any]) -> Callable[[ReplogError], bool]:
        """What a retry of `rpc` does first: follow the coordinator (`group_wire.follow`)."""
        group = rpc.group
        assert group is not None
        return lambda err: follow(err, self.coordinators, group)


@dataclass(frozen=True, slots=True)
class GroupRpc(Generic[T]):
    """One Groups call: `method` of the Groups stub with `request`, to the coordinator of
    `group` (None: any node, routed as the client's admin calls); `read` turns the answer
    into the result. `timeout_s` None: the client's attempt deadline. `retry_dead`: an
    attempt that got no answer may be sent again (every call but JoinGroup and
    DeleteGroup)."""

    group: str | None
    method: str
    request: Any
    read: Callable[[Any], T]
    timeout_s: float | None = None
    retry: RetryPolicy | None = None
    retry_dead: bool = True


def find_coordinator(calls: CoordinatorMap, group: str) -> GroupRpc[str]:
    """The coordinator's address (asked of any node)."""
    req = groups_pb2.FindCoordinatorRequest(group=group)
    return GroupRpc(None, "FindCoordinator", req, lambda r: calls.learned(group, str(r.address)))


def join(
    calls: CoordinatorMap,
    group: str,
    topics: Sequence[str],
    *,
    session_timeout_ms: int = 0,
    rebalance_timeout_ms: int = 0,
    client_id: str = "",
) -> GroupRpc[tuple[Answer, int]]:
    """A new member: its first answer and the session timeout granted. The coordinator
    answers once the group settled (the client's whole `timeout_s`); never sent twice (a
    second join would be a second member)."""
    req = groups_pb2.JoinGroupRequest(
        group=group,
        topics=list(topics),
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        client_id=client_id,
    )

    def read(r: Any) -> tuple[Answer, int]:
        return answer(r, r.member_id), r.session_timeout_ms

    return GroupRpc(group, "JoinGroup", req, read, calls.client.timeout_s, retry_dead=False)


def heartbeat(
    calls: CoordinatorMap,
    group: str,
    member_id: str,
    generation: int,
    owned: Iterable[TopicPartition],
    retry: RetryPolicy | None = None,
    timeout_s: float | None = None,
) -> GroupRpc[Answer]:
    """The member's heartbeat with the partitions it holds; its answer."""
    req = groups_pb2.HeartbeatRequest(
        group=group, member_id=member_id, generation=generation, owned=wire_tps(owned)
    )
    return GroupRpc(group, "Heartbeat", req, lambda r: answer(r, member_id), timeout_s, retry)


def leave(
    calls: CoordinatorMap, group: str, member_id: str, retry: RetryPolicy | None = None
) -> GroupRpc[None]:
    req = groups_pb2.LeaveGroupRequest(group=group, member_id=member_id)
    return GroupRpc(group, "LeaveGroup", req, _nothing, retry=retry)


def commit(
    calls: CoordinatorMap,
    group: str,
    offsets: Mapping[TopicPartition, int | tuple[int, str]],
    member_id: str = "",
    generation: int = -1,
) -> GroupRpc[None]:
    """Commit `offsets` ((topic, partition) -> next offset, or (offset, metadata)); as a
    member, or outside membership (member_id "", generation -1)."""
    req = groups_pb2.CommitOffsetsRequest(
        group=group, member_id=member_id, generation=generation, offsets=wire_offsets(offsets)
    )
    return GroupRpc(group, "CommitOffsets", req, _nothing)


def committed(
    calls: CoordinatorMap, group: str, partitions: Iterable[TopicPartition] = ()
) -> GroupRpc[list[CommittedOffset]]:
    """The group's committed offsets of `partitions` (default: all it has)."""
    req = groups_pb2.FetchCommittedOffsetsRequest(group=group, partitions=wire_tps(partitions))
    return GroupRpc(group, "FetchCommittedOffsets", req, committed_offsets)


def list_groups(calls: CoordinatorMap) -> GroupRpc[list[GroupSummary]]:
    return GroupRpc(None, "ListGroups", groups_pb2.ListGroupsRequest(), summaries)


def describe(calls: CoordinatorMap, group: str) -> GroupRpc[GroupDescription]:
    req = groups_pb2.DescribeGroupRequest(group=group)
    return GroupRpc(group, "DescribeGroup", req, description)


def delete(calls: CoordinatorMap, group: str) -> GroupRpc[None]:
    req = groups_pb2.DeleteGroupRequest(group=group)
    return GroupRpc(group, "DeleteGroup", req, _nothing, retry_dead=False)


def _nothing(_reply: Any) -> None:
    return None


class GroupCalls(CoordinatorMap):
    """The Groups calls both twins offer (each a `twins.TwinCall` of a builder above)."""

    find_coordinator = TwinCall(find_coordinator)
    join = TwinCall(join)
    heartbeat = TwinCall(heartbeat)
    leave = TwinCall(leave)
    commit = TwinCall(commit)
    committed = TwinCall(committed)
    list = TwinCall(list_groups)
    describe = TwinCall(describe)
    delete = TwinCall(delete)
