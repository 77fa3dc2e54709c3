"""The durable files of a replica, beside its log (written atomically by the driver).

    quorum-state    JSON {"epoch": int, "voted_for": int|null, "leader_id": int|null}
                    (+ "vote_floor", "vote_floor_epoch" after a repair)
    epoch-history   JSON [[epoch, start_offset], ...]
    membership-history  JSON [[offset, [voter, ...], [observer, ...]], ...]

The driver writes `quorum-state` in its durable form (`durable_quorum_state`: a leader's
own leadership is not kept, as a restart drops it anyway) and skips a write whose form is
the one it last wrote: winning an election costs no fsync beyond the vote's. Of two
`PersistQuorumState` outputs in a row only the second is written (nothing is performed
between them, and it supersedes the first): a voter that learns a new epoch from the vote
request it grants writes once, not twice.

Loaders validate what they read (CorruptDataError for anything out of range: the replica
does not open; nothing is guessed). Also the values of the control records a leader
appends: the epoch marker (`replog.v1.LeaderEpochMarker`) and membership records.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from replog.replication.epochs import EpochStart
from replog.replication.membership import Membership, MembershipEntry
from replog.replication.state import EPOCH_MAX, NODE_ID_MAX, OFFSET_MAX, QuorumState
from replog.storage import checkpoint
from replog.storage.segment_log import storage_error
from replog.storage.space import DiskSpace

QUORUM_STATE_FILE = "quorum-state"
EPOCH_HISTORY_FILE = "epoch-history"
MEMBERSHIP_HISTORY_FILE = "membership-history"
MEMBERSHIP_RECORD_PREFIX = b"\x00\x02\x00\x01"  # 0x00, record type 2, version 1


def load_quorum_state(directory: Path) -> QuorumState:
    """The persisted quorum state, validated: CorruptDataError for anything out of range
    (the replica does not open; nothing is guessed)."""
    state = checkpoint.load_json(directory / QUORUM_STATE_FILE, _quorum_state)
    return QuorumState() if state is None else state


def _quorum_state(data: Any) -> QuorumState | None:
    if not isinstance(data, dict):
        return None
    floor, floor_epoch = data.get("vote_floor", 0), data.get("vote_floor_epoch", 0)
    state = QuorumState(data["epoch"], data["voted_for"], data["leader_id"], floor, floor_epoch)
    ok = (
        _in_range(state.epoch, EPOCH_MAX)
        and _in_range(floor, OFFSET_MAX)
        and _in_range(floor_epoch, EPOCH_MAX)
        and all(i is None or _in_range(i, NODE_ID_MAX) for i in (state.voted_for, state.leader_id))
    )
    return state if ok else None


def durable_quorum_state(s: QuorumState, replica_id: int) -> QuorumState:
    """What a restart makes of `s`: a replica that was the leader starts again as a
    follower with no leader known (`Replica.__init__` drops a `leader_id` of its own). So
    the driver writes this form, and skips a write whose form equals the last one written:
    a leader's "I lead" (epoch and vote unchanged, `leader_id` now its own) costs no fsync,
    and what the disk holds is what a crash right before that write would have left, a
    state every restart already handles."""
    if s.leader_id == replica_id:
        return QuorumState(s.epoch, s.voted_for, None, s.vote_floor, s.vote_floor_epoch)
    return s


def encode_quorum_state(s: QuorumState) -> bytes:
    data: dict[str, int | None] = {
        "epoch": s.epoch,
        "voted_for": s.voted_for,
        "leader_id": s.leader_id,
    }
    if s.vote_floor:  # only after a repair: files of older versions stay as they were
        data["vote_floor"] = s.vote_floor
        data["vote_floor_epoch"] = s.vote_floor_epoch
    return json.dumps(data).encode()


def load_epoch_history(directory: Path) -> list[EpochStart]:
    """The persisted epoch history, validated: epochs strictly increasing, start offsets
    non-decreasing, every number in range; CorruptDataError otherwise."""
    return checkpoint.load_json(directory / EPOCH_HISTORY_FILE, _epoch_history) or []


def _epoch_history(data: Any) -> list[EpochStart] | None:
    out = [EpochStart(e, s) for e, s in data]
    ok = all(_in_range(b.epoch, EPOCH_MAX) and _in_range(b.start_offset, OFFSET_MAX) for b in out)
    ok = ok and all(
        a.epoch < b.epoch and a.start_offset <= b.start_offset for a, b in itertools.pairwise(out)
    )
    return out if ok else None


def load_membership_history(directory: Path) -> list[MembershipEntry]:
    """The persisted membership history, validated: offsets strictly increasing, ids in
    range, each membership valid; CorruptDataError otherwise. A missing file (every file
    written before membership changes existed) is an empty history."""
    return checkpoint.load_json(directory / MEMBERSHIP_HISTORY_FILE, _membership_history) or []


def _membership_history(data: Any) -> list[MembershipEntry] | None:
    out = [
        MembershipEntry(offset, Membership(tuple(voters), tuple(observers)))
        for offset, voters, observers in data
    ]
    ok = all(
        _in_range(e.offset, OFFSET_MAX)
        and e.membership.problem() is None
        and all(_in_range(i, NODE_ID_MAX) for i in e.membership.replicas)
        for e in out
    )
    ok = ok and all(a.offset < b.offset for a, b in itertools.pairwise(out))
    return out if ok else None


def encode_membership_history(entries: Sequence[MembershipEntry]) -> bytes:
    data = [[e.offset, list(e.membership.voters), list(e.membership.observers)] for e in entries]
    return json.dumps(data).encode()


def encode_membership(voters: Sequence[int], observers: Sequence[int]) -> bytes:
    """The value of a membership record (see the module docstring)."""
    from replog.v1 import replication_pb2

    change = replication_pb2.MembershipChange(voters=voters, observers=observers)
    return MEMBERSHIP_RECORD_PREFIX + bytes(change.SerializeToString())


def decode_membership(value: bytes) -> Membership | None:
    """The membership in a control record's value; None for other control records."""
    if not value.startswith(MEMBERSHIP_RECORD_PREFIX):
        return None
    from replog.v1 import replication_pb2

    change = replication_pb2.MembershipChange.FromString(value[len(MEMBERSHIP_RECORD_PREFIX) :])
    return Membership(tuple(change.voters), tuple(change.observers))


def _in_range(value: object, maximum: int) -> bool:
    return type(value) is int and 0 <= value <= maximum


def encode_marker(epoch: int, leader_id: int, voters: Sequence[int]) -> bytes:
    from replog.v1 import replication_pb2

    marker = replication_pb2.LeaderEpochMarker(epoch=epoch, leader_id=leader_id, voters=voters)
    return bytes(marker.SerializeToString())


def _write_state_file(space: DiskSpace, path: Path, data: bytes) -> None:
    """A durable-state file, atomically; the typed error of the disk's OSError (a full disk
    fails the output, which drops the outputs after it: a vote that cannot be persisted is
    never sent)."""
    try:
        space.write_vital(partial(checkpoint.write_text_state, path, data))
    except OSError as exc:
        raise storage_error(exc, f"write {path}") from exc
