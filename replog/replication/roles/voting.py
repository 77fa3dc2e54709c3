"""Votes and pre-votes (pure): the handlers `steps.py` puts in each role's table.

Requests: any role answers a pre-vote (`answer_pre_vote`: a leader, or a replica that heard
from its leader within `election_timeout_ms_min`, says no); only a follower (or a
pre-candidate that came from one) may grant a vote (`grant_vote`), every other role
answers no (`refuse_vote`). Answers: a pre-candidate counts pre-votes
(`count_pre_vote`), a candidate counts votes (`count_vote`, also a pre-candidate whose
candidacy is still open); an answer that reaches a role with no round of its epoch, or
repeats a grant already counted, is stale (`Stale.PRE_VOTE_ANSWER`, `Stale.VOTE_ANSWER`).
"""

from __future__ import annotations

from replog.replication.messages import BeginEpoch, VoteRequest, VoteResponse
from replog.replication.outputs import Send
from replog.replication.roles.core import Core, Step
from replog.replication.roles.transitions import become_follower, become_leader, start_election
from replog.replication.stale import Stale
from replog.replication.state import QuorumState

# -- epoch rules (every role, before its table) ---------------------------------------------


def vote_request_epoch(c: Core, request: VoteRequest, now_ms: int) -> bool:
    """A candidate of a newer epoch: this replica moves there first (leader unknown)."""
    if request.epoch > c.epoch:
        become_follower(c, request.epoch, None, now_ms)
    return True


def pre_vote_request_epoch(c: Core, request: VoteRequest, now_ms: int) -> bool:
    """A pre-vote changes nothing, except that an asker already in a newer epoch than this
    one's (it is at `epoch - 1`) shows that this replica is behind: it adopts that epoch
    first, as on any newer epoch."""
    if request.epoch - 1 > c.epoch:
        become_follower(c, request.epoch - 1, None, now_ms)
    return True


def vote_response_epoch(c: Core, response: VoteResponse, now_ms: int) -> bool:
    if response.epoch > c.epoch:
        become_follower(c, response.epoch, None, now_ms)
        return False
    return True


def pre_vote_response_epoch(c: Core, response: VoteResponse, now_ms: int) -> bool:
    """A refusal only teaches a newer epoch; a grant goes on to the role's table."""
    if not response.granted:
        if response.epoch > c.epoch:
            become_follower(c, response.epoch, None, now_ms)
        return False
    return True


# -- requests -------------------------------------------------------------------------------


def answer_pre_vote(c: Core, request: VoteRequest, now_ms: int) -> None:
    """Would this replica vote for the asker in `request.epoch`? Not while it heard from a
    live leader within `election_timeout_ms_min` (or is quiet: its leader's node is heard)."""
    _answer_pre_vote(c, request, leader_alive=c.leader_heard(now_ms))


def answer_pre_vote_leading(c: Core, request: VoteRequest, now_ms: int) -> None:
    """A leader says no; one of its replicas that asks has lost track of it (restarted
    without its state, or cut off for a while): it is told who leads."""
    _answer_pre_vote(c, request, leader_alive=True)
    if request.candidate_id in c.progress:
        c.out.append(Send(request.candidate_id, BeginEpoch(c.epoch, c.replica_id)))


def _answer_pre_vote(c: Core, request: VoteRequest, *, leader_alive: bool) -> None:
    theirs = (request.last_epoch, request.log_end_offset)
    granted = (
        _votes_for(c, request)
        and request.epoch > c.epoch
        and not leader_alive
        and theirs >= c.log_for_votes()
    )
    epoch = request.epoch if granted else c.epoch
    answer = VoteResponse(epoch, c.replica_id, granted, True)
    c.out.append(Send(request.candidate_id, answer))


def _votes_for(c: Core, request: VoteRequest) -> bool:
    """Whether this replica may vote on `request`: as a voter of its own membership, or
    when the candidate's membership is newer than its own (a candidate asks only its own
    voters: this replica was made a voter by a record it has not fetched yet). Raft
    (thesis 4.1) and KIP-853 let a replica vote without consulting its membership, and a
    single-server change can need that vote: a replica added as voter that missed its
    record may be part of every majority of the new voters. Votes only count from the
    candidate's own voters (`count_vote`), so either way a replica outside the winner's
    voters never helps to elect it; one vote per epoch per replica holds as always
    (`voted_for`)."""
    return c.is_voter or request.membership_offset > c.members.latest_offset


def grant_vote(c: Core, request: VoteRequest, now_ms: int) -> None:
    """A follower's vote: one per epoch, for a log at least as up to date, while it knows
    no leader of the epoch (an observer answers, but never grants)."""
    granted = False
    if (
        request.epoch == c.epoch
        and _votes_for(c, request)
        and c.leader_id is None
        and c.state.voted_for in (None, request.candidate_id)
        and (request.last_epoch, request.log_end_offset) >= c.log_for_votes()
    ):
        granted = True
        c.set_state(QuorumState(c.epoch, request.candidate_id, None))
        c.reset_election_timer(now_ms)
    # PersistQuorumState (if any) is already in the outputs, before this answer
    c.out.append(Send(request.candidate_id, VoteResponse(c.epoch, c.replica_id, granted)))


def refuse_vote(c: Core, request: VoteRequest, now_ms: int) -> None:
    """A candidate (it voted for itself) or a leader never grants."""
    c.out.append(Send(request.candidate_id, VoteResponse(c.epoch, c.replica_id, False)))


# -- answers --------------------------------------------------------------------------------


def count_pre_vote(c: Core, response: VoteResponse, now_ms: int) -> None:
    """A pre-candidate's granted pre-vote: a majority starts the election."""
    assert c.step is Step.PRE_CANDIDATE, c.step
    if response.epoch != c.epoch + 1 or not c.is_voter:
        c.stale(Stale.PRE_VOTE_ANSWER)  # a round that ended, or another epoch's
        return
    if response.voter_id in c.prevotes:
        c.stale(Stale.PRE_VOTE_ANSWER)  # a duplicate (the floor may have cleared since)
    elif response.voter_id in c.membership.voters:
        c.prevotes.add(response.voter_id)
    if len(c.prevotes) >= c.membership.majority and not c.below_vote_floor:
        start_election(c, now_ms)


def count_vote(c: Core, response: VoteResponse, now_ms: int) -> None:
    """A vote of this candidate's epoch (a vote only counts from a voter of its
    membership): a majority elects it. A pre-candidate with no candidacy open (it came
    from FOLLOWER) has no election to count it in."""
    votes = c.votes
    if votes is None or response.epoch != c.epoch or response.voter_id in votes:
        c.stale(Stale.VOTE_ANSWER)  # another epoch's, no election, or a duplicate
        return
    if response.granted and response.voter_id in c.membership.voters:
        votes.add(response.voter_id)
        if len(votes) >= c.membership.majority:
            become_leader(c, now_ms)


def stale_pre_vote_answer(c: Core, response: VoteResponse, now_ms: int) -> None:
    c.stale(Stale.PRE_VOTE_ANSWER)  # no round open: it ended, or never began


def stale_vote_answer(c: Core, response: VoteResponse, now_ms: int) -> None:
    c.stale(Stale.VOTE_ANSWER)  # not a candidate (any more)
