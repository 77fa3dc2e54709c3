"""Kafka's classic consumer-group protocol: the rules, pure (no I/O, no clock, no asyncio).

The group coordinator side of JoinGroup / SyncGroup / Heartbeat / LeaveGroup as Kafka's
brokers run it (`ClassicGroup` of Kafka's group coordinator), for the groups this node
coordinates. Every call gets the time (`now_ms`, monotonic); `expire(now_ms)` runs what
is due (sessions, rebalance and sync timeouts) from ONE timer that the driver
(`classic_groups.py`) sets at `next_deadline_ms()`.

States of a group (Kafka's names, as DescribeGroups / ListGroups show them)::

    Empty                no members (pending ones may exist: MEMBER_ID_REQUIRED handed out)
    PreparingRebalance   waiting for every member to (re)join, up to the rebalance timeout
    CompletingRebalance  joined: every member got its JoinGroup answer (the leader with all
                         members' metadata); waiting for the leader's SyncGroup
    Stable               the leader's assignment was handed out by SyncGroup

A JoinGroup or SyncGroup that must wait is `Parked`: its answer is queued in `outbox`
(`Delivery`) when the rebalance moves on, and the driver hands it to the waiting request.
Every wait ends by a deadline of this module (the rebalance timeout, the sync timeout), so
a parked request never waits forever.

Membership is memory only, as in Kafka: a coordinator that moves forgets it, and members
rejoin the new one. Committed offsets are not kept here (`check_commit` only fences
commits by generation; replog's groups store them).

Bounds (`ClassicLimits`): groups on this node, members per group (pending ones included),
bytes of one member's protocol metadata or assignment, and bytes of all metadata and
assignments held. A deadline heap holds one entry per deadline set (lazy deletion: an
entry that no longer matches its member or group is skipped when it comes due), so it
holds at most a few entries per member per session timeout.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from replog.kafka.errors import ErrorCode

E = ErrorCode
EMPTY: Final = "Empty"
PREPARING: Final = "PreparingRebalance"
COMPLETING: Final = "CompletingRebalance"
STABLE: Final = "Stable"
DEAD: Final = "Dead"  # a group this node does not hold (DescribeGroups' answer)

Protocols = tuple[tuple[str, bytes], ...]  # (assignor name, its subscription metadata)


@dataclass(frozen=True, slots=True)
class ClassicLimits:
    groups_max: int = 10_000  # Kafka groups held by this node
    members_max: int = 1000  # per group, pending members included
    member_bytes_max: int = 256 * 1024  # one member's protocol metadata, or its assignment
    bytes_max: int = 64 * 1024 * 1024  # all metadata and assignments held by this node
    session_timeout_ms_min: int = 1000
    session_timeout_ms_max: int = 300_000
    rebalance_timeout_ms_max: int = 1_800_000

    def __post_init__(self) -> None:
        assert self.groups_max >= 1 and self.members_max >= 1
        assert 1 <= self.member_bytes_max <= self.bytes_max
        assert 1 <= self.session_timeout_ms_min <= self.session_timeout_ms_max
        assert self.rebalance_timeout_ms_max >= 1


@dataclass(slots=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: Protocols
    deadline_ms: int  # of its session
    joining: bool = False  # a JoinGroup of it is parked
    syncing: bool = False  # a SyncGroup of it is parked
    assignment: bytes = b""

    @property
    def held_bytes(self) -> int:
        return sum(len(n) + len(m) for n, m in self.protocols) + len(self.assignment)

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for n, m in self.protocols if n == protocol), b"")


@dataclass(slots=True)
class Group:
    name: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # in join order
    pending: dict[str, int] = field(default_factory=dict)  # member id -> deadline_ms
    phase_deadline_ms: int | None = None  # of PreparingRebalance / CompletingRebalance


@dataclass(frozen=True, slots=True)
class JoinReply:
    error: ErrorCode
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, bytes], ...] = ()  # the leader's: (member id, metadata)


@dataclass(frozen=True, slots=True)
class SyncReply:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class Parked:
    """The answer comes later, as a `Delivery` to (group, member_id, kind)."""

    member_id: str


@dataclass(frozen=True, slots=True)
class Delivery:
    group: str
    member_id: str
    reply: JoinReply | SyncReply


class ClassicGroups:
    def __init__(self, limits: ClassicLimits) -> None:
        self.limits = limits
        self.groups: dict[str, Group] = {}
        self.bytes_held = 0
        self.outbox: list[Delivery] = []
        self._heap: list[tuple[int, int, str, str]] = []  # (deadline, seq, group, member|"")
        self._seq = 0

    # -- the driver's view -------------------------------------------------------------------

    def take_outbox(self) -> list[Delivery]:
        out, self.outbox = self.outbox, []
        return out

    def next_deadline_ms(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def drop(self, name: str) -> None:
        """Forget a group (its coordinator moved): parked requests get NOT_COORDINATOR."""
        group = self.groups.pop(name, None)
        if group is None:
            return
        for m in group.members.values():
            self.bytes_held -= m.held_bytes
            if m.joining:
                self._deliver(group, m.member_id, JoinReply(E.NOT_COORDINATOR, m.member_id))
            if m.syncing:
                self._deliver(group, m.member_id, SyncReply(E.NOT_COORDINATOR))

    # -- JoinGroup ---------------------------------------------------------------------------

    def join(
        self,
        name: str,
        member_id: str,
        *,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Protocols,
        require_known_member_id: bool,
        fresh_member_id: str,
        now_ms: int,
    ) -> JoinReply | Parked:
        lim = self.limits
        if not lim.session_timeout_ms_min <= session_timeout_ms <= lim.session_timeout_ms_max:
            return JoinReply(E.INVALID_SESSION_TIMEOUT, member_id)
        if not 0 < rebalance_timeout_ms <= lim.rebalance_timeout_ms_max:
            return JoinReply(E.INVALID_SESSION_TIMEOUT, member_id)
        if not protocol_type or not protocols:
            return JoinReply(E.INCONSISTENT_GROUP_PROTOCOL, member_id)
        size = sum(len(n) + len(m) for n, m in protocols)
        if size > lim.member_bytes_max:
            return JoinReply(E.INVALID_REQUEST, member_id)
        group = self.groups.get(name)
        if group is None:
            if member_id:  # a member of a group this node does not hold (any more)
                return JoinReply(E.UNKNOWN_MEMBER_ID, member_id)
            if len(self.groups) >= lim.groups_max:
                return JoinReply(E.GROUP_MAX_SIZE_REACHED, member_id)
            group = self.groups[name] = Group(name)
        elif group.members and (
            protocol_type != group.protocol_type or not self._common(group, protocols)
        ):
            return JoinReply(E.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if not member_id or member_id in group.pending:
            return self._join_new(
                group,
                member_id or fresh_member_id,
                Member(
                    member_id or fresh_member_id,
                    client_id,
                    client_host,
                    session_timeout_ms,
                    rebalance_timeout_ms,
                    protocols,
                    deadline_ms=now_ms + session_timeout_ms,
                ),
                protocol_type,
                require_known_member_id and not member_id,
                now_ms,
            )
        member = group.members.get(member_id)
        if member is None:
            return JoinReply(E.UNKNOWN_MEMBER_ID, member_id)
        return self._join_known(group, member, protocols, now_ms)

    def _join_new(
        self,
        group: Group,
        member_id: str,
        member: Member,
        protocol_type: str,
        id_required: bool,
        now_ms: int,
    ) -> JoinReply | Parked:
        known = member_id in group.pending
        if not known and len(group.members) + len(group.pending) >= self.limits.members_max:
            self._forget_if_empty(group)
            return JoinReply(E.GROUP_MAX_SIZE_REACHED, "")
        if self.bytes_held + member.held_bytes > self.limits.bytes_max:
            self._forget_if_empty(group)
            return JoinReply(E.GROUP_MAX_SIZE_REACHED, "")
        if id_required:  # v4+: the member learns its id, and joins again with it
            deadline = now_ms + member.session_timeout_ms
            group.pending[member_id] = deadline
            self._push(deadline, group.name, member_id)
            return JoinReply(E.MEMBER_ID_REQUIRED, member_id)
        group.pending.pop(member_id, None)
        if not group.members:
            group.protocol_type = protocol_type
        member.joining = True
        group.members[member_id] = member
        self.bytes_held += member.held_bytes
        self._push(member.deadline_ms, group.name, member_id)
        if group.state == PREPARING:
            self._maybe_complete_join(group, now_ms)
        else:
            self._prepare_rebalance(group, now_ms)
        return Parked(member_id)

    def _join_known(
        self, group: Group, member: Member, protocols: Protocols, now_ms: int
    ) -> JoinReply | Parked:
        changed = protocols != member.protocols
        if group.state == COMPLETING and not changed:
            return self._join_reply(group, member.member_id)  # its answer was lost: again
        if group.state == STABLE and not changed and member.member_id != group.leader:
            return self._join_reply(group, member.member_id)
        self.bytes_held -= member.held_bytes
        member.protocols = protocols
        self.bytes_held += member.held_bytes
        member.joining = True
        self._touch(group, member, now_ms)
        if group.state == PREPARING:
            self._maybe_complete_join(group, now_ms)
        else:
            self._prepare_rebalance(group, now_ms)
        return Parked(member.member_id)

    # -- SyncGroup ---------------------------------------------------------------------------

    def sync(
        self,
        name: str,
        member_id: str,
        generation: int,
        *,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Iterable[tuple[str, bytes]],
        now_ms: int,
    ) -> SyncReply | Parked:
        group = self.groups.get(name)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return SyncReply(E.UNKNOWN_MEMBER_ID)
        if generation != group.generation:
            return SyncReply(E.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncReply(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.state == PREPARING:
            return SyncReply(E.REBALANCE_IN_PROGRESS)
        self._touch(group, member, now_ms)
        if group.state == STABLE:
            return self._sync_reply(group, member)
        assert group.state == COMPLETING, group.state
        if member_id == group.leader:
            given = dict(assignments)
            if any(len(a) > self.limits.member_bytes_max for a in given.values()):
                return SyncReply(E.INVALID_REQUEST)
            added = sum(
                len(given.get(m, b"")) - len(x.assignment) for m, x in group.members.items()
            )
            if self.bytes_held + added > self.limits.bytes_max:
                return SyncReply(E.GROUP_MAX_SIZE_REACHED)
            member.syncing = True
            for m in group.members.values():  # members it left out get nothing to consume
                m.assignment = given.get(m.member_id, b"")
            self.bytes_held += added
            group.state = STABLE
            group.phase_deadline_ms = None
            for m in group.members.values():
                if m.syncing:
                    m.syncing = False
                    self._deliver(group, m.member_id, self._sync_reply(group, m))
            return Parked(member_id)
        member.syncing = True
        return Parked(member_id)

    # -- Heartbeat, LeaveGroup ---------------------------------------------------------------

    def heartbeat(self, name: str, member_id: str, generation: int, now_ms: int) -> ErrorCode:
        group = self.groups.get(name)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return E.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return E.ILLEGAL_GENERATION
        self._touch(group, member, now_ms)
        return E.REBALANCE_IN_PROGRESS if group.state == PREPARING else E.NONE

    def leave(self, name: str, member_ids: Iterable[str], now_ms: int) -> list[ErrorCode]:
        """One code per member id, in order."""
        out = []
        for member_id in member_ids:
            group = self.groups.get(name)
            if group is not None and group.pending.pop(member_id, None) is not None:
                if group.state == PREPARING:
                    self._maybe_complete_join(group, now_ms)
                self._forget_if_empty(group)
                out.append(E.NONE)
            elif group is None or member_id not in group.members:
                out.append(E.UNKNOWN_MEMBER_ID)
            else:
                self._remove(group, member_id, now_ms)
                out.append(E.NONE)
        return out

    # -- OffsetCommit's fence ----------------------------------------------------------------

    def check_commit(self, name: str, member_id: str, generation: int) -> ErrorCode | None:
        """Kafka's check of a commit against the group's generation: an error code, NONE (a
        member's commit at the current generation), or None: not a commit of this
        protocol's group (no member id, generation < 0, no members here): replog's own
        rules apply."""
        group = self.groups.get(name)
        if group is None or not group.members:
            if not member_id and generation < 0:
                return None
            return E.UNKNOWN_MEMBER_ID if member_id else E.ILLEGAL_GENERATION
        if group.state == COMPLETING:
            return E.REBALANCE_IN_PROGRESS
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return E.ILLEGAL_GENERATION
        return E.NONE

    # -- deadlines ---------------------------------------------------------------------------

    def expire(self, now_ms: int) -> list[tuple[str, str, str]]:
        """Run every deadline due at `now_ms`; (group, member id, why) of removed members."""
        removed: list[tuple[str, str, str]] = []
        while self._heap and self._heap[0][0] <= now_ms:
            deadline, _, name, member_id = heapq.heappop(self._heap)
            group = self.groups.get(name)
            if group is None:
                continue
            if not member_id:
                if group.phase_deadline_ms == deadline:
                    removed += self._phase_timeout(group, now_ms)
                continue
            if group.pending.get(member_id) == deadline:
                del group.pending[member_id]
                removed.append((name, member_id, "pending_timeout"))
                if group.state == PREPARING:
                    self._maybe_complete_join(group, now_ms)
                self._forget_if_empty(group)
                continue
            member = group.members.get(member_id)
            if member is None or member.deadline_ms != deadline:
                continue
            if member.joining or member.syncing:  # waiting on the group: kept alive
                self._touch(group, member, now_ms)
                continue
            self._remove(group, member_id, now_ms)
            removed.append((name, member_id, "session_timeout"))
        return removed

    def _phase_timeout(self, group: Group, now_ms: int) -> list[tuple[str, str, str]]:
        group.phase_deadline_ms = None
        if group.state == PREPARING:  # the rebalance timeout: on without the absent ones
            gone = [m for m, x in group.members.items() if not x.joining]
            group.pending.clear()
            for m in gone:
                self._drop_member(group, m)
            self._complete_join(group, now_ms)
            self._forget_if_empty(group)
            return [(group.name, m, "rebalance_timeout") for m in gone]
        if group.state == COMPLETING:  # the leader never synced: out with who did not sync
            gone = [m for m, x in group.members.items() if not x.syncing]
            for m in gone:
                self._drop_member(group, m)
            self._prepare_rebalance(group, now_ms)
            self._forget_if_empty(group)
            return [(group.name, m, "sync_timeout") for m in gone]
        return []

    # -- internals ---------------------------------------------------------------------------

    def _push(self, deadline_ms: int, name: str, member_id: str) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (deadline_ms, self._seq, name, member_id))

    def _touch(self, group: Group, member: Member, now_ms: int) -> None:
        member.deadline_ms = now_ms + member.session_timeout_ms
        self._push(member.deadline_ms, group.name, member.member_id)

    def _deliver(self, group: Group, member_id: str, reply: JoinReply | SyncReply) -> None:
        self.outbox.append(Delivery(group.name, member_id, reply))

    @staticmethod
    def _common(group: Group, protocols: Protocols) -> set[str]:
        names = {n for n, _ in protocols}
        for m in group.members.values():
            names &= {n for n, _ in m.protocols}
        return names

    def _drop_member(self, group: Group, member_id: str) -> None:
        """Out of the group, its parked requests answered UNKNOWN_MEMBER_ID."""
        member = group.members.pop(member_id)
        self.bytes_held -= member.held_bytes
        if member.joining:
            self._deliver(group, member_id, JoinReply(E.UNKNOWN_MEMBER_ID, member_id))
        if member.syncing:
            self._deliver(group, member_id, SyncReply(E.UNKNOWN_MEMBER_ID))
        if group.leader == member_id:
            group.leader = None

    def _remove(self, group: Group, member_id: str, now_ms: int) -> None:
        self._drop_member(group, member_id)
        if group.state == PREPARING:
            self._maybe_complete_join(group, now_ms)
        else:
            self._prepare_rebalance(group, now_ms)
        self._forget_if_empty(group)

    def _forget_if_empty(self, group: Group) -> None:
        if group.state == EMPTY and not group.members and not group.pending:
            del self.groups[group.name]

    def _prepare_rebalance(self, group: Group, now_ms: int) -> None:
        if group.state == COMPLETING:  # an assignment under way is void
            for m in group.members.values():
                if m.syncing:
                    m.syncing = False
                    self._deliver(group, m.member_id, SyncReply(E.REBALANCE_IN_PROGRESS))
        for m in group.members.values():
            self.bytes_held -= len(m.assignment)
            m.assignment = b""
        group.state = PREPARING
        timeout_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.phase_deadline_ms = now_ms + timeout_ms
        self._push(group.phase_deadline_ms, group.name, "")
        self._maybe_complete_join(group, now_ms)

    def _maybe_complete_join(self, group: Group, now_ms: int) -> None:
        assert group.state == PREPARING, group.state
        if group.pending or not all(m.joining for m in group.members.values()):
            return
        self._complete_join(group, now_ms)

    def _complete_join(self, group: Group, now_ms: int) -> None:
        group.generation += 1
        group.phase_deadline_ms = None
        if not group.members:
            group.state = EMPTY
            group.protocol_type = group.protocol_name = group.leader = None
            return
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.protocol_name = self._vote(group)
        group.state = COMPLETING
        timeout_ms = max(m.rebalance_timeout_ms for m in group.members.values())
        group.phase_deadline_ms = now_ms + timeout_ms
        self._push(group.phase_deadline_ms, group.name, "")
        for m in group.members.values():
            m.joining = False
            self._touch(group, m, now_ms)
            self._deliver(group, m.member_id, self._join_reply(group, m.member_id))

    @staticmethod
    def _vote(group: Group) -> str:
        """Kafka's vote: each member names the first protocol of its list that every member
        supports; the most named wins (ties: the leader's preference)."""
        members = list(group.members.values())
        common = ClassicGroups._common(group, members[0].protocols)
        assert common, "members were admitted with a protocol in common"
        votes: dict[str, int] = {}
        for m in members:
            choice = next(n for n, _ in m.protocols if n in common)
            votes[choice] = votes.get(choice, 0) + 1
        leader = group.members[group.leader or members[0].member_id]
        order = [n for n, _ in leader.protocols if n in votes]
        return max(order, key=lambda n: votes[n])  # max keeps the first of equal counts

    def _join_reply(self, group: Group, member_id: str) -> JoinReply:
        members: tuple[tuple[str, bytes], ...] = ()
        if member_id == group.leader:
            members = tuple(
                (m.member_id, m.metadata(group.protocol_name)) for m in group.members.values()
            )
        return JoinReply(
            E.NONE,
            member_id,
            group.generation,
            group.protocol_type,
            group.protocol_name,
            group.leader or "",
            members,
        )

    def _sync_reply(self, group: Group, member: Member) -> SyncReply:
        return SyncReply(E.NONE, group.protocol_type, group.protocol_name, member.assignment)
