"""Message dispatch and timers by role (pure): a table per role, as etcd's raft steps.

`receive` names the message's kind, applies the kind's epoch rule (common to every role:
a newer epoch is adopted, an older one answered or dropped), then calls the handler of the
current role's table (`step_follower`, `step_pre_candidate`, `step_candidate`,
`step_leader`). `tick` is per role too. Handlers of one kind shared by several roles live in
`voting.py` (votes, pre-votes) and below (fetches, `BeginEpoch`, `TimeoutNow`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from replog.replication.messages import (
    BeginEpoch,
    Fenced,
    FetchRequest,
    FetchResponse,
    Message,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from replog.replication.outputs import Send
from replog.replication.roles import quiet, voting
from replog.replication.roles.core import Core, Step
from replog.replication.roles.following import accept_fetch_response, send_fetch
from replog.replication.roles.leading import maybe_timeout_now, send_records, serve_fetch
from replog.replication.roles.transitions import (
    become_follower,
    election_timeout,
    start_election,
)
from replog.replication.stale import Stale


class Kind(enum.Enum):
    FETCH = "fetch"
    FETCH_ANSWER = "fetch_answer"  # records, a divergence or a log start
    FENCED = "fenced"  # a fetch answer: the fetch's epoch is over
    VOTE = "vote"
    PRE_VOTE = "pre_vote"
    VOTE_ANSWER = "vote_answer"
    PRE_VOTE_ANSWER = "pre_vote_answer"
    BEGIN_EPOCH = "begin_epoch"
    TIMEOUT_NOW = "timeout_now"


def kind_of(message: Message) -> Kind:
    if isinstance(message, FetchResponse):
        return Kind.FENCED if isinstance(message.result, Fenced) else Kind.FETCH_ANSWER
    if isinstance(message, VoteRequest | VoteResponse) and message.pre_vote:
        return _PRE_KINDS[type(message)]
    return _KINDS[type(message)]


_KINDS: dict[type, Kind] = {
    FetchRequest: Kind.FETCH,
    VoteRequest: Kind.VOTE,
    VoteResponse: Kind.VOTE_ANSWER,
    BeginEpoch: Kind.BEGIN_EPOCH,
    TimeoutNow: Kind.TIMEOUT_NOW,
}
_PRE_KINDS: dict[type, Kind] = {VoteRequest: Kind.PRE_VOTE, VoteResponse: Kind.PRE_VOTE_ANSWER}

Handler = Callable[[Core, Any, int], None]  # (core, message of the kind, now_ms)
Rule = Callable[[Core, Any, int], bool]  # False: the message is done with


def receive(c: Core, message: Message, now_ms: int) -> None:
    kind = kind_of(message)
    rule = _EPOCH_RULES.get(kind)
    if rule is None or rule(c, message, now_ms):
        STEPS[c.step](c, kind, message, now_ms)


def step_follower(c: Core, kind: Kind, message: Message, now_ms: int) -> None:
    _FOLLOWER[kind](c, message, now_ms)


def step_pre_candidate(c: Core, kind: Kind, message: Message, now_ms: int) -> None:
    _PRE_CANDIDATE[kind](c, message, now_ms)


def step_candidate(c: Core, kind: Kind, message: Message, now_ms: int) -> None:
    _CANDIDATE[kind](c, message, now_ms)


def step_leader(c: Core, kind: Kind, message: Message, now_ms: int) -> None:
    _LEADER[kind](c, message, now_ms)


# -- epoch rules ----------------------------------------------------------------------------


def _fetch_epoch(c: Core, request: FetchRequest, now_ms: int) -> bool:
    """An older epoch's fetch is fenced (with the leader this replica knows); a newer one's
    sender follows a newer leader than any this replica knows of."""
    if request.epoch < c.epoch:
        fenced = Fenced(c.epoch, c.leader_id)
        offset, last_epoch = request.fetch_offset, request.last_fetched_epoch
        response = FetchResponse(c.epoch, c.replica_id, offset, last_epoch, fenced)
        c.out.append(Send(request.replica_id, response))
        return False
    if request.epoch > c.epoch:
        become_follower(c, request.epoch, None, now_ms)
        return False
    return True


def _fetch_answer_epoch(c: Core, response: FetchResponse, now_ms: int) -> bool:
    if response.epoch != c.epoch:
        c.stale(Stale.FETCH_ANSWER)
        return False
    return True


_EPOCH_RULES: dict[Kind, Rule] = {
    Kind.FETCH: _fetch_epoch,
    Kind.FETCH_ANSWER: _fetch_answer_epoch,
    Kind.VOTE: voting.vote_request_epoch,
    Kind.PRE_VOTE: voting.pre_vote_request_epoch,
    Kind.VOTE_ANSWER: voting.vote_response_epoch,
    Kind.PRE_VOTE_ANSWER: voting.pre_vote_response_epoch,
}

# -- fetches --------------------------------------------------------------------------------


def _fetch_not_leader(c: Core, request: FetchRequest, now_ms: int) -> None:
    c.stale(Stale.FETCH_NOT_LEADER)


def _fetch_leader(c: Core, request: FetchRequest, now_ms: int) -> None:
    if request.replica_id not in c.progress:
        c.stale(Stale.FETCH_NOT_MEMBER)  # (a removed replica may go on asking: told nothing)
        return
    serve_fetch(c, request, now_ms)


def _fetch_answer_not_following(c: Core, response: FetchResponse, now_ms: int) -> None:
    c.stale(Stale.FETCH_ANSWER)


def _fenced(c: Core, response: FetchResponse, now_ms: int) -> None:
    """A newer epoch, or this epoch's leader this replica did not know yet."""
    result = response.result
    assert isinstance(result, Fenced), result
    leader = result.leader_id
    if leader == c.replica_id:
        c.stale(Stale.OWN_LEADERSHIP)  # an echo of an earlier leadership of its own
        leader = None
    if result.epoch > c.epoch or (
        result.epoch == c.epoch and c.leader_id is None and leader is not None
    ):
        become_follower(c, result.epoch, leader, now_ms)


def _fenced_leading(c: Core, response: FetchResponse, now_ms: int) -> None:
    result = response.result
    assert isinstance(result, Fenced), result
    if result.epoch > c.epoch:
        become_follower(c, result.epoch, result.leader_id, now_ms)


# -- BeginEpoch, TimeoutNow -----------------------------------------------------------------


def _begin_epoch(c: Core, message: BeginEpoch, now_ms: int) -> None:
    leader: int | None = message.leader_id
    if leader == c.replica_id:
        c.stale(Stale.OWN_LEADERSHIP)  # an echo of an earlier leadership of its own
        leader = None
    if message.epoch > c.epoch:
        become_follower(c, message.epoch, leader, now_ms)
    elif message.epoch < c.epoch:
        c.stale(Stale.BEGIN_EPOCH)
    elif c.leader_id is None:
        if leader is not None:
            become_follower(c, message.epoch, leader, now_ms)
    elif c.leader_id != leader:
        # another leader of this epoch: an older incarnation's message, or one of a
        # replica that lost its state (its vote) -- never followed
        c.stale(Stale.OTHER_LEADER)


def _begin_epoch_leading(c: Core, message: BeginEpoch, now_ms: int) -> None:
    if message.epoch > c.epoch:
        become_follower(c, message.epoch, message.leader_id, now_ms)
    elif message.epoch < c.epoch:
        c.stale(Stale.BEGIN_EPOCH)
    elif message.leader_id != c.replica_id:
        c.stale(Stale.OTHER_LEADER)  # (as above)


def _timeout_now(c: Core, message: TimeoutNow, now_ms: int) -> None:
    """This replica's leader hands leadership over to it: campaign at once (no pre-vote)."""
    if (
        message.epoch == c.epoch
        and message.leader_id == c.leader_id
        and c.is_voter
        and not c.below_vote_floor
    ):
        start_election(c, now_ms)
    else:
        c.stale(Stale.TIMEOUT_NOW)


def _stale_timeout_now(c: Core, message: TimeoutNow, now_ms: int) -> None:
    c.stale(Stale.TIMEOUT_NOW)  # not from this replica's leader: it follows none


# -- the tables -----------------------------------------------------------------------------

_FOLLOWER: dict[Kind, Handler] = {
    Kind.FETCH: _fetch_not_leader,
    Kind.FETCH_ANSWER: accept_fetch_response,
    Kind.FENCED: _fenced,
    Kind.VOTE: voting.grant_vote,
    Kind.PRE_VOTE: voting.answer_pre_vote,
    Kind.VOTE_ANSWER: voting.stale_vote_answer,
    Kind.PRE_VOTE_ANSWER: voting.stale_pre_vote_answer,
    Kind.BEGIN_EPOCH: _begin_epoch,
    Kind.TIMEOUT_NOW: _timeout_now,
}
# a follower asking for pre-votes: it still follows (and may vote), and it counts answers
_PRE_CANDIDATE: dict[Kind, Handler] = {
    **_FOLLOWER,
    Kind.VOTE_ANSWER: voting.count_vote,
    Kind.PRE_VOTE_ANSWER: voting.count_pre_vote,
}
_CANDIDATE: dict[Kind, Handler] = {
    Kind.FETCH: _fetch_not_leader,
    Kind.FETCH_ANSWER: _fetch_answer_not_following,
    Kind.FENCED: _fenced,
    Kind.VOTE: voting.refuse_vote,
    Kind.PRE_VOTE: voting.answer_pre_vote,
    Kind.VOTE_ANSWER: voting.count_vote,
    Kind.PRE_VOTE_ANSWER: voting.stale_pre_vote_answer,
    Kind.BEGIN_EPOCH: _begin_epoch,
    Kind.TIMEOUT_NOW: _stale_timeout_now,
}
_LEADER: dict[Kind, Handler] = {
    Kind.FETCH: _fetch_leader,
    Kind.FETCH_ANSWER: _fetch_answer_not_following,
    Kind.FENCED: _fenced_leading,
    Kind.VOTE: voting.refuse_vote,
    Kind.PRE_VOTE: voting.answer_pre_vote_leading,
    Kind.VOTE_ANSWER: voting.stale_vote_answer,
    Kind.PRE_VOTE_ANSWER: voting.stale_pre_vote_answer,
    Kind.BEGIN_EPOCH: _begin_epoch_leading,
    Kind.TIMEOUT_NOW: _stale_timeout_now,
}
assert all(len(t) == len(Kind) for t in (_FOLLOWER, _PRE_CANDIDATE, _CANDIDATE, _LEADER))

STEPS: dict[Step, Callable[[Core, Kind, Message, int], None]] = {
    Step.FOLLOWER: step_follower,
    Step.PRE_CANDIDATE: step_pre_candidate,
    Step.CANDIDATE: step_candidate,
    Step.LEADER: step_leader,
}

# -- timers ---------------------------------------------------------------------------------


def tick(c: Core, now_ms: int) -> None:
    _TICKS[c.step](c, now_ms)


def _tick_following(c: Core, now_ms: int) -> None:
    """FOLLOWER, PRE_CANDIDATE: the election timeout, else a lost fetch is sent again."""
    if now_ms >= c.election_deadline_ms:
        election_timeout(c, now_ms)
    elif c.fetch_sent_ms is not None and now_ms - c.fetch_sent_ms >= quiet.fetch_retry_ms(c):
        c.fetch_sent_ms = None
        send_fetch(c, now_ms)


def _tick_candidate(c: Core, now_ms: int) -> None:
    if now_ms >= c.election_deadline_ms:
        election_timeout(c, now_ms)


def _tick_leader(c: Core, now_ms: int) -> None:
    cfg = c.config
    if c.transfer is not None and now_ms >= c.transfer[1]:
        c.transfer = None  # the target did not take over in time: lead on
    maybe_timeout_now(c)
    alive = 1
    for replica, progress in c.progress.items():
        parked = progress.parked
        if parked is not None and (
            now_ms - progress.parked_since_ms >= quiet.parked_wait_ms(c, progress)
            or (progress.hw_due_ms is not None and now_ms >= progress.hw_due_ms)
        ):
            quiet.unpark(progress, now_ms)
            send_records(c, replica, parked)
        if progress.quiet:  # its node is heard (else a wake would have ended this)
            alive += progress.voter
            continue
        last = progress.last_fetch_ms
        # Tell the leader again to a replica that has not fetched in this epoch, and to an
        # observer that went quiet: it forgets a silent leader and does not campaign. So
        # does a voter that may not know it is one (it has not fetched the latest
        # membership record: it may still think it is an observer).
        unaware = not progress.voter or progress.match <= c.members.latest_offset
        if last is None or (unaware and now_ms - last >= cfg.election_timeout_ms_min):
            sent = progress.begin_sent_ms
            if sent is None or now_ms - sent >= cfg.begin_epoch_retry_ms:
                progress.begin_sent_ms = now_ms
                c.out.append(Send(replica, BeginEpoch(c.epoch, c.replica_id)))
        if progress.voter and last is not None and now_ms - last < cfg.election_timeout_ms_max:
            alive += 1
    if now_ms - c.leader_since_ms >= cfg.election_timeout_ms_max and alive < c.membership.majority:
        # check quorum: a leader that cannot reach a majority stops taking writes
        become_follower(c, c.epoch, None, now_ms)


def next_tick_ms(c: Core) -> int | None:
    """When `tick` next has something to do if no input comes first (`Replica.next_tick_ms`):
    the timers of `_TICKS`, each computed as its tick function tests it."""
    cfg = c.config
    if c.step is not Step.LEADER:
        due = c.election_deadline_ms
        if c.fetch_sent_ms is not None:  # a follower's (or pre-candidate's) fetch retry
            due = min(due, c.fetch_sent_ms + quiet.fetch_retry_ms(c))
        return due
    if c.transfer is not None or c.pending_leader:
        return 0
    times: list[int] = []
    lasts: list[int] = []
    for progress in c.progress.values():
        if progress.parked is not None:
            times.append(progress.parked_since_ms + quiet.parked_wait_ms(c, progress))
            if progress.hw_due_ms is not None:
                times.append(progress.hw_due_ms)
        if progress.quiet:  # alive until its held fetch is answered (then: alive now)
            if progress.voter:
                lasts.append(progress.parked_since_ms + cfg.quiet_fetch_wait_ms)
            continue
        last = progress.last_fetch_ms
        unaware = not progress.voter or progress.match <= c.members.latest_offset
        if last is None or unaware:
            sent = progress.begin_sent_ms
            retry = 0 if sent is None else sent + cfg.begin_epoch_retry_ms
            times.append(retry if last is None else max(retry, last + cfg.election_timeout_ms_min))
        if progress.voter and last is not None:
            lasts.append(last)
    others = c.membership.majority - 1  # other voters check-quorum needs alive
    if others > 0:
        lasts.sort(reverse=True)
        quorum_since = c.leader_since_ms
        if len(lasts) >= others:
            quorum_since = max(quorum_since, lasts[others - 1])
        times.append(quorum_since + cfg.election_timeout_ms_max)
    return min(times, default=None)


def wake(c: Core, node: int, now_ms: int) -> None:
    """The liveness of peer node `node` changed (`quiet.py`): what is quiet about it wakes."""
    if c.step is Step.LEADER:
        quiet.wake_leader(c, node, now_ms)
    elif quiet.wake_follower(c, node, now_ms):
        send_fetch(c, now_ms)


_TICKS: dict[Step, Callable[[Core, int], None]] = {
    Step.FOLLOWER: _tick_following,
    Step.PRE_CANDIDATE: _tick_following,
    Step.CANDIDATE: _tick_candidate,
    Step.LEADER: _tick_leader,
}
