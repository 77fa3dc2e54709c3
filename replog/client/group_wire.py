"""The results of the Groups calls as plain frozen values, and their wire conversions (pure).

Shared by the threaded and the asyncio twins (`groups`, `aio_groups`) through the calls'
builders (`group_rpcs`): `CommittedOffset`, `GroupSummary`, `GroupDescription` (its
`MemberInfo`s and `PartitionLag`s); which errors move a group to another coordinator
(`follow`), and which attempt without answer is retried (`dead_attempt`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from replog.client.member_rules import Answer
from replog.client.routing import unreachable_error
from replog.errors import (
    DeadlineExceededError,
    LeaderUnknownError,
    NotCoordinatorError,
    ReplogError,
    UnavailableError,
)
from replog.v1 import groups_pb2

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
