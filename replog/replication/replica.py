"""The replication state machine of one partition replica (pull-based Raft, KIP-595 style).

Pure logic in the style of etcd's raft: no I/O, no clock, no asyncio. The driver calls an
input method and performs the returned outputs in order (see `outputs.py`):

* `start()`: once, after construction from durable state (may persist repairs).
* `tick(now_ms)`: time passed (timers: election, fetch retry, long-poll expiry,
  BeginEpoch retry, check-quorum).
* `receive(message, now_ms)`: a message from another replica.
* `append(request_id, values, acks, now_ms, producer)`: a client Append on this replica
  (`producer`: an idempotent producer's batch, deduplicated through `self.producers`).
* `flushed(offset, now_ms)`: every offset below `offset` is now fsynced.
* `log_start_advanced(offset, now_ms)`: retention deleted every offset below `offset`.
* `campaign(now_ms)`: start an election now (tests, single node).
* `transfer_leadership(target, now_ms)`: a leader hands its partition to voter `target`.
* `change_membership(request_id, voters, observers, now_ms)`: a leader changes the
  partition's membership, one voter at a time (see `change_membership`).
* `wake(node, now_ms)`: the liveness of peer node `node` changed (silent, restarted,
  reconnected): what is quiet about it wakes.

**Quiescence** (`roles/quiet.py`, with `quiet_fetch_wait_ms` and a node `liveness`): once
a follower holds the leader's whole log and HW, the leader holds its next fetch for
`quiet_fetch_wait_ms` and the follower neither fetches again nor campaigns in that time
while its leader's node is heard; the node's liveness wakes both sides when that changes.
Timers only: votes, logs and the HW rule are untouched.

**Membership** (`membership.py`, Raft thesis 4.1-4.2, single-server changes): the leader
appends a membership record (a control record); every replica uses the latest membership of
its log, committed or not, for everything: who votes and campaigns, whose votes and
pre-votes count, HW and check-quorum (the leader's voters), whom the leader sends to. A
truncation that removes the record reverts to the membership before it. A replica in
neither set is passive: it never votes, never campaigns, and the leader ignores its fetches
(it may go on asking, and is told nothing).

**Leadership transfer** (Raft thesis 3.10): the leader stops taking appends (they fail
NOT_LEADER naming the target), waits until the target holds its whole log and the HW is at
the LEO (every waiting acks=all answered), then sends `TimeoutNow`; the target starts an
election at once in the next epoch (no pre-vote) and wins with the most up-to-date log.
If that has not happened within `election_timeout_ms_max`, the transfer is abandoned and
the leader takes appends again.

**Pre-vote** (Raft thesis 9.6, KIP-996): when its election timeout passes, a voter first
asks the others whether they *would* vote for it in the next epoch (`VoteRequest.pre_vote`),
changing nothing; it increments its epoch and campaigns only once a majority said yes. A
voter says yes only if it has not heard from a live leader within `election_timeout_ms_min`
and the asker's log is at least as up to date. So a node that was cut off (or lost its
state) does not depose a healthy leader when it comes back; a leader asked by one of its
voters answers with `BeginEpoch` too, so that a voter that lost track of it finds it again.

An **observer** (in the current membership's `observers`) is a follower that never votes
and never campaigns: it fetches, appends, truncates and sets its HW like a follower, and its
role stays FOLLOWER.
When no leader answers it within its election timeout it forgets the leader (leader
unknown) and waits: a leader keeps sending `BeginEpoch` to every observer that has not
fetched in its epoch or has gone quiet for `election_timeout_ms_min`, and a `Fenced` answer
also names the leader. The leader tracks observers' progress (long polls, BeginEpoch) but
counts only voters toward HW and check-quorum.

The core owns the epoch history and a view of the log (LEO, flushed offset, HW); the records
themselves stay with the driver. Randomness comes only from the injected `rng`.

**Layout** (`roles/`, as etcd's raft): `Replica` is the public face over a `roles.core.Core`
(the state); messages are dispatched by a table per role (`roles/steps.py`: follower,
pre-candidate, candidate, leader), with the handlers in `roles/voting.py`,
`roles/following.py` and `roles/leading.py`, and the role changes in
`roles/transitions.py`.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence

from replog.replication.config import ReplicaConfig
from replog.replication.epochs import EpochHistory, EpochStart
from replog.replication.membership import Membership, MembershipEntry, MembershipHistory
from replog.replication.messages import Message
from replog.replication.outputs import (
    Acks,
    Output,
    PersistEpochHistory,
    PersistMembershipHistory,
)
from replog.replication.producers import ProducerBatch, ProducerTable
from replog.replication.roles import leading, quiet, steps
from replog.replication.roles.core import Core, Liveness, Role, Step
from replog.replication.roles.following import send_fetch
from replog.replication.roles.transitions import start_election
from replog.replication.stale import Stale
from replog.replication.state import QuorumState

__all__ = ["Replica", "Role", "Step"]


class Replica:
    """One replica of one partition. See the module docstring for the inputs."""

    def __init__(
        self,
        config: ReplicaConfig,
        rng: random.Random,
        now_ms: int,
        *,
        state: QuorumState | None = None,
        history: Iterable[EpochStart] = (),
        log_end_offset: int = 0,
        high_watermark: int = 0,
        log_start_offset: int = 0,
        producers: ProducerTable | None = None,
        memberships: Iterable[MembershipEntry] = (),
        liveness: Liveness | None = None,
    ) -> None:
        self.config = config
        starting = Membership(config.voters, config.observers)
        c = self._core = Core(
            config,
            rng,
            state=state or QuorumState(),
            history=EpochHistory(history),
            members=MembershipHistory(starting, memberships),
            log_end_offset=log_end_offset,
            high_watermark=high_watermark,
            log_start_offset=log_start_offset,
            producers=producers if producers is not None else ProducerTable(),
            liveness=liveness,
        )
        # Repairs of the durable state: the log may have lost an unflushed tail that the
        # epoch history still describes; a restarted leader is no longer the leader.
        if c.history.truncate_to(log_end_offset):
            c.out.append(PersistEpochHistory(c.history.entries))
        if c.members.truncate_to(log_end_offset):
            c.out.append(PersistMembershipHistory(c.members.entries))
        if c.state.leader_id == config.replica_id:
            c.set_state(QuorumState(c.state.epoch, c.state.voted_for, None))
        c.reset_election_timer(now_ms)
        send_fetch(c, now_ms)

    @property
    def producers(self) -> ProducerTable:
        """Idempotent producers' last batches, a function of the log (`producers.py`):
        updated here as offsets are assigned (leader) or fetched records appended
        (follower); the driver replaces the table after it rebuilt it from the log."""
        return self._core.producers

    @producers.setter
    def producers(self, table: ProducerTable) -> None:
        self._core.producers = table

    @property
    def stale_messages(self) -> Counter[Stale]:
        """Messages ignored as late, duplicate or stale, by reason (see `stale.py`)."""
        return self._core.stale_messages

    # -- read-only view ------------------------------------------------------------------

    @property
    def replica_id(self) -> int:
        return self.config.replica_id

    @property
    def role(self) -> Role:
        return self._core.role

    @property
    def step(self) -> Step:
        """The role this replica steps messages in: `role`, with the pre-candidate explicit
        (`roles/core.py`)."""
        return self._core.step

    @property
    def epoch(self) -> int:
        return self._core.epoch

    @property
    def leader_id(self) -> int | None:
        return self._core.leader_id

    @property
    def quorum_state(self) -> QuorumState:
        return self._core.state

    @property
    def log_end_offset(self) -> int:
        return self._core.leo

    @property
    def flushed_offset(self) -> int:
        return self._core.flushed

    @property
    def high_watermark(self) -> int:
        return self._core.hw

    @property
    def last_epoch(self) -> int:
        """The epoch of the last record of the log (0: empty)."""
        return self._core.last_epoch()

    @property
    def below_vote_floor(self) -> bool:
        """This replica's log was discarded and has not caught up yet: no votes."""
        return self._core.below_vote_floor

    def caught_up(self, now_ms: int) -> bool:
        """The leader, or a follower that heard from its leader within the election timeout
        and whose log reached the HW of that leader's latest records answer in this epoch:
        what a rolling restart waits for before it stops the next node. A replica in an
        election, or cut off from its leader, is not (it cannot know what it lacks)."""
        c = self._core
        if c.role is Role.LEADER:
            return True
        if c.role is not Role.FOLLOWER or c.leader_id is None or not c.leader_heard(now_ms):
            return False
        return c.records_epoch == c.epoch and c.leo >= c.leader_hw_seen

    @property
    def serving(self) -> bool:
        """A leader whose own epoch is committed (its HW is past the epoch's control record).
        Only then does its HW cover every record an earlier leader acknowledged: before, a
        new leader's HW may still be below its predecessor's, and a `latest` or a reply's
        HW taken from it could go backwards (Kafka's KIP-207 class of bug)."""
        return leading.serving(self._core)

    @property
    def timers_idle(self) -> bool:
        """`tick` has nothing to do until the next input: a leader with no other replica (a
        replica set of one: no election, fetch, long-poll, BeginEpoch or check-quorum
        timer) and no append waiting for a flush or a commit. Its driver may tick rarely."""
        c = self._core
        return (
            c.step is Step.LEADER
            and not c.progress
            and not c.pending_leader
            and not c.pending_all
            and c.transfer is None
        )

    def next_tick_ms(self) -> int | None:
        """When `tick` next has something to do if no input comes first (None: never; a
        time already past: at once). Exact for every timer `tick` runs, each of which moves
        its own time on once run: a follower's election timeout and fetch retry; a
        leader's parked fetches, BeginEpoch retries and check-quorum. A leader polls (0)
        while a transfer is under way or an acks=leader append waits for a flush (the
        flushed offset is learnt on ticks). A driver sleeps until then."""
        return steps.next_tick_ms(self._core)

    @property
    def transferring_to(self) -> int | None:
        """The voter a leadership transfer under way hands the partition to."""
        transfer = self._core.transfer
        return transfer[0] if transfer is not None else None

    @property
    def leader_serving(self) -> bool:
        """A follower that knows its leader serves: the first record of the current epoch
        (the leader's epoch marker) is below this replica's HW, so the leader's own epoch
        is committed and no longer needs this replica's acknowledgement. What a node that
        handed its partitions over waits for before it stops (`server.handover`)."""
        c = self._core
        entries = c.history.entries
        return (
            c.role is Role.FOLLOWER
            and c.leader_id is not None
            and bool(entries)
            and entries[-1].epoch == c.epoch
            and c.hw > entries[-1].start_offset
        )

    @property
    def epoch_history(self) -> tuple[EpochStart, ...]:
        return self._core.history.entries

    @property
    def is_voter(self) -> bool:
        """Whether this replica votes in its current membership (else it is an observer, or
        in neither set: never a candidate or leader)."""
        return self._core.is_voter

    @property
    def membership(self) -> Membership:
        """The latest membership of this replica's log, committed or not."""
        return self._core.membership

    @property
    def membership_history(self) -> tuple[MembershipEntry, ...]:
        return self._core.members.entries

    def followers(self) -> dict[int, tuple[int, int | None]]:
        """Leader only (else empty): replica (voters, then observers) -> (match offset, time
        of its last fetch in ms)."""
        return {v: (p.match, p.last_fetch_ms) for v, p in self._core.progress.items()}

    def held_quietly(self) -> frozenset[int]:
        """Leader only: the replicas whose fetch it holds quietly now (`roles/quiet.py`):
        each has a fetch outstanding here this very moment, however long ago it came."""
        return frozenset(r for r, p in self._core.progress.items() if p.quiet)

    def epoch_of(self, offset: int) -> int:
        c = self._core
        assert 0 <= offset < c.leo, (offset, c.leo)
        return c.history.epoch_of(offset)

    # -- inputs --------------------------------------------------------------------------

    def start(self) -> list[Output]:
        """Outputs of construction (repairs of the durable state, a first fetch)."""
        return self._core.take()

    def tick(self, now_ms: int) -> list[Output]:
        steps.tick(self._core, now_ms)
        return self._core.take()

    def election_due(self, now_ms: int) -> bool:
        """Whether a tick at `now_ms` would start a campaign: a voter that is not the leader
        and whose election timeout has passed (`CampaignBudget`)."""
        c = self._core
        return c.step is not Step.LEADER and c.is_voter and now_ms >= c.election_deadline_ms

    def defer_election(self, until_ms: int) -> None:
        """Let the election timeout pass no sooner than `until_ms` (the node's campaign
        budget is spent: timing only, as a longer timer would be)."""
        c = self._core
        c.election_deadline_ms = max(c.election_deadline_ms, until_ms)

    def campaign(self, now_ms: int) -> list[Output]:
        """Start an election now (no-op on a leader, an observer, and a replica whose
        discarded log has not caught up: see `QuorumState.vote_floor`)."""
        c = self._core
        if c.step is not Step.LEADER and c.is_voter and not c.below_vote_floor:
            start_election(c, now_ms)
        return c.take()

    def transfer_leadership(self, target: int, now_ms: int) -> list[Output]:
        """Hand leadership to voter `target` (no-op unless leader, or unless `target` is
        another voter of the current membership). See the module docstring."""
        assert target != self.replica_id, target
        c = self._core
        # (a target that is no voter of the current membership, e.g. just removed: no-op)
        if c.step is Step.LEADER and target in c.membership.voters:
            c.transfer = (target, now_ms + self.config.election_timeout_ms_max)
            c.timeout_now_sent = False
            leading.maybe_timeout_now(c)
        return c.take()

    def receive(self, message: Message, now_ms: int) -> list[Output]:
        """A message from another replica, stepped by this replica's role (`steps.py`)."""
        steps.receive(self._core, message, now_ms)
        return self._core.take()

    def append(
        self,
        request_id: int,
        values: Sequence[bytes],
        acks: Acks,
        now_ms: int,
        producer: ProducerBatch | None = None,
        timestamp_ms: int = 0,
    ) -> list[Output]:
        """A client Append. Completes (or fails) through `AckCompleted` / `AckFailed`.

        With `producer` (an idempotent producer's batch), a batch the log already holds is
        not appended again: the call waits for `acks` on the batch's original offsets. A
        stale epoch or a sequence gap fails with nothing appended. `timestamp_ms` (the
        leader's wall clock) goes into the batch header."""
        assert values, "an append needs at least one record"
        leading.append(self._core, request_id, values, acks, now_ms, producer, timestamp_ms)
        return self._core.take()

    def change_membership(
        self, request_id: int, voters: Sequence[int], observers: Sequence[int], now_ms: int
    ) -> list[Output]:
        """Leader: make `voters` / `observers` the membership by appending a membership
        record (`MembershipChange`). Completes with `AckCompleted(request_id, o, o)` once the
        record at `o` is committed; a membership the log already holds is answered with its
        record's offset once that is committed, so a retry after OUTCOME_UNKNOWN appends
        nothing twice. The starting membership, while no record holds it, is recorded like
        a change (the metadata quorum keeper writes it at the cluster's first election, so
        that the quorum is read from the log, never again from a node's peer list).
        Refusals (`AckFailed`, nothing appended), in this order:

        * NOT_LEADER: not the leader, or handing leadership over (names the target);
        * EPOCH_NOT_COMMITTED: the leader's own epoch marker is not committed yet. This is
          the fix of the single-server-change bug (Ongaro, raft-dev, 2015): a new leader
          must commit an entry of its own epoch before it appends a membership change, or
          an uncommitted change of an earlier leader and its own could form two majorities
          that do not overlap;
        * INVALID_MEMBERSHIP: no voter, a duplicate, a replica in both sets;
        * MEMBERSHIP_CHANGE_IN_PROGRESS: the latest membership record is not committed
          (one change at a time);
        * TOO_MANY_VOTER_CHANGES: the voters differ from the current ones by more than one
          replica added or removed (observers may change freely);
        * LEADER_REMOVAL: the leader would no longer be a voter (transfer leadership first);
        * NOT_CAUGHT_UP: a replica added as voter must be an observer of the current
          membership whose latest fetch in this epoch asked for an offset at or past the
          leader's HW (it holds every committed record), so that the new majority does
          not stall behind it.
        """
        wanted = Membership(tuple(voters), tuple(observers))
        leading.change_membership(self._core, request_id, wanted, now_ms)
        return self._core.take()

    def flushed(self, offset: int, now_ms: int) -> list[Output]:
        """Log fact: every offset below `offset` is durable."""
        c = self._core
        assert offset <= c.leo, (offset, c.leo)
        c.flushed = max(c.flushed, offset)
        if c.step is Step.LEADER:
            leading.flushed(c, now_ms)
        else:
            if c.state.vote_floor and c.caught_up_after_repair():
                c.clear_vote_floor()
            if c.fetch_sent_ms is None:
                send_fetch(c, now_ms)
        return c.take()

    @property
    def quiet(self) -> bool:
        """A follower or leader in a quiet state (`roles/quiet.py`): its driver asks the
        node's liveness to `wake` it when a peer node goes silent, restarts or reconnects."""
        return quiet.is_quiet(self._core)

    def wake(self, node: int, now_ms: int) -> list[Output]:
        """The liveness of peer node `node` changed: what is quiet about it wakes (a
        follower fetches again and runs its usual election timer; a leader answers the
        fetch it held and counts the follower from when its node was last heard)."""
        steps.wake(self._core, node, now_ms)
        return self._core.take()

    def log_start_advanced(self, offset: int, now_ms: int) -> list[Output]:
        """Log fact: retention deleted every offset below `offset` (never above the HW). A
        follower that asks this leader for one of them is told to start at `offset`. The
        membership history forgets the changes before the one in force at `offset` (their
        records are gone and, committed, never truncated), so its file stays small."""
        c = self._core
        assert c.log_start <= offset <= c.hw, (offset, c.log_start, c.hw)
        c.log_start = offset
        if c.members.forget_before(offset):
            c.out.append(PersistMembershipHistory(c.members.entries))
        return c.take()
