"""The roles a replica steps in, the pre-candidate explicit (`replication/roles/`).

Tables of what each role does: which inputs move it to which role, and which late or
duplicated pre-vote and vote answers it ignores (and counts, `stale.py`) in every role.
Replica 1 of five voters, so that one other vote is not yet a majority."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from replog.replication import (
    BeginEpoch,
    FetchResponse,
    Message,
    Records,
    Replica,
    Role,
    VoteRequest,
    VoteResponse,
)
from replog.replication.roles.core import Step
from replog.replication.stale import Stale
from tests.unit.test_replication_replica import config, sent

VOTERS = (1, 2, 3, 4, 5)
TIMEOUT_MS = 10_000  # past any election timeout of `config` (1-2 s)


def follower() -> Replica:
    r = Replica(config(1, voters=VOTERS), random.Random(0), 0)
    r.start()
    return r


def following_leader_2() -> Replica:
    r = follower()
    r.receive(BeginEpoch(3, 2), 0)
    return r


def pre_candidate() -> Replica:
    """A follower whose leader went quiet: it asks for pre-votes for epoch 4."""
    r = following_leader_2()
    r.tick(TIMEOUT_MS)
    return r


def candidate() -> Replica:
    r = follower()
    r.campaign(0)
    return r


def timed_out_candidate() -> Replica:
    """A candidate of epoch 1 whose election timed out: it asks for pre-votes for 2."""
    r = candidate()
    r.tick(TIMEOUT_MS)
    return r


def leader() -> Replica:
    r = candidate()
    r.receive(VoteResponse(1, 2, True), 0)
    r.receive(VoteResponse(1, 3, True), 0)
    return r


STATES: dict[str, tuple[Callable[[], Replica], Step, Role, int]] = {
    # name: (builder, step, public role, epoch)
    "follower": (follower, Step.FOLLOWER, Role.FOLLOWER, 0),
    "pre-candidate": (pre_candidate, Step.PRE_CANDIDATE, Role.FOLLOWER, 3),
    "candidate": (candidate, Step.CANDIDATE, Role.CANDIDATE, 1),
    "timed-out candidate": (timed_out_candidate, Step.PRE_CANDIDATE, Role.CANDIDATE, 1),
    "leader": (leader, Step.LEADER, Role.LEADER, 1),
}


@pytest.mark.parametrize("name", STATES)
def test_each_state_is_stepped_in_its_role_and_shows_its_public_role(name: str) -> None:
    build, step, public, epoch = STATES[name]
    r = build()
    assert (r.step, r.role, r.epoch) == (step, public, epoch)


def grant_pre_votes(r: Replica, *voters: int) -> None:
    for voter in voters:
        r.receive(VoteResponse(r.epoch + 1, voter, True, True), TIMEOUT_MS)


def records_from_2(r: Replica) -> None:
    r.receive(FetchResponse(3, 2, 0, 0, Records(0, 0, (), 0)), TIMEOUT_MS)


TRANSITIONS: list[tuple[str, str, Callable[[Replica], object], Step, Role, int]] = [
    # (state, input, how, step after, public role after, epoch after)
    ("follower", "election timeout", lambda r: r.tick(TIMEOUT_MS), Step.PRE_CANDIDATE,
     Role.FOLLOWER, 0),
    ("candidate", "election timeout", lambda r: r.tick(TIMEOUT_MS), Step.PRE_CANDIDATE,
     Role.CANDIDATE, 1),
    ("pre-candidate", "its round times out", lambda r: r.tick(2 * TIMEOUT_MS),
     Step.PRE_CANDIDATE, Role.FOLLOWER, 3),
    ("pre-candidate", "a majority of pre-votes", lambda r: grant_pre_votes(r, 2, 3),
     Step.CANDIDATE, Role.CANDIDATE, 4),
    ("pre-candidate", "a minority of pre-votes", lambda r: grant_pre_votes(r, 2),
     Step.PRE_CANDIDATE, Role.FOLLOWER, 3),
    ("pre-candidate", "its leader answers after all", records_from_2, Step.FOLLOWER,
     Role.FOLLOWER, 3),
    ("pre-candidate", "a newer epoch's leader", lambda r: r.receive(BeginEpoch(7, 3), 1),
     Step.FOLLOWER, Role.FOLLOWER, 7),
    ("pre-candidate", "a newer epoch's refusal",
     lambda r: r.receive(VoteResponse(9, 3, False, True), 1), Step.FOLLOWER, Role.FOLLOWER, 9),
    ("timed-out candidate", "a majority of pre-votes", lambda r: grant_pre_votes(r, 2, 3),
     Step.CANDIDATE, Role.CANDIDATE, 2),
    ("timed-out candidate", "late votes of its own epoch",
     lambda r: [r.receive(VoteResponse(1, v, True), 1) for v in (2, 3)], Step.LEADER,
     Role.LEADER, 1),
    ("timed-out candidate", "a newer epoch's candidate",
     lambda r: r.receive(VoteRequest(5, 4, 0, 0), 1), Step.FOLLOWER, Role.FOLLOWER, 5),
]  # fmt: skip


@pytest.mark.parametrize(
    ("state", "how", "step", "public", "epoch"),
    [(s, h, st, p, e) for s, _, h, st, p, e in TRANSITIONS],
    ids=[f"{s}: {i}" for s, i, *_ in TRANSITIONS],
)
def test_the_pre_candidate_transitions(
    state: str, how: Callable[[Replica], object], step: Step, public: Role, epoch: int
) -> None:
    r = STATES[state][0]()
    how(r)
    assert (r.step, r.role, r.epoch) == (step, public, epoch)
    assert not r.stale_messages


def test_an_observer_never_becomes_a_pre_candidate() -> None:
    r = Replica(config(4, voters=(1, 2, 3), observers=(4,)), random.Random(0), 0)
    r.start()
    r.receive(BeginEpoch(3, 2), 0)
    out = r.tick(TIMEOUT_MS)
    assert (r.step, r.leader_id) == (Step.FOLLOWER, None)  # it forgets the silent leader
    assert not sent(out, VoteRequest)


def late_pre_vote(r: Replica) -> Message:
    return VoteResponse(r.epoch + 1, 4, True, True)  # no round of that epoch is open


def older_round_pre_vote(r: Replica) -> Message:
    return VoteResponse(r.epoch, 4, True, True)  # for the epoch it is in already


def duplicate_pre_vote(r: Replica) -> Message:
    grant_pre_votes(r, 2)
    return VoteResponse(r.epoch + 1, 2, True, True)


def late_vote(r: Replica) -> Message:
    return VoteResponse(r.epoch, 4, True)  # it is no candidate of its epoch


def older_epoch_vote(r: Replica) -> Message:
    return VoteResponse(r.epoch - 1, 4, True)


def duplicate_vote(r: Replica) -> Message:
    r.receive(VoteResponse(r.epoch, 2, True), TIMEOUT_MS)
    return VoteResponse(r.epoch, 2, True)


IGNORED: list[tuple[str, Callable[[Replica], Message], Stale]] = [
    ("follower", late_pre_vote, Stale.PRE_VOTE_ANSWER),
    ("follower", late_vote, Stale.VOTE_ANSWER),
    ("pre-candidate", older_round_pre_vote, Stale.PRE_VOTE_ANSWER),
    ("pre-candidate", duplicate_pre_vote, Stale.PRE_VOTE_ANSWER),
    ("pre-candidate", late_vote, Stale.VOTE_ANSWER),
    ("pre-candidate", older_epoch_vote, Stale.VOTE_ANSWER),
    ("candidate", late_pre_vote, Stale.PRE_VOTE_ANSWER),
    ("candidate", older_epoch_vote, Stale.VOTE_ANSWER),
    ("candidate", duplicate_vote, Stale.VOTE_ANSWER),
    ("timed-out candidate", older_round_pre_vote, Stale.PRE_VOTE_ANSWER),
    ("timed-out candidate", duplicate_pre_vote, Stale.PRE_VOTE_ANSWER),
    ("timed-out candidate", older_epoch_vote, Stale.VOTE_ANSWER),
    ("timed-out candidate", duplicate_vote, Stale.VOTE_ANSWER),
    ("leader", late_pre_vote, Stale.PRE_VOTE_ANSWER),
    ("leader", older_round_pre_vote, Stale.PRE_VOTE_ANSWER),
    ("leader", late_vote, Stale.VOTE_ANSWER),
    ("leader", older_epoch_vote, Stale.VOTE_ANSWER),
]


@pytest.mark.parametrize(
    ("state", "message", "reason"),
    IGNORED,
    ids=[f"{s}: {m.__name__.replace('_', ' ')}" for s, m, _ in IGNORED],
)
def test_late_and_duplicate_answers_are_ignored_and_counted_in_every_role(
    state: str, message: Callable[[Replica], Message], reason: Stale
) -> None:
    r = STATES[state][0]()
    late = message(r)  # (may first deliver the original of a duplicate)
    before = (r.step, r.role, r.epoch, r.quorum_state, r.log_end_offset)
    counted = sum(r.stale_messages.values())
    assert r.receive(late, TIMEOUT_MS + 1) == []
    assert (r.step, r.role, r.epoch, r.quorum_state, r.log_end_offset) == before
    assert r.stale_messages[reason] == 1
    assert sum(r.stale_messages.values()) == counted + 1
