"""Messages replicas exchange (the shapes of `proto/replog/v1/replication.proto`).

The core never encodes them; the driver maps them to and from protobuf. Frames travel
inside `Records.frames`: the core leaves it empty when it decides what to send (it never
reads the log) and the driver fills it with the raw frames of `[start_offset, end_offset)`,
clipping `end_offset` to what fitted in `max_bytes` (`Records.clipped`).

`BeginEpoch` has no message in the proto yet (KIP-595's `BeginQuorumEpoch`): a new leader
sends it so that voters learn who leads the epoch without waiting for a timeout.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from replog.replication.epochs import EpochStart
from replog.replication.membership import MembershipEntry


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A follower's pull: it holds every offset below `fetch_offset`."""

    epoch: int
    replica_id: int
    fetch_offset: int
    last_fetched_epoch: int


@dataclass(frozen=True, slots=True)
class Records:
    """Records `[start_offset, end_offset)`, the epochs that start inside, and the leader HW;
    `memberships`: the membership changes among the records (see `membership.py`)."""

    start_offset: int
    end_offset: int
    boundaries: tuple[EpochStart, ...]
    high_watermark: int
    frames: bytes = b""
    memberships: tuple[MembershipEntry, ...] = ()

    def clipped(self, end_offset: int, frames: bytes) -> Records:
        """The same answer carrying only `[start_offset, end_offset)` as `frames`."""
        assert self.start_offset <= end_offset <= self.end_offset, (self, end_offset)
        kept = tuple(b for b in self.boundaries if b.start_offset < end_offset)
        members = tuple(m for m in self.memberships if m.offset < end_offset)
        return dataclasses.replace(
            self, end_offset=end_offset, boundaries=kept, frames=frames, memberships=members
        )


@dataclass(frozen=True, slots=True)
class Diverging:
    """The follower's log differs from the leader's after `end_offset` of `epoch`."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class Fenced:
    """The request's epoch is older than `epoch`, led by `leader_id` (None: unknown)."""

    epoch: int
    leader_id: int | None


@dataclass(frozen=True, slots=True)
class StartAt:
    """The request's fetch offset is below the leader's log start (retention deleted it):
    start an empty log at `offset`, whose earlier epochs are `history` (every offset below
    `offset` is committed); `memberships`: the membership change in force at `offset`
    (empty: the starting membership)."""

    offset: int
    history: tuple[EpochStart, ...]
    memberships: tuple[MembershipEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """The answer to the `FetchRequest` whose offset and epoch it echoes."""

    epoch: int
    leader_id: int
    fetch_offset: int
    last_fetched_epoch: int
    result: Records | Diverging | Fenced | StartAt


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """A vote for `candidate_id` in `epoch`. With `pre_vote`, only a question (KIP-996,
    Raft thesis 9.6): would you vote for me in `epoch`? The voter changes nothing.
    `membership_offset`: the offset of the candidate's latest membership record (-1: the
    starting membership; see `Replica._votes_for`)."""

    epoch: int
    candidate_id: int
    last_epoch: int
    log_end_offset: int
    pre_vote: bool = False
    membership_offset: int = -1


@dataclass(frozen=True, slots=True)
class VoteResponse:
    """`epoch`: the one asked about when granted, else the voter's own."""

    epoch: int
    voter_id: int
    granted: bool
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class BeginEpoch:
    """`leader_id` won the election of `epoch`."""

    epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """Leadership transfer (Raft thesis 3.10): `leader_id`, leader of `epoch`, tells the
    receiver that its log is caught up and that it should start an election at once,
    skipping the pre-vote and its election timeout."""

    epoch: int
    leader_id: int


Message = FetchRequest | FetchResponse | VoteRequest | VoteResponse | BeginEpoch | TimeoutNow
