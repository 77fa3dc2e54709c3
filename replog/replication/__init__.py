"""The replication protocol core: pull-based Raft per partition (see docs/design.md).

Pure logic, no I/O: `Replica` takes inputs (messages, ticks, client appends, flush facts)
and returns `Output`s for a driver to perform.
"""

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
from replog.replication.replica import Replica, Role
from replog.replication.state import QuorumState

__all__ = [
    "AckCompleted",
    "AckFailed",
    "AckFailure",
    "Acks",
    "AppendControl",
    "AppendFrames",
    "AppendRecords",
    "BeginEpoch",
    "Diverging",
    "EpochHistory",
    "EpochStart",
    "Fenced",
    "FetchRequest",
    "FetchResponse",
    "LeaderEpochMarker",
    "Membership",
    "MembershipChange",
    "MembershipEntry",
    "MembershipHistory",
    "Message",
    "Output",
    "PersistEpochHistory",
    "PersistMembershipHistory",
    "PersistQuorumState",
    "QuorumState",
    "Records",
    "Replica",
    "ReplicaConfig",
    "ResetLog",
    "Role",
    "Send",
    "SetHighWatermark",
    "StartAt",
    "TimeoutNow",
    "TruncateTo",
    "VoteRequest",
    "VoteResponse",
]
