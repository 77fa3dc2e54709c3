"""Role changes (pure): follow, pre-vote, campaign, lead.

    FOLLOWER --election timeout (voter)--> PRE_CANDIDATE --majority of pre-votes--> CANDIDATE
    CANDIDATE --election timeout--> PRE_CANDIDATE (its candidacy open: a late vote elects it)
    CANDIDATE / PRE_CANDIDATE (candidacy open) --majority of votes--> LEADER
    any --newer epoch, BeginEpoch, check-quorum lost--> FOLLOWER
    PRE_CANDIDATE --an answer of its leader's--> FOLLOWER (`following.accept_fetch_response`)

An observer never leaves FOLLOWER: its election timeout makes it forget a silent leader
(`lose_leader`).
"""

from __future__ import annotations

from replog.replication.messages import BeginEpoch, VoteRequest
from replog.replication.outputs import AppendControl, LeaderEpochMarker, PersistEpochHistory, Send
from replog.replication.roles.core import Core, Progress, Role, Step
from replog.replication.roles.following import send_fetch
from replog.replication.roles.leading import fail_pending_acks, update_high_watermark
from replog.replication.state import QuorumState


def become_follower(c: Core, epoch: int, leader_id: int | None, now_ms: int) -> None:
    """Follow `leader_id` (None: unknown) in `epoch` (>= the current one)."""
    if c.step is Step.LEADER:
        fail_pending_acks(c)
    c.transfer = None
    voted_for = c.state.voted_for if epoch == c.state.epoch else None
    c.set_state(QuorumState(epoch, voted_for, leader_id))
    c.step = Step.FOLLOWER
    c.votes = None
    c.prevotes = set()
    c.leader_contact_ms = now_ms if leader_id is not None else None
    c.leader_known = c.leader_known or leader_id is not None
    c.progress = {}
    c.fetch_sent_ms = None
    c.reset_election_timer(now_ms)
    send_fetch(c, now_ms)


def election_timeout(c: Core, now_ms: int) -> None:
    """Nothing valid came from a leader (or of an election) within the election timeout:
    a voter asks for pre-votes, an observer forgets its leader."""
    if c.is_voter:
        start_prevote(c, now_ms)
    else:
        _lose_leader(c, now_ms)


def _lose_leader(c: Core, now_ms: int) -> None:
    """Observer: forget the leader and wait for a BeginEpoch (or a Fenced answer) instead
    of campaigning."""
    assert not c.is_voter and c.role is Role.FOLLOWER
    if c.leader_id is not None:
        become_follower(c, c.epoch, None, now_ms)
    else:
        c.reset_election_timer(now_ms)


def start_prevote(c: Core, now_ms: int) -> None:
    """Ask the voters whether they would vote for this replica in the next epoch."""
    me = c.replica_id
    c.reset_election_timer(now_ms)
    c.step = Step.PRE_CANDIDATE  # (a candidate's votes stay open: `Core.votes`)
    c.prevotes = {me}
    # Below its vote floor it never starts the election, but it still asks: a pre-vote
    # in a newer epoch moves the others there, so that it learns who leads.
    if len(c.prevotes) >= c.membership.majority and not c.below_vote_floor:
        start_election(c, now_ms)
        return
    members = c.members.latest_offset
    request = VoteRequest(c.epoch + 1, me, c.last_epoch(), c.leo, True, members)
    for voter in c.membership.voters:
        if voter != me:
            c.out.append(Send(voter, request))


def start_election(c: Core, now_ms: int) -> None:
    me = c.replica_id
    assert c.is_voter, "an observer never campaigns"
    c.step = Step.CANDIDATE
    c.prevotes = set()
    c.set_state(QuorumState(c.state.epoch + 1, me, None))
    c.votes = {me}
    c.fetch_sent_ms = None
    c.reset_election_timer(now_ms)
    if len(c.votes) >= c.membership.majority:
        become_leader(c, now_ms)
        return
    members = c.members.latest_offset
    request = VoteRequest(c.epoch, me, c.last_epoch(), c.leo, False, members)
    for voter in c.membership.voters:
        if voter != me:
            c.out.append(Send(voter, request))


def become_leader(c: Core, now_ms: int) -> None:
    me = c.replica_id
    epoch = c.epoch
    assert c.role is Role.CANDIDATE and c.state.voted_for == me, (c.step, c.state)
    # A candidate whose election timed out asks for pre-votes for the next epoch while its
    # votes may still come in: a late vote that elects it ends that round too.
    c.step = Step.LEADER
    c.leader_known = True
    c.votes = None
    c.prevotes = set()
    c.transfer = None
    c.producers.drop_partial()  # a batch not whole in this log never will be
    c.set_state(QuorumState(epoch, me, me))
    c.history.append(epoch, c.leo)
    c.out.append(PersistEpochHistory(c.history.entries))
    c.control_offset = c.leo
    marker = LeaderEpochMarker(epoch, me, c.membership.voters)
    c.out.append(AppendControl(c.control_offset, marker))
    c.leo += 1
    c.leader_since_ms = now_ms
    c.progress = {v: Progress() for v in c.membership.voters if v != me}
    c.progress.update((o, Progress(voter=False)) for o in c.membership.observers)
    for replica, progress in c.progress.items():
        progress.begin_sent_ms = now_ms
        c.out.append(Send(replica, BeginEpoch(epoch, me)))
    update_high_watermark(c, now_ms)
