"""The groups of one coordinator shard: membership, assignment, committed offsets. Pure.

No I/O and no clock: every call gets the time (`now_ms`: a monotonic clock for sessions;
`wall_ms`: wall-clock time for commit times and retention) and, where assignment needs
it, the partition count of a topic (`Counts`: 0 for a topic that does not exist). The
shard (`shard.py`) owns one `Groups` per `__consumer_offsets` partition it leads and calls
it from the event loop, so each call runs without interruption.

Committed offsets change only by `apply` of a record read back from the replicated log,
in log order (`records`), so that they are a function of the log: a new coordinator
rebuilds them by applying the same records. Membership is memory only (as Kafka's): after
a failover the members find the new coordinator, which does not know them (UNKNOWN_MEMBER),
and join again.

Membership, incremental ("cooperative"):

* `join` adds a member and starts a new generation: the target assignment is computed
  again (`assignor.assign`, sticky).
* Each member `held`s the partitions handed to it that it has not released. A partition is
  handed to its target member only while no other member holds it; `heartbeat(owned)`
  releases what the member no longer reports. So no partition is ever held by two members.
* A member that does not heartbeat for its session timeout, or that still holds a revoked
  partition (held, not in its target) after its rebalance timeout, is removed by `expire`;
  what it held is free at once.
* Commits are fenced (`check_commit`): only a known member, at the generation it was last
  told (or the one before: an answer may cross a commit), for partitions it holds; or, with
  no member id, only while the group has no members.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from replog.errors import (
    GroupNotEmptyError,
    IllegalGenerationError,
    PartitionNotAssignedError,
    TooManyGroupsError,
    TooManyMembersError,
    UnknownGroupError,
    UnknownMemberError,
)
from replog.server.groups import records
from replog.server.groups.assignor import TopicPartition, assign

Counts = Callable[[str], int]  # a topic's partition count; 0: it does not exist

EMPTY = "EMPTY"
STABLE = "STABLE"
RECONCILING = "RECONCILING"


@dataclass(frozen=True, slots=True)
class Committed:
    offset: int
    metadata: str
    commit_time_ms: int
    topic_id: int


@dataclass(slots=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    topics: tuple[str, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    last_heartbeat_ms: int
    generation: int = 0  # the generation last told to this member
    previous_generation: int = 0
    held: set[TopicPartition] = field(default_factory=set)
    revoking_since_ms: int | None = None  # holds a partition of another's target since


@dataclass(slots=True)
class Group:
    name: str
    empty_since_ms: int  # wall clock; when it last had no members (or was loaded)
    generation: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    holders: dict[TopicPartition, str] = field(default_factory=dict)
    offsets: dict[TopicPartition, Committed] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # of subscribed topics, at the target
    last_record_ms: int = 0  # time_ms of the last record of this group (wall clock)

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        stable = all(
            m.held == self.target.get(m.member_id, frozenset()) for m in self.members.values()
        )
        return STABLE if stable else RECONCILING

    @property
    def last_commit_ms(self) -> int:
        return max((c.commit_time_ms for c in self.offsets.values()), default=0)


@dataclass(frozen=True, slots=True)
class Answer:
    """What a member should consume now."""

    member_id: str
    generation: int
    partitions: tuple[TopicPartition, ...]
    reconciling: bool  # not yet its whole target: heartbeat again soon


@dataclass(frozen=True, slots=True)
class Removed:
    group: str
    member_id: str
    why: str  # "session_timeout" | "rebalance_timeout"


@dataclass(frozen=True, slots=True)
class GroupsLimits:
    groups_max: int = 10_000
    members_max: int = 1000


class Groups:
    def __init__(self, limits: GroupsLimits, groups_held: Callable[[], int] | None = None) -> None:
        self.limits = limits
        self.groups: dict[str, Group] = {}
        # Groups held by every shard of the node (the limit is per node); default: this one.
        self._groups_held = groups_held or (lambda: len(self.groups))

    # -- committed offsets (from the log) ----------------------------------------------------

    def apply(self, record: records.Record, wall_ms: int) -> None:
        """Apply a committed record of the log. Total: never raises."""
        if isinstance(record, records.SnapshotEnd):
            return  # the snapshot's commits restated everything already
        group = self.groups.get(record.group)
        if isinstance(record, records.Commit):
            if group is None:
                group = self.groups[record.group] = Group(record.group, wall_ms)
            for o in record.offsets:
                group.offsets[(o.topic, o.partition)] = Committed(
                    o.offset, o.metadata, o.commit_time_ms, o.topic_id
                )
            group.last_record_ms = max(group.last_record_ms, record.time_ms)
        elif group is not None:
            group.offsets.clear()
            group.last_record_ms = record.time_ms
            if not group.members:
                del self.groups[record.group]

    def committed(
        self, name: str, wanted: Iterable[TopicPartition], topic_ids: Callable[[str], int]
    ) -> dict[TopicPartition, Committed]:
        """The group's offsets of `wanted` (all of them when empty) committed for the topics'
        current incarnations (`topic_ids`: 0 for a topic that does not exist)."""
        group = self.groups.get(name)
        if group is None:
            return {}
        keys = list(wanted) or sorted(group.offsets)
        out = {}
        for tp in keys:
            c = group.offsets.get(tp)
            if c is not None and c.topic_id == topic_ids(tp[0]):
                out[tp] = c
        return out

    # -- checks before writing ---------------------------------------------------------------

    def check_commit(
        self, name: str, member_id: str, generation: int, tps: Iterable[TopicPartition]
    ) -> None:
        """Raise the typed error a commit must get, or return: it may be written."""
        group = self.groups.get(name)
        if not member_id:
            if group is not None and group.members:
                raise GroupNotEmptyError(
                    f"group {name!r} has {len(group.members)} member(s): offsets are "
                    "committed by its members (stop them to reset its offsets)",
                    group=name,
                )
            if group is None:
                self._check_room(name)
            return
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            raise UnknownMemberError(
                f"member {member_id!r} is not in group {name!r} (it left or was removed): "
                "join again",
                group=name,
            )
        if generation not in (member.generation, member.previous_generation):
            raise IllegalGenerationError(
                f"generation {generation} is not the member's ({member.generation}): "
                "heartbeat, then commit with the new generation",
                group=name,
                generation=member.generation,
            )
        missing = sorted(tp for tp in tps if tp not in member.held)
        if missing:
            shown = ", ".join(f"{t}/{p}" for t, p in missing[:5])
            raise PartitionNotAssignedError(
                f"member {member_id!r} does not hold {shown}"
                + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""),
                group=name,
            )

    def check_delete(self, name: str) -> None:
        group = self.groups.get(name)
        if group is None:
            raise UnknownGroupError(f"group {name!r} does not exist", group=name)
        if group.members:
            raise GroupNotEmptyError(
                f"group {name!r} has {len(group.members)} member(s): stop them first", group=name
            )

    def _check_room(self, name: str) -> None:
        if self._groups_held() >= self.limits.groups_max:
            raise TooManyGroupsError(
                f"this coordinator holds {self.limits.groups_max} groups; group {name!r} is "
                "refused (delete unused groups, or raise groups_max)",
                limit="groups_max",
                limit_value=self.limits.groups_max,
            )

    # -- membership --------------------------------------------------------------------------

    def join(
        self,
        name: str,
        member: Member,
        now_ms: int,
        wall_ms: int,
        counts: Counts,
    ) -> Answer:
        group = self.groups.get(name)
        if group is None:
            self._check_room(name)
            group = self.groups[name] = Group(name, wall_ms)
        elif len(group.members) >= self.limits.members_max:
            raise TooManyMembersError(
                f"group {name!r} has {self.limits.members_max} members",
                limit="group_members_max",
                limit_value=self.limits.members_max,
            )
        assert member.member_id not in group.members, member.member_id
        member.last_heartbeat_ms = now_ms
        group.members[member.member_id] = member
        self._new_generation(group, now_ms, counts)
        return self._reconcile(group, member, now_ms)

    def heartbeat(
        self,
        name: str,
        member_id: str,
        owned: Iterable[TopicPartition],
        now_ms: int,
        counts: Counts,
    ) -> Answer:
        member = self._member(name, member_id)
        group = self.groups[name]
        member.last_heartbeat_ms = now_ms
        reported = set(owned)
        for tp in member.held - reported:  # released
            self._release(group, member, tp)
        if any(counts(t) != group.counts.get(t, 0) for t in group.counts):
            self._new_generation(group, now_ms, counts)  # a topic was created, grew, went
        return self._reconcile(group, member, now_ms)

    def leave(self, name: str, member_id: str, now_ms: int, wall_ms: int, counts: Counts) -> None:
        self._member(name, member_id)
        self._remove(self.groups[name], member_id, now_ms, wall_ms, counts)

    def expire(self, now_ms: int, wall_ms: int, counts: Counts) -> list[Removed]:
        """Remove members past their session timeout or, holding a revoked partition, past
        their rebalance timeout."""
        removed = []
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                why = None
                if now_ms - member.last_heartbeat_ms > member.session_timeout_ms:
                    why = "session_timeout"
                elif (
                    member.revoking_since_ms is not None
                    and now_ms - member.revoking_since_ms > member.rebalance_timeout_ms
                ):
                    why = "rebalance_timeout"
                if why is not None:
                    self._remove(group, member.member_id, now_ms, wall_ms, counts)
                    removed.append(Removed(group.name, member.member_id, why))
        return removed

    def expired_groups(self, wall_ms: int, retention_ms: int) -> list[str]:
        """Groups with no members whose offsets are past retention: no commit, and no member,
        for `retention_ms`."""
        return sorted(
            g.name
            for g in self.groups.values()
            if not g.members
            and g.offsets
            and wall_ms - max(g.last_commit_ms, g.empty_since_ms) > retention_ms
        )

    def live_offsets(
        self, name: str, topic_ids: Callable[[str], int]
    ) -> tuple[records.OffsetEntry, ...]:
        """The group's offsets of the topics' current incarnations, as committed (what a
        refresh or a snapshot restates)."""
        committed = self.committed(name, (), topic_ids)
        return tuple(
            records.OffsetEntry(t, c.topic_id, p, c.offset, c.metadata, c.commit_time_ms)
            for (t, p), c in sorted(committed.items())
        )

    def stale_records(self, wall_ms: int, age_ms: int) -> list[str]:
        """Groups whose newest record is older than `age_ms` (their offsets are rewritten
        before log retention can drop them)."""
        return sorted(
            g.name
            for g in self.groups.values()
            if g.offsets and wall_ms - g.last_record_ms > age_ms
        )

    # -- internals ---------------------------------------------------------------------------

    def _member(self, name: str, member_id: str) -> Member:
        group = self.groups.get(name)
        member = None if group is None else group.members.get(member_id)
        if member is None:
            raise UnknownMemberError(
                f"member {member_id!r} is not in group {name!r} (it left or was removed): "
                "join again",
                group=name,
            )
        return member

    def _remove(
        self, group: Group, member_id: str, now_ms: int, wall_ms: int, counts: Counts
    ) -> None:
        member = group.members.pop(member_id)
        for tp in list(member.held):
            self._release(group, member, tp)
        group.target.pop(member_id, None)
        if group.members:
            self._new_generation(group, now_ms, counts)
            return
        group.generation += 1
        group.target.clear()
        group.counts.clear()
        group.empty_since_ms = wall_ms
        if not group.offsets:
            del self.groups[group.name]

    def _release(self, group: Group, member: Member, tp: TopicPartition) -> None:
        member.held.discard(tp)
        if group.holders.get(tp) == member.member_id:
            del group.holders[tp]

    def _new_generation(self, group: Group, now_ms: int, counts: Counts) -> None:
        group.generation += 1
        topics = {t for m in group.members.values() for t in m.topics}
        group.counts = {t: counts(t) for t in sorted(topics)}
        group.target = assign(
            {m.member_id: m.topics for m in group.members.values()},
            group.counts,
            {m.member_id: m.held for m in group.members.values()},
        )
        for member in group.members.values():
            self._note_revocations(group, member, now_ms)

    def _note_revocations(self, group: Group, member: Member, now_ms: int) -> None:
        revoking = member.held - group.target.get(member.member_id, frozenset())
        if not revoking:
            member.revoking_since_ms = None
        elif member.revoking_since_ms is None:
            member.revoking_since_ms = now_ms

    def _reconcile(self, group: Group, member: Member, now_ms: int) -> Answer:
        target = group.target.get(member.member_id, frozenset())
        for tp in sorted(target - member.held):
            if tp not in group.holders:  # free: nobody else may still consume it
                group.holders[tp] = member.member_id
                member.held.add(tp)
        self._note_revocations(group, member, now_ms)
        if member.generation != group.generation:
            member.previous_generation = member.generation
            member.generation = group.generation
        now = member.held & target
        return Answer(member.member_id, member.generation, tuple(sorted(now)), now != target)
