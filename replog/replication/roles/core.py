"""The state of one partition replica, shared by its role modules (pure, no I/O).

`Core` holds what `Replica` (`replication/replica.py`) knows: the durable quorum state, the
epoch and membership histories, a view of the log (LEO, flushed offset, HW, log start), the
role and each role's own fields, and the outputs of the input under way. The role modules
(`following`, `voting`, `leading`, `transitions`, `steps`) are functions of a `Core`, in the
style of etcd's raft (`stepFollower(r, m)`); only `Replica` is the public face.

**Roles** (`Step`): the public `Role` has three values (what the driver, the server and the
simulator see); the core distinguishes a fourth, PRE_CANDIDATE: a voter whose election
timeout passed and which asks the others whether they would vote for it in the next epoch
(`votes` open or not, see `Core.votes`). Its public role is the one it came from: FOLLOWER
(it still fetches from the leader it lost: an answer ends the round), or CANDIDATE (a
candidate whose election timed out: a late vote of its own epoch still elects it).
"""

from __future__ import annotations

import enum
import random
from collections import Counter, deque
from dataclasses import dataclass
from typing import Protocol

from replog.replication.config import ReplicaConfig
from replog.replication.epochs import EpochHistory
from replog.replication.liveness import NeverHeard
from replog.replication.membership import Membership, MembershipHistory
from replog.replication.messages import FetchRequest
from replog.replication.outputs import Output, PersistQuorumState
from replog.replication.producers import ProducerTable
from replog.replication.stale import Stale
from replog.replication.state import EPOCH_MAX, QuorumState


class Liveness(Protocol):
    """What the node hears of its peers (`liveness.NodeLiveness`)."""

    def heard_ms(self, node: int) -> int | None: ...


class Role(enum.Enum):
    """The role others see (metrics, the driver, the simulator)."""

    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"


class Step(enum.Enum):
    """The role the core steps messages and ticks in (`steps.py`: one table per value)."""

    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre_candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(slots=True)
class Progress:
    """The leader's view of one other replica (voter or observer) in its epoch."""

    voter: bool = True
    match: int = 0
    last_fetch_ms: int | None = None
    hw_sent: int = -1
    parked: FetchRequest | None = None
    parked_since_ms: int = 0
    hw_due_ms: int | None = None  # the parked fetch is answered then to carry a new HW
    begin_sent_ms: int | None = None
    # quiescence (`quiet.py`): its last answer left it holding the whole log, HW included
    # (its next fetch may be held `quiet_fetch_wait_ms`); the parked fetch is held so
    answered_quiet: bool = False
    quiet: bool = False
    quiet_wait_ms: int = 0  # how long this quiet hold lasts (`quiet.park`: jittered)


@dataclass(frozen=True, slots=True)
class PendingAck:
    request_id: int
    base_offset: int
    last_offset: int


class Core:
    """The fields of one replica; see the module docstring."""

    def __init__(
        self,
        config: ReplicaConfig,
        rng: random.Random,
        *,
        state: QuorumState,
        history: EpochHistory,
        members: MembershipHistory,
        log_end_offset: int,
        high_watermark: int,
        log_start_offset: int,
        producers: ProducerTable,
        liveness: Liveness | None = None,
    ) -> None:
        self.config = config
        self.liveness: Liveness = liveness if liveness is not None else NeverHeard()
        self.producers = producers
        self.rng = rng
        self.out: list[Output] = []
        # messages ignored as late, duplicate or stale, by reason (see `stale.py`)
        self.stale_messages: Counter[Stale] = Counter()
        self.state = state
        self.history = history
        self.members = members
        self.leo = log_end_offset
        self.flushed = log_end_offset  # what recovery found is on disk
        assert 0 <= log_start_offset <= log_end_offset, (log_start_offset, log_end_offset)
        # retention deletes committed records only: everything below the log start is
        self.hw = max(min(high_watermark, log_end_offset), log_start_offset)
        self.log_start = log_start_offset
        self.step = Step.FOLLOWER
        # the votes of this replica's candidacy in its epoch: CANDIDATE, or PRE_CANDIDATE
        # after a candidate's election timed out (a late vote still counts); else None
        self.votes: set[int] | None = None
        self.prevotes: set[int] = set()  # PRE_CANDIDATE: the round's grants (itself too)
        self.leader_contact_ms: int | None = None  # last word from this epoch's leader
        self.election_deadline_ms = 0
        # it has led or heard a leader since it started (`ReplicaConfig`'s first election
        # timeout applies until then)
        self.leader_known = False
        # a follower whose leader said it holds the whole log, HW included, and whose
        # leader's node is heard: long timers until an answer or a wake (`quiet.py`)
        self.quiet = False
        # follower
        self.fetch_sent_ms: int | None = None
        self.leader_hw_seen = 0  # the HW in the last records answer
        self.records_epoch = 0  # the epoch of that answer
        # leader
        self.progress: dict[int, Progress] = {}
        self.control_offset = -1
        self.leader_since_ms = 0
        self.transfer: tuple[int, int] | None = None  # (target, give up at ms)
        self.timeout_now_sent = False
        self.pending_leader: deque[PendingAck] = deque()
        self.pending_all: deque[PendingAck] = deque()

    # -- views -----------------------------------------------------------------------------

    @property
    def replica_id(self) -> int:
        return self.config.replica_id

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int | None:
        return self.state.leader_id

    @property
    def role(self) -> Role:
        if self.step is Step.PRE_CANDIDATE:
            return Role.FOLLOWER if self.votes is None else Role.CANDIDATE
        return _ROLES[self.step]

    @property
    def membership(self) -> Membership:
        return self.members.current

    @property
    def is_voter(self) -> bool:
        return self.replica_id in self.membership.voters

    @property
    def below_vote_floor(self) -> bool:
        return self.leo < self.state.vote_floor

    def last_epoch(self) -> int:
        """The epoch of the last record of the log (0: empty)."""
        return self.history.last_epoch(self.leo)

    def own_match(self) -> int:
        return self.flushed if self.config.flush_always else self.leo

    def log_for_votes(self) -> tuple[int, int]:
        """(last epoch, end) a candidate's log must be at least as up to date as: this
        log's, or the former log's while the vote floor is set."""
        mine = (self.last_epoch(), self.leo)
        if self.below_vote_floor:
            return max(mine, (self.state.vote_floor_epoch, self.state.vote_floor))
        return mine

    def caught_up_after_repair(self) -> bool:
        """Durably back at what it held before its log was discarded, or durably holding
        everything its leader has committed once that leader's HW covers its own epoch, an
        epoch after the last one of the discarded log (it then covers every record committed
        before, this replica's acknowledgements included: it can have acknowledged no record
        of this epoch, so none past the epoch's start; in the discarded log's last epoch it
        may have acknowledged records past the HW, which a late fetch of it lets the leader
        count). A floor of an unknown former log (`EPOCH_MAX`: a lost disk, a replica
        added) has only the HW to go by. Durably: a power loss must not take the refetched
        records again."""
        end = self.flushed if self.config.flush_always else self.leo
        if end >= self.state.vote_floor:
            return True
        entries = self.history.entries
        floor_epoch = self.state.vote_floor_epoch
        later = self.epoch > floor_epoch or floor_epoch == EPOCH_MAX
        epoch_start = (
            entries[-1].start_offset
            if later and entries and entries[-1].epoch == self.epoch
            else None
        )
        return epoch_start is not None and epoch_start < self.leader_hw_seen <= end

    # -- changes -----------------------------------------------------------------------------

    def stale(self, reason: Stale) -> None:
        self.stale_messages[reason] += 1

    def take(self) -> list[Output]:
        out, self.out = self.out, []
        return out

    def set_state(self, state: QuorumState) -> None:
        assert state.epoch >= self.state.epoch, (state, self.state)
        if state.vote_floor != self.state.vote_floor and state.vote_floor == 0:
            # the callers build states without the floor: it stays until it is cleared
            s = self.state
            state = QuorumState(
                state.epoch, state.voted_for, state.leader_id, s.vote_floor, s.vote_floor_epoch
            )
        if state != self.state:
            self.state = state
            self.out.append(PersistQuorumState(state))

    def clear_vote_floor(self) -> None:
        s = self.state
        if s.vote_floor:
            self.state = QuorumState(s.epoch, s.voted_for, s.leader_id)
            self.out.append(PersistQuorumState(self.state))

    def leader_heard(self, now_ms: int) -> bool:
        """This replica heard from its leader within `election_timeout_ms_min`, or is quiet
        (its leader's node is heard: a change would have woken it)."""
        contact = self.leader_contact_ms
        if self.quiet:
            return True
        return contact is not None and now_ms - contact < self.config.election_timeout_ms_min

    def reset_election_timer(self, now_ms: int) -> None:
        self.quiet = False
        cfg = self.config
        low, high = cfg.election_timeout_ms_min, cfg.election_timeout_ms_max
        if not self.leader_known and cfg.first_election_timeout_ms_max:
            low, high = cfg.first_election_timeout_ms_min, cfg.first_election_timeout_ms_max
        self.election_deadline_ms = now_ms + self.rng.randint(low, high)


_ROLES = {Step.FOLLOWER: Role.FOLLOWER, Step.CANDIDATE: Role.CANDIDATE, Step.LEADER: Role.LEADER}
