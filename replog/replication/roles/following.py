"""A follower's side of the log (pure): fetch from the leader, apply its answers.

A follower (and a pre-candidate that came from one: it still fetches from the leader it
lost) sends one `FetchRequest` at a time to its leader (`send_fetch`) and applies the
answer: records appended, a divergent tail truncated, or an empty log started at the
leader's log start (`accept_fetch_response`, after `steps.py` checked the epoch).
"""

from __future__ import annotations

from replog.replication.epochs import EpochHistory
from replog.replication.membership import MembershipHistory
from replog.replication.messages import (
    Diverging,
    Fenced,
    FetchRequest,
    FetchResponse,
    Records,
    StartAt,
)
from replog.replication.outputs import (
    AppendFrames,
    PersistEpochHistory,
    PersistMembershipHistory,
    ResetLog,
    Send,
    SetHighWatermark,
    TruncateTo,
)
from replog.replication.roles import quiet
from replog.replication.roles.core import Core, Step
from replog.replication.stale import Stale, divergence_offset, result_problem


def send_fetch(c: Core, now_ms: int) -> None:
    """Ask the leader for what follows this log, unless a fetch is out already (or, under
    flush=always, the log is not flushed yet: the fetch offset acknowledges it)."""
    leader = c.leader_id
    if (
        c.step not in (Step.FOLLOWER, Step.PRE_CANDIDATE)
        or leader is None
        or leader == c.replica_id
        or c.fetch_sent_ms is not None
        or (c.config.flush_always and c.flushed < c.leo)
    ):
        return
    request = FetchRequest(c.epoch, c.replica_id, c.leo, c.last_epoch())
    c.out.append(Send(leader, request))
    c.fetch_sent_ms = now_ms


def accept_fetch_response(c: Core, response: FetchResponse, now_ms: int) -> None:
    """The leader's answer of this epoch (not `Fenced`) to the fetch under way: apply it,
    unless it is from another leader, a duplicate, or not what it claims to be."""
    result = response.result
    assert not isinstance(result, Fenced), result  # (`steps.py` takes those)
    if c.leader_id != response.leader_id:
        # Only the leader this replica fetches from answers it with records. Another
        # leader of this epoch is a message of an older incarnation of the partition or
        # from a replica that lost its state: stale, never followed.
        c.stale(Stale.FETCH_ANSWER if c.leader_id is None else Stale.OTHER_LEADER)
        return
    if (
        c.fetch_sent_ms is None
        or response.fetch_offset != c.leo
        or response.last_fetched_epoch != c.last_epoch()
    ):
        c.stale(Stale.FETCH_ANSWER)  # a duplicate or an answer to an older log state
        return
    problem = result_problem(result, c.leo, c.hw, c.history)
    if problem is not None:  # (not what it claims to be: an older incarnation's...)
        c.stale(problem)
        return
    c.fetch_sent_ms = None
    c.leader_known = True
    c.reset_election_timer(now_ms)
    c.leader_contact_ms = now_ms
    if c.step is Step.PRE_CANDIDATE:  # the leader answers after all: the round ends
        assert c.votes is None, "a candidate follows no leader"
        c.step = Step.FOLLOWER
        c.prevotes = set()
    if isinstance(result, Diverging):
        _truncate_diverging(c, result)
    elif isinstance(result, StartAt):
        _start_at(c, result)
    else:
        _append_records(c, result)
        quiet.enter(c, result, now_ms)
    send_fetch(c, now_ms)


def _truncate_diverging(c: Core, diverging: Diverging) -> None:
    offset = divergence_offset(diverging, c.leo, c.history)
    assert c.hw <= offset < c.leo, (offset, c.hw, c.leo)  # checked
    c.out.append(TruncateTo(offset))  # the log first: the history must cover it
    c.producers.truncate(offset)
    c.leo = offset
    c.flushed = min(c.flushed, offset)
    if c.history.truncate_to(offset):
        c.out.append(PersistEpochHistory(c.history.entries))
    if c.members.truncate_to(offset):  # back to the membership before
        c.out.append(PersistMembershipHistory(c.members.entries))


def _start_at(c: Core, start_at: StartAt) -> None:
    """Discard the log and start empty at the leader's log start (see
    `leading.send_start_at`). The history goes first: after a crash between the two, the
    old log plus the new history still fetch below the leader's log start and get the same
    answer again."""
    offset = start_at.offset  # (`start_at_problem` checked it moves forward)
    c.history = EpochHistory(start_at.history)
    c.out.append(PersistEpochHistory(c.history.entries))
    # the leader's membership in force at `offset` (this replica's own history may
    # hold entries of a divergent tail it no longer has)
    members = MembershipHistory(c.members.starting, start_at.memberships)
    if members.entries != c.members.entries:
        c.members = members
        c.out.append(PersistMembershipHistory(members.entries))
    c.out.append(ResetLog(offset))
    c.producers.clear()
    c.leo = c.flushed = c.log_start = offset
    if offset > c.hw:  # every offset below the leader's log start is committed
        c.hw = offset
        c.out.append(SetHighWatermark(offset))


def _append_records(c: Core, records: Records) -> None:
    start, end = records.start_offset, records.end_offset  # (`records_problem` checked)
    if end > start:
        changed = False
        for boundary in records.boundaries:
            if boundary.epoch == c.history.latest_epoch:
                continue
            c.history.append(boundary.epoch, boundary.start_offset)
            changed = True
        if changed:  # the history before the records it describes
            c.out.append(PersistEpochHistory(c.history.entries))
        if records.memberships:  # so is the membership history
            for entry in records.memberships:
                c.members.append(entry)
            c.out.append(PersistMembershipHistory(c.members.entries))
        c.producers.apply_frames(records.frames, end)
        c.out.append(AppendFrames(records))
        c.leo = end
    c.leader_hw_seen = records.high_watermark
    c.records_epoch = c.epoch
    if c.state.vote_floor and c.caught_up_after_repair():
        c.clear_vote_floor()
    hw = max(c.hw, min(records.high_watermark, c.leo))
    if hw != c.hw:
        c.hw = hw
        c.out.append(SetHighWatermark(hw))
