"""Stale inputs: messages a replica ignores, and why (pure, no I/O).

A message may arrive late, twice, out of order, from a removed member, or from an older
incarnation of the partition (a topic deleted and created again under the same name). None
of that is a broken invariant: the replica drops the message and counts it in
`Replica.stale_messages` under one of the reasons below (the server exports them as
`replog_replication_stale_messages_total{reason}`). The checks here guard the history and
membership invariants (`epochs.py`, `membership.py`, asserted there) against what a message
says, so that no message can reach those asserts.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from replog.replication.epochs import EpochHistory, EpochStart
from replog.replication.membership import MembershipEntry
from replog.replication.messages import Diverging, Records, StartAt


class Stale(enum.Enum):
    """Why a message was ignored (the metric's `reason` label)."""

    PRE_VOTE_ANSWER = "pre_vote_answer"  # no pre-vote round of that epoch is open
    VOTE_ANSWER = "vote_answer"  # not a candidate of that epoch
    FETCH_ANSWER = "fetch_answer"  # a duplicate, or an answer to an older request
    FETCH_NOT_LEADER = "fetch_not_leader"  # a fetch to a replica that does not lead
    FETCH_NOT_MEMBER = "fetch_not_member"  # a fetch from a replica outside the membership
    OTHER_LEADER = "other_leader"  # names another leader of this replica's epoch
    OWN_LEADERSHIP = "own_leadership"  # names this replica as leader, it does not lead
    INVALID_RECORDS = "invalid_records"  # records that do not extend this log
    INVALID_DIVERGENCE = "invalid_divergence"  # would not move back, or below the HW
    INVALID_START = "invalid_start"  # a log start that does not move this log forward
    TIMEOUT_NOW = "timeout_now"  # not from this replica's leader of this epoch
    BEGIN_EPOCH = "begin_epoch"  # of an epoch older than this replica's


def history_problem(entries: Sequence[EpochStart], after: EpochStart | None = None) -> bool:
    """Whether `entries` (appended after `after`) break the epoch history's order."""
    last = after
    for entry in entries:
        if entry.epoch <= 0 or entry.start_offset < 0:
            return True
        if last is not None and (
            entry.epoch <= last.epoch or entry.start_offset < last.start_offset
        ):
            return True
        last = entry
    return False


def memberships_problem(
    entries: Sequence[MembershipEntry], low: int, high: int | None = None
) -> bool:
    """Whether `entries` are not valid changes at strictly increasing offsets in
    `[low, high)` (`high` None: no upper bound)."""
    previous = low - 1
    for entry in entries:
        if entry.offset <= previous or (high is not None and entry.offset >= high):
            return True
        if entry.membership.problem() is not None:
            return True
        previous = entry.offset
    return False


def records_problem(records: Records, log_end: int, history_last: EpochStart | None) -> bool:
    """Whether `records` do not extend a log ending at `log_end` whose history ends with
    `history_last`: they must start at the log end, and carry new epochs and membership
    changes inside their range, in order."""
    start, end = records.start_offset, records.end_offset
    if start != log_end or end < start:
        return True
    latest = history_last.epoch if history_last is not None else 0
    new = [b for b in records.boundaries if b.epoch != latest]
    if any(not start <= b.start_offset < end for b in new):
        return True
    return history_problem(new, history_last) or memberships_problem(
        records.memberships, start, end
    )


def start_at_problem(start_at: StartAt, log_end: int) -> bool:
    """Whether a leader's log start does not move a log ending at `log_end` forward, or
    comes with a history or memberships that are out of order or past it."""
    offset = start_at.offset
    if offset <= log_end or history_problem(start_at.history):
        return True
    if any(e.start_offset >= offset for e in start_at.history):
        return True
    return memberships_problem(start_at.memberships, 0, offset)


def divergence_offset(diverging: Diverging, log_end: int, history: EpochHistory) -> int:
    """Where a follower with `history` and `log_end` truncates on `diverging`."""
    _, own_end = history.end_offset_for(diverging.epoch, log_end)
    return min(diverging.end_offset, own_end)


def result_problem(
    result: Records | Diverging | StartAt, log_end: int, hw: int, history: EpochHistory
) -> Stale | None:
    """Why a records answer of a follower's leader, to its latest fetch, cannot be applied
    to its log (None: it can). Only a message that is not what it claims to be (an older
    incarnation's, a replica's that lost its state) gets one."""
    if isinstance(result, Diverging):
        if not hw <= divergence_offset(result, log_end, history) < log_end:
            return Stale.INVALID_DIVERGENCE  # (never truncates a committed record)
    elif isinstance(result, StartAt):
        if start_at_problem(result, log_end):
            return Stale.INVALID_START
    else:
        entries = history.entries
        if records_problem(result, log_end, entries[-1] if entries else None):
            return Stale.INVALID_RECORDS
    return None
