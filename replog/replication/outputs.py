"""What the core asks its driver to do. Every input returns a list of these, in order.

The driver performs them **in list order**, and each `Persist*`, `TruncateTo` and `ResetLog` must be
durable before the driver performs the next output (so a vote is on disk before the answer
leaves, and the epoch history is on disk before the records it describes). Log appends need
not be flushed before the next output: the driver reports flushes with `Replica.flushed`.

| output                | the driver                                                       |
|-----------------------|------------------------------------------------------------------|
| PersistQuorumState    | writes `quorum-state` atomically                                 |
| PersistEpochHistory   | writes `epoch-history` atomically (the whole list)               |
| PersistMembershipHistory | writes `membership-history` atomically (the whole list)       |
| AppendRecords         | `PartitionLog.append(values)` (offsets must come out as given);  |
|                       | with a `header`, that control record first, then the values      |
| AppendPieces          | several AppendRecords merged by `coalesce`: one write            |
| AppendControl         | encodes `marker` (LeaderEpochMarker or MembershipChange) and     |
|                       | appends it, control=True                                         |
| AppendFrames          | `PartitionLog.append_frames(records.frames)`                     |
| TruncateTo            | `PartitionLog.truncate_to(offset)`                               |
| ResetLog              | `PartitionLog.reset_to(offset)` (empty log from `offset` on)     |
| SetHighWatermark      | `PartitionLog.set_high_watermark(offset)`; wakes consumers       |
| Send                  | sends `message` to replica `to` (best effort)                    |
| AckCompleted / Failed | completes the client's Append (or membership change) `request_id` |

The membership history goes to disk before the record it describes, like the epoch history
(so a replica never holds a membership record its history does not know), and after a
truncation (a history entry past the log end is dropped on restart).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from replog.replication.epochs import EpochStart
from replog.replication.membership import MembershipEntry
from replog.replication.messages import Message, Records
from replog.replication.producers import BatchHeader
from replog.replication.state import QuorumState


class Acks(enum.Enum):
    NONE = "none"
    LEADER = "leader"
    ALL = "all"


class AckFailure(enum.Enum):
    """Why an Append failed. NOT_LEADER: nothing was appended (retry elsewhere is safe).
    OUTCOME_UNKNOWN: the leader appended the batch, then lost leadership before it committed;
    it may still commit (or be truncated)."""

    NOT_LEADER = "NOT_LEADER"
    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
    # Idempotent producers (nothing was appended): see `producers.Verdict`.
    PRODUCER_FENCED = "PRODUCER_FENCED"
    OUT_OF_ORDER_SEQUENCE = "OUT_OF_ORDER_SEQUENCE"
    DUPLICATE_SEQUENCE = "DUPLICATE_SEQUENCE"
    # Membership changes (`Replica.change_membership`; nothing was appended):
    # the leader's own epoch is not committed yet (Ongaro's single-server-change fix): retry
    EPOCH_NOT_COMMITTED = "EPOCH_NOT_COMMITTED"
    # a membership record above the HW: one change at a time; retry once it commits
    MEMBERSHIP_CHANGE_IN_PROGRESS = "MEMBERSHIP_CHANGE_IN_PROGRESS"
    # a replica added as voter is not an observer that has fetched up to the leader's HW
    NOT_CAUGHT_UP = "NOT_CAUGHT_UP"
    # malformed sets (no voter, a duplicate, a replica in both sets)
    INVALID_MEMBERSHIP = "INVALID_MEMBERSHIP"
    # the voters would change by more than one replica (add or remove one at a time)
    TOO_MANY_VOTER_CHANGES = "TOO_MANY_VOTER_CHANGES"
    # the leader would stop being a voter: transfer leadership first
    LEADER_REMOVAL = "LEADER_REMOVAL"


@dataclass(frozen=True, slots=True)
class LeaderEpochMarker:
    """Value of the control record a leader appends on election."""

    epoch: int
    leader_id: int
    voters: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MembershipChange:
    """Value of the control record a leader appends to change the membership (see
    `membership.py`)."""

    voters: tuple[int, ...]
    observers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PersistQuorumState:
    state: QuorumState


@dataclass(frozen=True, slots=True)
class PersistEpochHistory:
    entries: tuple[EpochStart, ...]


@dataclass(frozen=True, slots=True)
class PersistMembershipHistory:
    entries: tuple[MembershipEntry, ...]


@dataclass(frozen=True, slots=True)
class AppendRecords:
    """`values` from `base_offset` on; with a `header` (an idempotent producer's batch), the
    header's control record takes `base_offset` and the values follow it."""

    base_offset: int
    values: tuple[bytes, ...]
    header: BatchHeader | None = None

    @property
    def frame_count(self) -> int:
        return len(self.values) + (self.header is not None)


@dataclass(frozen=True, slots=True)
class AppendPieces:
    """Consecutive `AppendRecords` some of which carry a header, as one write."""

    base_offset: int
    pieces: tuple[AppendRecords, ...]

    @property
    def frame_count(self) -> int:
        return sum(p.frame_count for p in self.pieces)


@dataclass(frozen=True, slots=True)
class AppendControl:
    offset: int
    marker: LeaderEpochMarker | MembershipChange


@dataclass(frozen=True, slots=True)
class AppendFrames:
    records: Records


@dataclass(frozen=True, slots=True)
class TruncateTo:
    offset: int


@dataclass(frozen=True, slots=True)
class ResetLog:
    """Discard the whole log and start it empty at `offset` (HW = `offset`): the leader's log
    starts past this replica's end (`PartitionLog.reset_to`)."""

    offset: int


@dataclass(frozen=True, slots=True)
class SetHighWatermark:
    offset: int


@dataclass(frozen=True, slots=True)
class Send:
    to: int
    message: Message


@dataclass(frozen=True, slots=True)
class AckCompleted:
    request_id: int
    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class AckFailed:
    request_id: int
    failure: AckFailure
    leader_id: int | None
    detail: int = -1  # PRODUCER_FENCED: newest epoch; OUT_OF_ORDER_SEQUENCE: expected seq


Output = (
    PersistQuorumState
    | PersistEpochHistory
    | PersistMembershipHistory
    | AppendRecords
    | AppendPieces
    | AppendControl
    | AppendFrames
    | TruncateTo
    | ResetLog
    | SetHighWatermark
    | Send
    | AckCompleted
    | AckFailed
)
