"""A group member's state and decisions, sans I/O: the core that both `group_consumer.
GroupConsumer` (threads) and `aio_groups.AsyncGroupConsumer` (asyncio) drive. No threads,
no event loop, no gRPC, no clock: the drivers pass the time (`now`, monotonic seconds),
make the calls (JoinGroup, Heartbeat, CommitOffsets, the fetches) and report the answers.

State: the member id and generation the coordinator gave, the partitions it last assigned
(`assigned`), whether that differs from what the member consumes (`changed`), whether the
membership is lost (`lost`: UNKNOWN_MEMBER, or no heartbeat answered for a whole session),
the heartbeat interval and session the coordinator set, and when the last heartbeat was
answered and the last auto-commit made.

Rules:
- `joined(answer, session_ms, now)`: a JoinGroup answer makes the member (again); what it
  assigns is to be reconciled.
- `heartbeat(consuming)`: the heartbeat to send now, if the member is one (it reports
  what it may still be consuming: the last assignment and what it has not released yet);
  it retries for at most half the session (a member must hear within its session whether
  it still is one). `heartbeat_answered` takes its answer (unless the member changed or was
  lost meanwhile); `heartbeat_failed` marks the membership lost on UNKNOWN_MEMBER, or when
  no heartbeat was answered for a whole session.
- `needs_join()`: no member yet, or lost: drop every partition (without committing: they
  are someone else's now) and join again.
- `reconcile(consuming)`: when the assignment changed (or a reconcile failed), the
  partitions to revoke and those to add, revoked first (their offsets committed, then
  `on_revoke`), then added (from their committed offsets, then `on_assign`); `rebalanced()`
  counts it once done (the driver then heartbeats at once to tell the coordinator).
- `auto_commit_due(now)`: every `auto_commit_interval_s`, commit what was processed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Answer:
    """What a member should consume now (JoinGroup and Heartbeat answers)."""

    member_id: str
    generation: int
    partitions: frozenset[TopicPartition]
    heartbeat_interval_ms: int
    reconciling: bool


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One heartbeat to send: as `member_id` in `generation`, owning `owned`."""

    member_id: str
    generation: int
    owned: list[TopicPartition]
    session_s: float

    @property
    def deadline_ms(self) -> int:
        """Its retries' time budget: half the session."""
        return int(self.session_s * 500)

    @property
    def timeout_s(self) -> float:
        return self.session_s / 2


class Membership:
    """One group member's state (see the module doc). The threaded driver holds its lock
    around the calls its heartbeat thread and its caller's thread both make."""

    def __init__(self, auto_commit: bool, auto_commit_interval_s: float, now: float) -> None:
        self.auto_commit = auto_commit
        self.auto_commit_interval_s = auto_commit_interval_s
        self.member_id: str | None = None
        self.generation = -1
        self.assigned: frozenset[TopicPartition] = frozenset()  # as last told
        self.changed = False  # the coordinator's answer differs: reconcile
        self.lost = False  # membership lost: drop everything, join again
        self.heartbeat_ms = 3000
        self.session_ms = 10_000
        self.last_heartbeat = 0.0
        self.last_auto_commit = now
        self.rebalances = 0  # times partitions were taken or released (for tests, metrics)

    @property
    def heartbeat_interval_s(self) -> float:
        return self.heartbeat_ms / 1000

    @property
    def session_s(self) -> float:
        return self.session_ms / 1000

    def joined(self, answer: Answer, session_ms: int, now: float) -> None:
        self.member_id = answer.member_id
        self.session_ms = session_ms
        self.lost = False
        self.take(answer)
        self.changed = True
        self.last_heartbeat = now

    def take(self, answer: Answer) -> None:
        """A coordinator's answer: the generation, the interval, maybe a new assignment."""
        self.generation = answer.generation
        self.heartbeat_ms = answer.heartbeat_interval_ms or self.heartbeat_ms
        if answer.partitions != self.assigned:
            self.assigned = answer.partitions
            self.changed = True

    def owned(self, consuming: Iterable[TopicPartition]) -> list[TopicPartition]:
        """What the member may still be consuming: its last answer and what it has not
        released yet."""
        return sorted(set(self.assigned) | set(consuming))

    def heartbeat(self, consuming: Iterable[TopicPartition]) -> Heartbeat | None:
        if self.member_id is None or self.lost:
            return None
        return Heartbeat(self.member_id, self.generation, self.owned(consuming), self.session_s)

    def heartbeat_answered(self, sent: Heartbeat, answer: Answer, now: float) -> None:
        if self.member_id == sent.member_id and not self.lost:
            self.last_heartbeat = now
            self.take(answer)

    def heartbeat_failed(self, sent: Heartbeat, unknown_member: bool, now: float) -> None:
        if unknown_member or now - self.last_heartbeat > sent.session_s:
            self.mark_lost(sent.member_id)

    def mark_lost(self, member: str) -> None:
        if self.member_id == member:
            self.lost = True
            self.changed = True

    def needs_join(self) -> bool:
        return self.lost or self.member_id is None

    def reconcile(
        self, consuming: Iterable[TopicPartition]
    ) -> tuple[set[TopicPartition], set[TopicPartition]] | None:
        """(revoked, added), in that order of work; None: nothing to reconcile now."""
        have = set(consuming)
        if not self.changed and have == self.assigned:
            return None
        self.changed = False
        if self.lost:
            return None
        return have - self.assigned, set(self.assigned) - have

    def rebalanced(self) -> None:
        self.rebalances += 1

    def auto_commit_due(self, now: float) -> bool:
        if not self.auto_commit or now - self.last_auto_commit < self.auto_commit_interval_s:
            return False
        self.last_auto_commit = now
        return True


class Member:
    """The member's id, generation and rebalance count of a consumer's core (`_member`), as
    its attributes (both consumers inherit this view)."""

    _member: Membership

    @property
    def member_id(self) -> str | None:
        return self._member.member_id

    @property
    def generation(self) -> int:
        return self._member.generation

    @property
    def rebalances(self) -> int:
        """Times partitions were taken or released (for tests, metrics)."""
        return self._member.rebalances
