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
"""

from __future__ import annotations

import enum
import random
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from replog.replication.config import ReplicaConfig
from replog.replication.epochs import EpochHistory, EpochStart
from replog.replication.membership import Membership, MembershipEntry, MembershipHistory
from replog.replication.messages import (
    BeginEpoch,
    Diverging,
    Fenced,
    FetchRequest,
    FetchResponse,
    Message,
    Records,
    StartAt,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from replog.replication.outputs import (
    AckCompleted,
    AckFailed,
    AckFailure,
    Acks,
    AppendControl,
    AppendFrames,
    AppendRecords,
    LeaderEpochMarker,
    MembershipChange,
    Output,
    PersistEpochHistory,
    PersistMembershipHistory,
    PersistQuorumState,
    ResetLog,
    Send,
    SetHighWatermark,
    TruncateTo,
)
from replog.replication.producers import BatchHeader, Check, ProducerBatch, ProducerTable, Verdict
from replog.replication.quorum import next_high_watermark
from replog.replication.stale import Stale, divergence_offset, result_problem
from replog.replication.state import QuorumState


class Role(enum.Enum):
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(slots=True)
class _Progress:
    """The leader's view of one other replica (voter or observer) in its epoch."""

    voter: bool = True
    match: int = 0
    last_fetch_ms: int | None = None
    hw_sent: int = -1
    parked: FetchRequest | None = None
    parked_since_ms: int = 0
    begin_sent_ms: int | None = None


@dataclass(frozen=True, slots=True)
class _PendingAck:
    request_id: int
    base_offset: int
    last_offset: int


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
    ) -> None:
        self.config = config
        # Idempotent producers' last batches, a function of the log (`producers`): updated
        # here as offsets are assigned (leader) or fetched records appended (follower).
        self.producers = producers if producers is not None else ProducerTable()
        self._rng = rng
        self._out: list[Output] = []
        # messages ignored as late, duplicate or stale, by reason (see `stale.py`)
        self.stale_messages: Counter[Stale] = Counter()
        self._state = state or QuorumState()
        self._history = EpochHistory(history)
        self._members = MembershipHistory(Membership(config.voters, config.observers), memberships)
        self._leo = log_end_offset
        self._flushed = log_end_offset  # what recovery found is on disk
        assert 0 <= log_start_offset <= log_end_offset, (log_start_offset, log_end_offset)
        # retention deletes committed records only: everything below the log start is
        self._hw = max(min(high_watermark, log_end_offset), log_start_offset)
        self._log_start = log_start_offset
        self._role = Role.FOLLOWER
        self._votes: set[int] = set()
        self._prevotes: set[int] | None = None  # a pre-vote round is under way
        self._leader_contact_ms: int | None = None  # last word from this epoch's leader
        self._election_deadline_ms = 0
        # follower
        self._fetch_sent_ms: int | None = None
        # leader
        self._progress: dict[int, _Progress] = {}
        self._control_offset = -1
        self._leader_since_ms = 0
        self._transfer: tuple[int, int] | None = None  # (target, give up at ms)
        self._leader_hw_seen = 0  # follower: the HW in the last records answer
        self._records_epoch = 0  # follower: the epoch of that answer
        self._timeout_now_sent = False
        self._pending_leader: deque[_PendingAck] = deque()
        self._pending_all: deque[_PendingAck] = deque()
        # Repairs of the durable state: the log may have lost an unflushed tail that the
        # epoch history still describes; a restarted leader is no longer the leader.
        if self._history.truncate_to(log_end_offset):
            self._out.append(PersistEpochHistory(self._history.entries))
        if self._members.truncate_to(log_end_offset):
            self._out.append(PersistMembershipHistory(self._members.entries))
        if self._state.leader_id == config.replica_id:
            self._set_state(QuorumState(self._state.epoch, self._state.voted_for, None))
        self._reset_election_timer(now_ms)
        self._send_fetch(now_ms)

    # -- read-only view ------------------------------------------------------------------

    @property
    def replica_id(self) -> int:
        return self.config.replica_id

    @property
    def role(self) -> Role:
        return self._role

    @property
    def epoch(self) -> int:
        return self._state.epoch

    @property
    def leader_id(self) -> int | None:
        return self._state.leader_id

    @property
    def quorum_state(self) -> QuorumState:
        return self._state

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def last_epoch(self) -> int:
        """The epoch of the last record of the log (0: empty)."""
        return self._history.last_epoch(self._leo)

    @property
    def below_vote_floor(self) -> bool:
        """This replica's log was discarded and has not caught up yet: no votes."""
        return self._leo < self._state.vote_floor

    def caught_up(self, now_ms: int) -> bool:
        """The leader, or a follower that heard from its leader within the election timeout
        and whose log reached the HW of that leader's latest records answer in this epoch:
        what a rolling restart waits for before it stops the next node. A replica in an
        election, or cut off from its leader, is not (it cannot know what it lacks)."""
        if self.role is Role.LEADER:
            return True
        contact = self._leader_contact_ms
        if self.role is not Role.FOLLOWER or self.leader_id is None or contact is None:
            return False
        if now_ms - contact >= self.config.election_timeout_ms_min:
            return False
        return self._records_epoch == self.epoch and self._leo >= self._leader_hw_seen

    def _caught_up_after_repair(self) -> bool:
        """Durably back at what it held before its log was discarded, or durably holding
        everything its leader has committed once that leader's HW covers its own epoch (it
        then covers every record committed before, this replica's acknowledgements
        included). Durably: a power loss must not take the refetched records again."""
        end = self._flushed if self.config.flush_always else self._leo
        if end >= self._state.vote_floor:
            return True
        entries = self._history.entries
        epoch_start = (
            entries[-1].start_offset if entries and entries[-1].epoch == self.epoch else None
        )
        return epoch_start is not None and epoch_start < self._leader_hw_seen <= end

    def _clear_vote_floor(self) -> None:
        s = self._state
        if s.vote_floor:
            self._state = QuorumState(s.epoch, s.voted_for, s.leader_id)
            self._out.append(PersistQuorumState(self._state))

    def _log_for_votes(self) -> tuple[int, int]:
        """(last epoch, end) a candidate's log must be at least as up to date as: this
        log's, or the former log's while the vote floor is set."""
        mine = (self._history.last_epoch(self._leo), self._leo)
        if self.below_vote_floor:
            return max(mine, (self._state.vote_floor_epoch, self._state.vote_floor))
        return mine

    @property
    def serving(self) -> bool:
        """A leader whose own epoch is committed (its HW is past the epoch's control record).
        Only then does its HW cover every record an earlier leader acknowledged: before, a
        new leader's HW may still be below its predecessor's, and a `latest` or a reply's
        HW taken from it could go backwards (Kafka's KIP-207 class of bug)."""
        return (
            self._role is Role.LEADER and self._hw > self._control_offset and self._transfer is None
        )

    @property
    def timers_idle(self) -> bool:
        """`tick` has nothing to do until the next input: a leader with no other replica (a
        replica set of one: no election, fetch, long-poll, BeginEpoch or check-quorum
        timer) and no append waiting for a flush or a commit. Its driver may tick rarely."""
        return (
            self._role is Role.LEADER
            and not self._progress
            and not self._pending_leader
            and not self._pending_all
            and self._transfer is None
        )

    def next_tick_ms(self) -> int | None:
        """When `tick` next has something to do if no input comes first (None: never; a
        time already past: at once). Exact for every timer `tick` runs, each of which moves
        its own time on once run: a follower's election timeout and fetch retry; a
        leader's parked fetches, BeginEpoch retries and check-quorum. A leader polls (0)
        while a transfer is under way or an acks=leader append waits for a flush (the
        flushed offset is learnt on ticks). A driver sleeps until then."""
        cfg = self.config
        if self._role is not Role.LEADER:
            due = self._election_deadline_ms
            if self._role is Role.FOLLOWER and self._fetch_sent_ms is not None:
                due = min(due, self._fetch_sent_ms + cfg.fetch_retry_ms)
            return due
        if self._transfer is not None or self._pending_leader:
            return 0
        times: list[int] = []
        lasts: list[int] = []
        for progress in self._progress.values():
            if progress.parked is not None:
                times.append(progress.parked_since_ms + cfg.fetch_wait_ms_max)
            last = progress.last_fetch_ms
            unaware = not progress.voter or progress.match <= self._members.latest_offset
            if last is None or unaware:
                sent = progress.begin_sent_ms
                retry = 0 if sent is None else sent + cfg.begin_epoch_retry_ms
                times.append(
                    retry if last is None else max(retry, last + cfg.election_timeout_ms_min)
                )
            if progress.voter and last is not None:
                lasts.append(last)
        others = self.membership.majority - 1  # other voters check-quorum needs alive
        if others > 0:
            lasts.sort(reverse=True)
            quorum_since = self._leader_since_ms
            if len(lasts) >= others:
                quorum_since = max(quorum_since, lasts[others - 1])
            times.append(quorum_since + cfg.election_timeout_ms_max)
        return min(times, default=None)

    @property
    def transferring_to(self) -> int | None:
        """The voter a leadership transfer under way hands the partition to."""
        return self._transfer[0] if self._transfer is not None else None

    @property
    def leader_serving(self) -> bool:
        """A follower that knows its leader serves: the first record of the current epoch
        (the leader's epoch marker) is below this replica's HW, so the leader's own epoch
        is committed and no longer needs this replica's acknowledgement. What a node that
        handed its partitions over waits for before it stops (`server.handover`)."""
        entries = self._history.entries
        return (
            self._role is Role.FOLLOWER
            and self.leader_id is not None
            and bool(entries)
            and entries[-1].epoch == self.epoch
            and self._hw > entries[-1].start_offset
        )

    @property
    def epoch_history(self) -> tuple[EpochStart, ...]:
        return self._history.entries

    @property
    def is_voter(self) -> bool:
        """Whether this replica votes in its current membership (else it is an observer, or
        in neither set: never a candidate or leader)."""
        return self.replica_id in self.membership.voters

    @property
    def membership(self) -> Membership:
        """The latest membership of this replica's log, committed or not."""
        return self._members.current

    @property
    def membership_history(self) -> tuple[MembershipEntry, ...]:
        return self._members.entries

    def followers(self) -> dict[int, tuple[int, int | None]]:
        """Leader only (else empty): replica (voters, then observers) -> (match offset, time
        of its last fetch in ms)."""
        return {v: (p.match, p.last_fetch_ms) for v, p in self._progress.items()}

    def epoch_of(self, offset: int) -> int:
        assert 0 <= offset < self._leo, (offset, self._leo)
        return self._history.epoch_of(offset)

    # -- inputs --------------------------------------------------------------------------

    def start(self) -> list[Output]:
        """Outputs of construction (repairs of the durable state, a first fetch)."""
        return self._take()

    def tick(self, now_ms: int) -> list[Output]:
        if self._role is Role.LEADER:
            self._tick_leader(now_ms)
        else:
            if now_ms >= self._election_deadline_ms:
                if self.is_voter:
                    self._start_prevote(now_ms)
                else:
                    self._lose_leader(now_ms)
            elif (
                self._role is Role.FOLLOWER
                and self._fetch_sent_ms is not None
                and now_ms - self._fetch_sent_ms >= self.config.fetch_retry_ms
            ):
                self._fetch_sent_ms = None
                self._send_fetch(now_ms)
        return self._take()

    def campaign(self, now_ms: int) -> list[Output]:
        """Start an election now (no-op on a leader, an observer, and a replica whose
        discarded log has not caught up: see `QuorumState.vote_floor`)."""
        if self._role is not Role.LEADER and self.is_voter and not self.below_vote_floor:
            self._start_election(now_ms)
        return self._take()

    def transfer_leadership(self, target: int, now_ms: int) -> list[Output]:
        """Hand leadership to voter `target` (no-op unless leader, or unless `target` is
        another voter of the current membership). See the module docstring."""
        assert target != self.replica_id, target
        # (a target that is no voter of the current membership, e.g. just removed: no-op)
        if self._role is Role.LEADER and target in self.membership.voters:
            self._transfer = (target, now_ms + self.config.election_timeout_ms_max)
            self._timeout_now_sent = False
            self._maybe_timeout_now()
        return self._take()

    def receive(self, message: Message, now_ms: int) -> list[Output]:
        if isinstance(message, TimeoutNow):
            self._on_timeout_now(message, now_ms)
            return self._take()
        if isinstance(message, FetchRequest):
            self._on_fetch_request(message, now_ms)
        elif isinstance(message, FetchResponse):
            self._on_fetch_response(message, now_ms)
        elif isinstance(message, VoteRequest):
            self._on_vote_request(message, now_ms)
        elif isinstance(message, VoteResponse):
            self._on_vote_response(message, now_ms)
        else:
            self._on_begin_epoch(message, now_ms)
        return self._take()

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
        if self._role is not Role.LEADER:
            self._out.append(AckFailed(request_id, AckFailure.NOT_LEADER, self.leader_id))
            return self._take()
        if self._transfer is not None:  # handing over: the target leads next
            self._out.append(AckFailed(request_id, AckFailure.NOT_LEADER, self._transfer[0]))
            return self._take()
        header = None
        if producer is not None:
            check = self.producers.check(producer, len(values))
            if check.verdict is Verdict.DUPLICATE:
                ack = _PendingAck(request_id, check.base_offset, check.last_offset)
                self._await_ack(ack, acks, now_ms)
                return self._take()
            if check.verdict is not Verdict.APPEND:
                self._out.append(_refusal(request_id, check))
                return self._take()
            header = BatchHeader(
                producer.producer_id,
                producer.producer_epoch,
                producer.base_sequence,
                len(values),
                timestamp_ms,
            )
            self.producers.record(self._leo, header)
        frame_offset = self._leo
        self._out.append(AppendRecords(frame_offset, tuple(values), header))
        base = frame_offset + (header is not None)
        self._leo = base + len(values)
        self._await_ack(_PendingAck(request_id, base, self._leo - 1), acks, now_ms)
        return self._take()

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
        refusal = self._membership_refusal(wanted)
        if refusal is not None:
            leader = self._transfer[0] if self._transfer is not None else self.leader_id
            self._out.append(AckFailed(request_id, refusal, leader))
            return self._take()
        latest = self._members.latest_offset
        if latest >= 0 and wanted.same_as(self.membership):  # wait for the record of it
            self._await_ack(_PendingAck(request_id, latest, latest), Acks.ALL, now_ms)
            return self._take()
        offset = self._leo
        self._members.append(MembershipEntry(offset, wanted))
        self._out.append(PersistMembershipHistory(self._members.entries))
        self._out.append(AppendControl(offset, MembershipChange(wanted.voters, wanted.observers)))
        self._leo += 1
        self._sync_progress(now_ms)
        self._await_ack(_PendingAck(request_id, offset, offset), Acks.ALL, now_ms)
        return self._take()

    def _membership_refusal(self, wanted: Membership) -> AckFailure | None:
        if self._role is not Role.LEADER or self._transfer is not None:
            return AckFailure.NOT_LEADER
        if not self.serving:  # (see the docstring: Ongaro's fix)
            return AckFailure.EPOCH_NOT_COMMITTED
        if wanted.problem() is not None:
            return AckFailure.INVALID_MEMBERSHIP
        current = self.membership
        if wanted.same_as(current):
            return None
        if self._members.latest_offset >= self._hw:
            return AckFailure.MEMBERSHIP_CHANGE_IN_PROGRESS
        added = set(wanted.voters) - set(current.voters)
        removed = set(current.voters) - set(wanted.voters)
        if len(added) + len(removed) > 1:
            return AckFailure.TOO_MANY_VOTER_CHANGES
        if self.replica_id in removed:
            return AckFailure.LEADER_REMOVAL
        for replica in added:
            progress = self._progress.get(replica)
            if (
                replica not in current.observers
                or progress is None
                or progress.last_fetch_ms is None
                or progress.match < self._hw
            ):
                return AckFailure.NOT_CAUGHT_UP
        return None

    def _sync_progress(self, now_ms: int) -> None:
        """Leader: track the replicas of the current membership (a new one is told who
        leads at once; a removed one is sent nothing more) and recount the HW."""
        me = self.replica_id
        members = self.membership
        wanted = {v: True for v in members.voters if v != me}
        wanted.update(dict.fromkeys(members.observers, False))
        for replica in [r for r in self._progress if r not in wanted]:
            del self._progress[replica]
        for replica, voter in wanted.items():
            progress = self._progress.get(replica)
            if progress is None:
                self._progress[replica] = _Progress(voter=voter, begin_sent_ms=now_ms)
                self._out.append(Send(replica, BeginEpoch(self.epoch, me)))
            else:
                progress.voter = voter

    def _await_ack(self, ack: _PendingAck, acks: Acks, now_ms: int) -> None:
        """Answer `ack` now or once its records are flushed (acks=leader under flush=always)
        or committed (acks=all)."""
        if acks is Acks.NONE or (acks is Acks.LEADER and not self.config.flush_always):
            self._out.append(AckCompleted(ack.request_id, ack.base_offset, ack.last_offset))
        elif acks is Acks.LEADER:
            if self._flushed > ack.last_offset:
                self._out.append(AckCompleted(ack.request_id, ack.base_offset, ack.last_offset))
            else:
                self._pending_leader.append(ack)
        elif self._hw > ack.last_offset:  # a retry of a committed batch
            self._out.append(AckCompleted(ack.request_id, ack.base_offset, ack.last_offset))
        else:  # (a retry may queue behind newer batches: they commit first anyway)
            self._pending_all.append(ack)
        self._update_high_watermark(now_ms)
        self._answer_parked(now_ms, force=False)

    def flushed(self, offset: int, now_ms: int) -> list[Output]:
        """Log fact: every offset below `offset` is durable."""
        assert offset <= self._leo, (offset, self._leo)
        self._flushed = max(self._flushed, offset)
        if self._role is Role.LEADER:
            while self._pending_leader and self._pending_leader[0].last_offset < self._flushed:
                ack = self._pending_leader.popleft()
                self._out.append(AckCompleted(ack.request_id, ack.base_offset, ack.last_offset))
            self._update_high_watermark(now_ms)
            self._maybe_timeout_now()
        else:
            if self._state.vote_floor and self._caught_up_after_repair():
                self._clear_vote_floor()
            if self._role is Role.FOLLOWER and self._fetch_sent_ms is None:
                self._send_fetch(now_ms)
        return self._take()

    def log_start_advanced(self, offset: int, now_ms: int) -> list[Output]:
        """Log fact: retention deleted every offset below `offset` (never above the HW). A
        follower that asks this leader for one of them is told to start at `offset`. The
        membership history forgets the changes before the one in force at `offset` (their
        records are gone and, committed, never truncated), so its file stays small."""
        assert self._log_start <= offset <= self._hw, (offset, self._log_start, self._hw)
        self._log_start = offset
        if self._members.forget_before(offset):
            self._out.append(PersistMembershipHistory(self._members.entries))
        return self._take()

    # -- state changes -------------------------------------------------------------------

    def _stale(self, reason: Stale) -> None:
        self.stale_messages[reason] += 1

    def _take(self) -> list[Output]:
        out, self._out = self._out, []
        return out

    def _maybe_timeout_now(self) -> None:
        """Transfer under way: once the target holds the whole log and every append is
        committed (so none is left waiting), tell it to campaign."""
        if self._transfer is None or self._timeout_now_sent:
            return
        target = self._transfer[0]
        progress = self._progress.get(target)
        if progress is not None and progress.match >= self._leo and self._hw >= self._leo:
            self._timeout_now_sent = True
            self._out.append(Send(target, TimeoutNow(self.epoch, self.replica_id)))

    def _on_timeout_now(self, message: TimeoutNow, now_ms: int) -> None:
        if (
            message.epoch == self.epoch
            and message.leader_id == self.leader_id
            and self._role is Role.FOLLOWER
            and self.is_voter
            and not self.below_vote_floor
        ):
            self._start_election(now_ms)
        else:
            self._stale(Stale.TIMEOUT_NOW)

    def _set_state(self, state: QuorumState) -> None:
        assert state.epoch >= self._state.epoch, (state, self._state)
        if state.vote_floor != self._state.vote_floor and state.vote_floor == 0:
            # the callers build states without the floor: it stays until it is cleared
            s = self._state
            state = QuorumState(
                state.epoch, state.voted_for, state.leader_id, s.vote_floor, s.vote_floor_epoch
            )
        if state != self._state:
            self._state = state
            self._out.append(PersistQuorumState(state))

    def _reset_election_timer(self, now_ms: int) -> None:
        cfg = self.config
        timeout = self._rng.randint(cfg.election_timeout_ms_min, cfg.election_timeout_ms_max)
        self._election_deadline_ms = now_ms + timeout

    def _become_follower(self, epoch: int, leader_id: int | None, now_ms: int) -> None:
        """Follow `leader_id` (None: unknown) in `epoch` (>= the current one)."""
        if self._role is Role.LEADER:
            self._fail_pending_acks()
        self._transfer = None
        voted_for = self._state.voted_for if epoch == self._state.epoch else None
        self._set_state(QuorumState(epoch, voted_for, leader_id))
        self._role = Role.FOLLOWER
        self._votes = set()
        self._prevotes = None
        self._leader_contact_ms = now_ms if leader_id is not None else None
        self._progress = {}
        self._fetch_sent_ms = None
        self._reset_election_timer(now_ms)
        self._send_fetch(now_ms)

    def _lose_leader(self, now_ms: int) -> None:
        """Observer: nothing valid came from the leader within the election timeout. Forget
        it and wait for a BeginEpoch (or a Fenced answer) instead of campaigning."""
        assert not self.is_voter and self._role is Role.FOLLOWER
        if self.leader_id is not None:
            self._become_follower(self.epoch, None, now_ms)
        else:
            self._reset_election_timer(now_ms)

    def _fail_pending_acks(self) -> None:
        for ack in (*self._pending_leader, *self._pending_all):
            self._out.append(AckFailed(ack.request_id, AckFailure.OUTCOME_UNKNOWN, None))
        self._pending_leader.clear()
        self._pending_all.clear()

    def _start_prevote(self, now_ms: int) -> None:
        """Ask the voters whether they would vote for this replica in the next epoch."""
        me = self.replica_id
        self._reset_election_timer(now_ms)
        self._prevotes = {me}
        # Below its vote floor it never starts the election, but it still asks: a pre-vote
        # in a newer epoch moves the others there, so that it learns who leads.
        if len(self._prevotes) >= self.membership.majority and not self.below_vote_floor:
            self._start_election(now_ms)
            return
        last_epoch = self._history.last_epoch(self._leo)
        members = self._members.latest_offset
        request = VoteRequest(self.epoch + 1, me, last_epoch, self._leo, True, members)
        for voter in self.membership.voters:
            if voter != me:
                self._out.append(Send(voter, request))

    def _start_election(self, now_ms: int) -> None:
        me = self.replica_id
        assert self.is_voter, "an observer never campaigns"
        self._prevotes = None
        self._role = Role.CANDIDATE
        self._set_state(QuorumState(self._state.epoch + 1, me, None))
        self._votes = {me}
        self._fetch_sent_ms = None
        self._reset_election_timer(now_ms)
        if len(self._votes) >= self.membership.majority:
            self._become_leader(now_ms)
            return
        last_epoch = self._history.last_epoch(self._leo)
        members = self._members.latest_offset
        request = VoteRequest(self.epoch, me, last_epoch, self._leo, False, members)
        for voter in self.membership.voters:
            if voter != me:
                self._out.append(Send(voter, request))

    def _become_leader(self, now_ms: int) -> None:
        me = self.replica_id
        epoch = self.epoch
        assert self._role is Role.CANDIDATE and self._state.voted_for == me
        self._role = Role.LEADER
        # A candidate whose election timed out asks for pre-votes for the next epoch while
        # its votes may still come in: a late vote that elects it ends that round too.
        self._prevotes = None
        self._transfer = None
        self.producers.drop_partial()  # a batch not whole in this log never will be
        self._set_state(QuorumState(epoch, me, me))
        self._history.append(epoch, self._leo)
        self._out.append(PersistEpochHistory(self._history.entries))
        self._control_offset = self._leo
        marker = LeaderEpochMarker(epoch, me, self.membership.voters)
        self._out.append(AppendControl(self._control_offset, marker))
        self._leo += 1
        self._leader_since_ms = now_ms
        self._progress = {v: _Progress() for v in self.membership.voters if v != me}
        self._progress.update((o, _Progress(voter=False)) for o in self.membership.observers)
        for replica, progress in self._progress.items():
            progress.begin_sent_ms = now_ms
            self._out.append(Send(replica, BeginEpoch(epoch, me)))
        self._update_high_watermark(now_ms)

    # -- leader ----------------------------------------------------------------------------

    def _tick_leader(self, now_ms: int) -> None:
        cfg = self.config
        if self._transfer is not None and now_ms >= self._transfer[1]:
            self._transfer = None  # the target did not take over in time: lead on
        self._maybe_timeout_now()
        alive = 1
        for replica, progress in self._progress.items():
            parked = progress.parked
            if parked is not None and now_ms - progress.parked_since_ms >= cfg.fetch_wait_ms_max:
                self._send_records(replica, parked)
            last = progress.last_fetch_ms
            # Tell the leader again to a replica that has not fetched in this epoch, and to an
            # observer that went quiet: it forgets a silent leader and does not campaign. So
            # does a voter that may not know it is one (it has not fetched the latest
            # membership record: it may still think it is an observer).
            unaware = not progress.voter or progress.match <= self._members.latest_offset
            if last is None or (unaware and now_ms - last >= cfg.election_timeout_ms_min):
                sent = progress.begin_sent_ms
                if sent is None or now_ms - sent >= cfg.begin_epoch_retry_ms:
                    progress.begin_sent_ms = now_ms
                    self._out.append(Send(replica, BeginEpoch(self.epoch, self.replica_id)))
            if progress.voter and last is not None and now_ms - last < cfg.election_timeout_ms_max:
                alive += 1
        if (
            now_ms - self._leader_since_ms >= cfg.election_timeout_ms_max
            and alive < self.membership.majority
        ):
            # check quorum: a leader that cannot reach a majority stops taking writes
            self._become_follower(self.epoch, None, now_ms)

    def _own_match(self) -> int:
        return self._flushed if self.config.flush_always else self._leo

    def _update_high_watermark(self, now_ms: int) -> None:
        matches = [self._own_match(), *(p.match for p in self._progress.values() if p.voter)]
        hw = next_high_watermark(self._hw, matches, self.membership.majority, self._control_offset)
        assert hw >= self._hw, (hw, self._hw)
        if hw == self._hw:
            return
        assert hw <= self._leo, (hw, self._leo)
        self._hw = hw
        self._out.append(SetHighWatermark(hw))
        while self._pending_all and self._pending_all[0].last_offset < hw:
            ack = self._pending_all.popleft()
            self._out.append(AckCompleted(ack.request_id, ack.base_offset, ack.last_offset))
        self._answer_parked(now_ms, force=False)

    def _answer_parked(self, now_ms: int, *, force: bool) -> None:
        for replica, progress in self._progress.items():
            parked = progress.parked
            if parked is not None and (
                force or parked.fetch_offset < self._leo or progress.hw_sent != self._hw
            ):
                self._send_records(replica, parked)

    def _send_records(self, replica: int, request: FetchRequest) -> None:
        progress = self._progress[replica]
        progress.parked = None
        progress.hw_sent = self._hw
        start, end = request.fetch_offset, self._leo
        records = Records(
            start,
            end,
            self._history.boundaries(start, end),
            self._hw,
            memberships=self._members.between(start, end),
        )
        response = FetchResponse(
            self.epoch, self.replica_id, start, request.last_fetched_epoch, records
        )
        self._out.append(Send(replica, response))

    def _on_fetch_request(self, request: FetchRequest, now_ms: int) -> None:
        sender = request.replica_id
        if request.epoch < self.epoch:
            fenced = Fenced(self.epoch, self.leader_id)
            response = FetchResponse(
                self.epoch,
                self.replica_id,
                request.fetch_offset,
                request.last_fetched_epoch,
                fenced,
            )
            self._out.append(Send(sender, response))
            return
        if request.epoch > self.epoch:
            # the sender follows a newer leader than any this replica knows of
            self._become_follower(request.epoch, None, now_ms)
            return
        if self._role is not Role.LEADER or sender not in self._progress:
            # (a removed replica may go on asking: it is told nothing)
            leads = self._role is Role.LEADER
            self._stale(Stale.FETCH_NOT_MEMBER if leads else Stale.FETCH_NOT_LEADER)
            return
        if request.fetch_offset < self._log_start:
            self._send_start_at(sender, request, now_ms)
            return
        epoch, end = self._history.end_offset_for(request.last_fetched_epoch, self._leo)
        if epoch != request.last_fetched_epoch or request.fetch_offset > end:
            response = FetchResponse(
                self.epoch,
                self.replica_id,
                request.fetch_offset,
                request.last_fetched_epoch,
                Diverging(epoch, end),
            )
            self._out.append(Send(sender, response))
            return
        progress = self._progress[sender]
        progress.last_fetch_ms = now_ms
        # Offsets below fetch_offset are on the follower (flushed, under flush_always) and
        # agree with this log. The latest fetch wins, even when it is lower: a follower that
        # discarded its log to repair corrupt data no longer holds what it acknowledged (a
        # stale, reordered fetch only delays the HW; the HW itself never goes back).
        progress.match = request.fetch_offset
        progress.parked = None
        self._update_high_watermark(now_ms)
        self._maybe_timeout_now()
        if request.fetch_offset < self._leo or progress.hw_sent != self._hw:
            self._send_records(sender, request)
        else:
            progress.parked = request  # long poll: answered on new data, new HW or expiry
            progress.parked_since_ms = now_ms

    def _send_start_at(self, sender: int, request: FetchRequest, now_ms: int) -> None:
        """Retention deleted what `sender` would fetch next: every offset below the log start
        is committed, so it may start an empty log there (with the epochs before it) rather
        than fetch records that are gone. Whatever its log holds (a divergent tail
        included) lies below the log start, so no divergence check is needed first."""
        progress = self._progress[sender]
        progress.last_fetch_ms = now_ms  # it is alive (check-quorum), but matches nothing yet
        progress.parked = None
        before = EpochHistory(self._history.entries)
        before.truncate_to(self._log_start)
        start_at = StartAt(
            self._log_start, before.entries, self._members.in_force_at(self._log_start)
        )
        response = FetchResponse(
            self.epoch, self.replica_id, request.fetch_offset, request.last_fetched_epoch, start_at
        )
        self._out.append(Send(sender, response))

    # -- follower --------------------------------------------------------------------------

    def _send_fetch(self, now_ms: int) -> None:
        leader = self.leader_id
        if (
            self._role is not Role.FOLLOWER
            or leader is None
            or leader == self.replica_id
            or self._fetch_sent_ms is not None
            or (self.config.flush_always and self._flushed < self._leo)
        ):
            return
        last_epoch = self._history.last_epoch(self._leo)
        request = FetchRequest(self.epoch, self.replica_id, self._leo, last_epoch)
        self._out.append(Send(leader, request))
        self._fetch_sent_ms = now_ms

    def _on_fetch_response(self, response: FetchResponse, now_ms: int) -> None:
        result = response.result
        if isinstance(result, Fenced):
            if result.leader_id == self.replica_id and self._role is not Role.LEADER:
                self._stale(Stale.OWN_LEADERSHIP)  # an echo of an earlier leadership of its own
                result = Fenced(result.epoch, None)
            if result.epoch > self.epoch or (
                result.epoch == self.epoch
                and self.leader_id is None
                and result.leader_id is not None
                and self._role is not Role.LEADER
            ):
                self._become_follower(result.epoch, result.leader_id, now_ms)
            return
        if response.epoch != self.epoch or self._role is not Role.FOLLOWER:
            self._stale(Stale.FETCH_ANSWER)
            return
        if self.leader_id != response.leader_id:
            # Only the leader this replica fetches from answers it with records. Another
            # leader of this epoch is a message of an older incarnation of the partition or
            # from a replica that lost its state: stale, never followed.
            self._stale(Stale.FETCH_ANSWER if self.leader_id is None else Stale.OTHER_LEADER)
            return
        if (
            self._fetch_sent_ms is None
            or response.fetch_offset != self._leo
            or response.last_fetched_epoch != self._history.last_epoch(self._leo)
        ):
            self._stale(Stale.FETCH_ANSWER)  # a duplicate or an answer to an older log state
            return
        problem = result_problem(result, self._leo, self._hw, self._history)
        if problem is not None:  # (not what it claims to be: an older incarnation's...)
            self._stale(problem)
            return
        self._fetch_sent_ms = None
        self._reset_election_timer(now_ms)
        self._leader_contact_ms = now_ms
        self._prevotes = None
        if isinstance(result, Diverging):
            self._truncate_diverging(result)
        elif isinstance(result, StartAt):
            self._start_at(result)
        else:
            self._append_records(result)
        self._send_fetch(now_ms)

    def _truncate_diverging(self, diverging: Diverging) -> None:
        offset = divergence_offset(diverging, self._leo, self._history)
        assert self._hw <= offset < self._leo, (offset, self._hw, self._leo)  # checked
        self._out.append(TruncateTo(offset))  # the log first: the history must cover it
        self.producers.truncate(offset)
        self._leo = offset
        self._flushed = min(self._flushed, offset)
        if self._history.truncate_to(offset):
            self._out.append(PersistEpochHistory(self._history.entries))
        if self._members.truncate_to(offset):  # back to the membership before
            self._out.append(PersistMembershipHistory(self._members.entries))

    def _start_at(self, start_at: StartAt) -> None:
        """Discard the log and start empty at the leader's log start (see `_send_start_at`).
        The history goes first: after a crash between the two, the old log plus the new
        history still fetch below the leader's log start and get the same answer again."""
        offset = start_at.offset  # (`start_at_problem` checked it moves forward)
        self._history = EpochHistory(start_at.history)
        self._out.append(PersistEpochHistory(self._history.entries))
        # the leader's membership in force at `offset` (this replica's own history may
        # hold entries of a divergent tail it no longer has)
        members = MembershipHistory(self._members.starting, start_at.memberships)
        if members.entries != self._members.entries:
            self._members = members
            self._out.append(PersistMembershipHistory(members.entries))
        self._out.append(ResetLog(offset))
        self.producers.clear()
        self._leo = self._flushed = self._log_start = offset
        if offset > self._hw:  # every offset below the leader's log start is committed
            self._hw = offset
            self._out.append(SetHighWatermark(offset))

    def _append_records(self, records: Records) -> None:
        start, end = records.start_offset, records.end_offset  # (`records_problem` checked)
        if end > start:
            changed = False
            for boundary in records.boundaries:
                if boundary.epoch == self._history.latest_epoch:
                    continue
                self._history.append(boundary.epoch, boundary.start_offset)
                changed = True
            if changed:  # the history before the records it describes
                self._out.append(PersistEpochHistory(self._history.entries))
            if records.memberships:  # so is the membership history
                for entry in records.memberships:
                    self._members.append(entry)
                self._out.append(PersistMembershipHistory(self._members.entries))
            self.producers.apply_frames(records.frames, end)
            self._out.append(AppendFrames(records))
            self._leo = end
        self._leader_hw_seen = records.high_watermark
        self._records_epoch = self.epoch
        if self._state.vote_floor and self._caught_up_after_repair():
            self._clear_vote_floor()
        hw = max(self._hw, min(records.high_watermark, self._leo))
        if hw != self._hw:
            self._hw = hw
            self._out.append(SetHighWatermark(hw))

    # -- votes -----------------------------------------------------------------------------

    def _on_pre_vote_request(self, request: VoteRequest, now_ms: int) -> None:
        """Would this replica vote for the asker in `request.epoch`? Changes nothing, except
        that an asker already in a newer epoch than this one's (it is at `epoch - 1`) shows
        that this replica is behind: it adopts that epoch first, as on any newer epoch."""
        me = self.replica_id
        if request.epoch - 1 > self.epoch:
            self._become_follower(request.epoch - 1, None, now_ms)
        leader_alive = self._role is Role.LEADER or (
            self._leader_contact_ms is not None
            and now_ms - self._leader_contact_ms < self.config.election_timeout_ms_min
        )
        mine = self._log_for_votes()
        theirs = (request.last_epoch, request.log_end_offset)
        granted = (
            self._votes_for(request)
            and request.epoch > self.epoch
            and not leader_alive
            and theirs >= mine
        )
        epoch = request.epoch if granted else self.epoch
        self._out.append(Send(request.candidate_id, VoteResponse(epoch, me, granted, True)))
        if self._role is Role.LEADER and request.candidate_id in self._progress:
            # one of this leader's replicas lost track of it (restarted without its state,
            # or cut off for a while): tell it who leads
            self._out.append(Send(request.candidate_id, BeginEpoch(self.epoch, me)))

    def _votes_for(self, request: VoteRequest) -> bool:
        """Whether this replica may vote on `request`: as a voter of its own membership, or
        when the candidate's membership is newer than its own (a candidate asks only its
        own voters: this replica was made a voter by a record it has not fetched yet). Raft
        (thesis 4.1) and KIP-853 let a replica vote without consulting its membership, and
        a single-server change can need that vote: a replica added as voter that missed
        its record may be part of every majority of the new voters. Votes only count from
        the candidate's own voters (`_on_vote_response`), so either way a replica outside
        the winner's voters never helps to elect it; one vote per epoch per replica holds
        as always (`voted_for`)."""
        return self.is_voter or request.membership_offset > self._members.latest_offset

    def _on_vote_request(self, request: VoteRequest, now_ms: int) -> None:
        if request.pre_vote:
            self._on_pre_vote_request(request, now_ms)
            return
        me = self.replica_id
        if request.epoch > self.epoch:
            self._become_follower(request.epoch, None, now_ms)
        granted = False  # an observer answers, but never grants
        if request.epoch == self.epoch and self._role is Role.FOLLOWER and self._votes_for(request):
            mine = self._log_for_votes()
            theirs = (request.last_epoch, request.log_end_offset)
            if (
                self.leader_id is None
                and self._state.voted_for in (None, request.candidate_id)
                and theirs >= mine
            ):
                granted = True
                self._set_state(QuorumState(self.epoch, request.candidate_id, None))
                self._reset_election_timer(now_ms)
        # PersistQuorumState (if any) is already in the outputs, before this answer
        self._out.append(Send(request.candidate_id, VoteResponse(self.epoch, me, granted)))

    def _on_vote_response(self, response: VoteResponse, now_ms: int) -> None:
        if response.pre_vote:
            if not response.granted:
                if response.epoch > self.epoch:
                    self._become_follower(response.epoch, None, now_ms)
                return
            if (
                self._prevotes is None
                or response.epoch != self.epoch + 1
                or self._role is Role.LEADER
                or not self.is_voter
            ):
                self._stale(Stale.PRE_VOTE_ANSWER)  # a round that ended, or another epoch's
                return
            if response.voter_id in self.membership.voters:
                self._prevotes.add(response.voter_id)
            if len(self._prevotes) >= self.membership.majority and not self.below_vote_floor:
                self._start_election(now_ms)
            return
        if response.epoch > self.epoch:
            self._become_follower(response.epoch, None, now_ms)
            return
        if self._role is not Role.CANDIDATE or response.epoch != self.epoch:
            self._stale(Stale.VOTE_ANSWER)
            return
        if response.granted and response.voter_id in self.membership.voters:
            # (a vote only counts from a voter of this candidate's membership)
            self._votes.add(response.voter_id)
            if len(self._votes) >= self.membership.majority:
                self._become_leader(now_ms)

    def _on_begin_epoch(self, message: BeginEpoch, now_ms: int) -> None:
        leader: int | None = message.leader_id
        if leader == self.replica_id and self._role is not Role.LEADER:
            self._stale(Stale.OWN_LEADERSHIP)  # an echo of an earlier leadership of its own
            leader = None
        if message.epoch > self.epoch:
            self._become_follower(message.epoch, leader, now_ms)
        elif message.epoch == self.epoch:
            if self.leader_id is None and self._role is not Role.LEADER:
                if leader is not None:
                    self._become_follower(message.epoch, leader, now_ms)
            elif self.leader_id != leader:
                # another leader of this epoch: an older incarnation's message, or one of a
                # replica that lost its state (its vote) -- never followed
                self._stale(Stale.OTHER_LEADER)
        else:
            self._stale(Stale.BEGIN_EPOCH)


_REFUSALS = {
    Verdict.FENCED: AckFailure.PRODUCER_FENCED,
    Verdict.OUT_OF_ORDER: AckFailure.OUT_OF_ORDER_SEQUENCE,
    Verdict.DUPLICATE_OLD: AckFailure.DUPLICATE_SEQUENCE,
}


def _refusal(request_id: int, check: Check) -> AckFailed:
    detail = check.epoch if check.verdict is Verdict.FENCED else check.expected_sequence
    return AckFailed(request_id, _REFUSALS[check.verdict], None, detail)
