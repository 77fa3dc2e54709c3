"""Calls of the `replog.v1.Groups` service with coordinator routing (sync), and their results.

A group's calls go to its coordinator (`FindCoordinator` on any node, cached per group);
a NOT_COORDINATOR answer moves the group to the node it names (or asks again), and
COORDINATOR_LOADING, LEADER_UNKNOWN and unreachable nodes are retried with the client's
`RetryPolicy` (a heartbeat passes a shorter one: it must not outlive its session).
`ListGroups` goes to any node. Results are plain frozen values (`CommittedOffset`,
`GroupSummary`, `GroupDescription`, ...), shared with the asyncio twin (`aio_groups`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc

from replog.client.member_rules import Answer as Answer  # re-exported: the calls return it
from replog.client.retry import RetryPolicy, call_with_retry
from replog.client.routing import unreachable_error
from replog.errors import (
    DeadlineExceededError,
    LeaderUnknownError,
    NotCoordinatorError,
    ReplogError,
    UnavailableError,
)
from replog.rpc_errors import from_rpc_error
from replog.v1 import groups_pb2, groups_pb2_grpc

T = TypeVar("T")
TopicPartition = tuple[str, int]


# -- results ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int  # -1: none committed
    metadata: str
    commit_time_ms: int


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group: str
    state: str  # EMPTY | STABLE | RECONCILING
    members: int
    generation: int
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class MemberInfo:
    member_id: str
    client_id: str
    client_host: str
    topics: tuple[str, ...]
    partitions: tuple[TopicPartition, ...]  # held now
    target: tuple[TopicPartition, ...]
    generation: int
    session_timeout_ms: int
    last_heartbeat_ms_ago: int


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed_offset: int  # -1: none
    metadata: str
    commit_time_ms: int
    high_watermark: int  # -1: unknown
    lag: int  # -1: unknown
    member_id: str  # "": nobody holds it


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group: str
    state: str
    generation: int
    coordinator_id: int
    members: tuple[MemberInfo, ...]
    partitions: tuple[PartitionLag, ...]


def tps(items: Iterable[Any]) -> frozenset[TopicPartition]:
    return frozenset((i.topic, i.partition) for i in items)


def wire_tps(items: Iterable[TopicPartition]) -> list[groups_pb2.TopicPartition]:
    return [groups_pb2.TopicPartition(topic=t, partition=p) for t, p in sorted(items)]


def wire_offsets(offsets: Mapping[TopicPartition, int | tuple[int, str]]) -> list[Any]:
    out = []
    for (t, p), value in sorted(offsets.items()):
        offset, metadata = value if isinstance(value, tuple) else (value, "")
        out.append(groups_pb2.OffsetCommit(topic=t, partition=p, offset=offset, metadata=metadata))
    return out


def committed_offsets(reply: groups_pb2.FetchCommittedOffsetsResponse) -> list[CommittedOffset]:
    return [
        CommittedOffset(o.topic, o.partition, o.offset, o.metadata, o.commit_time_ms)
        for o in reply.offsets
    ]


def summaries(reply: groups_pb2.ListGroupsResponse) -> list[GroupSummary]:
    return [
        GroupSummary(g.group, g.state, g.members, g.generation, g.coordinator_id)
        for g in reply.groups
    ]


def description(reply: groups_pb2.DescribeGroupResponse) -> GroupDescription:
    return GroupDescription(
        reply.group,
        reply.state,
        reply.generation,
        reply.coordinator_id,
        tuple(
            MemberInfo(
                m.member_id,
                m.client_id,
                m.client_host,
                tuple(m.topics),
                tuple(sorted(tps(m.partitions))),
                tuple(sorted(tps(m.target))),
                m.generation,
                m.session_timeout_ms,
                m.last_heartbeat_ms_ago,
            )
            for m in reply.members
        ),
        tuple(
            PartitionLag(
                p.topic,
                p.partition,
                p.committed_offset,
                p.metadata,
                p.commit_time_ms,
                p.high_watermark,
                p.lag,
                p.member_id,
            )
            for p in reply.partitions
        ),
    )


def answer(reply: Any, member_id: str) -> Answer:
    return Answer(
        member_id,
        reply.generation,
        tps(reply.partitions),
        reply.heartbeat_interval_ms,
        reply.reconciling,
    )


def join_request(
    group: str,
    topics: Sequence[str],
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    client_id: str,
) -> groups_pb2.JoinGroupRequest:
    return groups_pb2.JoinGroupRequest(
        group=group,
        topics=list(topics),
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        client_id=client_id,
    )


def commit_request(
    group: str,
    offsets: Mapping[TopicPartition, int | tuple[int, str]],
    member_id: str,
    generation: int,
) -> groups_pb2.CommitOffsetsRequest:
    return groups_pb2.CommitOffsetsRequest(
        group=group, member_id=member_id, generation=generation, offsets=wire_offsets(offsets)
    )


def dead_attempt(err: ReplogError, address: str) -> ReplogError:
    """A group call that got no answer before its attempt deadline (the coordinator paused,
    hung or cut off) is retried, after FindCoordinator (`follow`): every group call but
    JoinGroup and DeleteGroup can be sent twice."""
    if isinstance(err, DeadlineExceededError):
        return UnavailableError(
            f"no answer from the coordinator {address} before the deadline ({err.message})",
            grpc_code="DEADLINE_EXCEEDED",
        )
    return err


def follow(err: ReplogError, coordinators: dict[str, str], group: str) -> bool:
    """Update the group's coordinator after a failed call; True when the retry goes to a
    newly named node (worth making at once)."""
    if isinstance(err, NotCoordinatorError) and err.leader_address:
        moved = coordinators.get(group) != err.leader_address
        coordinators[group] = err.leader_address
        return moved
    if isinstance(err, NotCoordinatorError | LeaderUnknownError) or unreachable_error(err):
        coordinators.pop(group, None)  # ask FindCoordinator again
    return False


# -- the sync calls ----------------------------------------------------------------------


class GroupsClient(Protocol):
    """What `GroupCalls` needs from its client; `replog.client.Client` is one."""

    timeout_s: float
    attempt_timeout_s: float
    retry: RetryPolicy

    def _node(self, address: str) -> Any: ...

    def _call(
        self, fn: Callable[[Any], T], topic: str | None = None, partition: int = 0, *,
        idempotent: bool = False,
    ) -> T: ...  # fmt: skip


class Coordinators:
    """What `GroupCalls` and its asyncio twin share: each group's coordinator address as
    last found, and one Groups stub per node address (over the client's channels)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.coordinators: dict[str, str] = {}  # group -> coordinator address
        self._stubs: dict[str, Any] = {}

    def _stub(self, address: str) -> Any:
        stub = self._stubs.get(address)
        if stub is None:
            channel = self.client._node(address).channel
            stub = self._stubs[address] = groups_pb2_grpc.GroupsStub(channel)  # type: ignore[no-untyped-call]
        return stub


class GroupCalls(Coordinators):
    """The Groups calls of a `Client` (threads), each sent to the group's coordinator and
    following it as it moves."""

    client: GroupsClient

    def find_coordinator(self, group: str) -> str:
        """The coordinator's address (asked of any node)."""
        req = groups_pb2.FindCoordinatorRequest(group=group)
        reply = self.client._call(
            lambda node: self._stub(node.address).FindCoordinator(
                req, timeout=self.client.attempt_timeout_s
            ),
            idempotent=True,
        )
        self.coordinators[group] = reply.address
        return str(reply.address)

    def call(
        self,
        group: str,
        fn: Callable[[Any, float], T],
        *,
        retry: RetryPolicy | None = None,
        timeout_s: float | None = None,
        retry_dead: bool = True,
    ) -> T:
        """`fn(stub, timeout_s)` on the group's coordinator, following it as it moves."""
        timeout = self.client.attempt_timeout_s if timeout_s is None else timeout_s

        def attempt() -> T:
            address = self.coordinators.get(group) or self.find_coordinator(group)
            try:
                return fn(self._stub(address), timeout)
            except grpc.RpcError as exc:
                err = from_rpc_error(exc)
                raise (dead_attempt(err, address) if retry_dead else err) from None

        return call_with_retry(
            attempt, retry or self.client.retry, lambda err: follow(err, self.coordinators, group)
        )

    # -- membership ----------------------------------------------------------------------

    def join(
        self,
        group: str,
        topics: Sequence[str],
        *,
        session_timeout_ms: int = 0,
        rebalance_timeout_ms: int = 0,
        client_id: str = "",
    ) -> tuple[Answer, int]:
        """A new member: its first answer and the session timeout granted."""
        req = join_request(group, topics, session_timeout_ms, rebalance_timeout_ms, client_id)
        reply = self.call(
            group,
            lambda stub, t: stub.JoinGroup(req, timeout=t),
            timeout_s=self.client.timeout_s,  # the coordinator answers once the group settled
            retry_dead=False,  # a second join would be a second member
        )
        return answer(reply, reply.member_id), reply.session_timeout_ms

    def heartbeat(
        self,
        group: str,
        member_id: str,
        generation: int,
        owned: Iterable[TopicPartition],
        retry: RetryPolicy | None = None,
        timeout_s: float | None = None,
    ) -> Answer:
        req = groups_pb2.HeartbeatRequest(
            group=group, member_id=member_id, generation=generation, owned=wire_tps(owned)
        )
        reply = self.call(
            group, lambda stub, t: stub.Heartbeat(req, timeout=t), retry=retry, timeout_s=timeout_s
        )
        return answer(reply, member_id)

    def leave(self, group: str, member_id: str, retry: RetryPolicy | None = None) -> None:
        req = groups_pb2.LeaveGroupRequest(group=group, member_id=member_id)
        self.call(group, lambda stub, t: stub.LeaveGroup(req, timeout=t), retry=retry)

    # -- offsets ---------------------------------------------------------------------------

    def commit(
        self,
        group: str,
        offsets: Mapping[TopicPartition, int | tuple[int, str]],
        member_id: str = "",
        generation: int = -1,
    ) -> None:
        """Commit `offsets` ((topic, partition) -> next offset, or (offset, metadata)); as a
        member, or outside membership (member_id "", generation -1)."""
        req = commit_request(group, offsets, member_id, generation)
        self.call(group, lambda stub, t: stub.CommitOffsets(req, timeout=t))

    def committed(
        self, group: str, partitions: Iterable[TopicPartition] = ()
    ) -> list[CommittedOffset]:
        req = groups_pb2.FetchCommittedOffsetsRequest(group=group, partitions=wire_tps(partitions))
        reply = self.call(group, lambda stub, t: stub.FetchCommittedOffsets(req, timeout=t))
        return committed_offsets(reply)

    # -- administration --------------------------------------------------------------------

    def list(self) -> list[GroupSummary]:
        req = groups_pb2.ListGroupsRequest()
        reply = self.client._call(
            lambda node: self._stub(node.address).ListGroups(
                req, timeout=self.client.attempt_timeout_s
            ),
            idempotent=True,
        )
        return summaries(reply)

    def describe(self, group: str) -> GroupDescription:
        req = groups_pb2.DescribeGroupRequest(group=group)
        return description(self.call(group, lambda stub, t: stub.DescribeGroup(req, timeout=t)))

    def delete(self, group: str) -> None:
        req = groups_pb2.DeleteGroupRequest(group=group)
        self.call(group, lambda stub, t: stub.DeleteGroup(req, timeout=t), retry_dead=False)
