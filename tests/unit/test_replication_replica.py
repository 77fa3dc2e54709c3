"""The replica state machine, input by input (no driver, no network)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import TypeVar

import pytest

from replog.replication import (
    AckCompleted,
    AckFailed,
    AckFailure,
    Acks,
    AppendControl,
    AppendFrames,
    AppendRecords,
    BeginEpoch,
    Diverging,
    EpochStart,
    Fenced,
    FetchRequest,
    FetchResponse,
    Output,
    PersistEpochHistory,
    PersistQuorumState,
    QuorumState,
    Records,
    Replica,
    ReplicaConfig,
    ResetLog,
    Role,
    Send,
    SetHighWatermark,
    StartAt,
    TruncateTo,
    VoteRequest,
    VoteResponse,
)
from replog.replication.stale import Stale

T = TypeVar("T")
VOTERS = (1, 2, 3)
OBSERVERS = (4, 5)


def config(
    replica_id: int = 1, voters: tuple[int, ...] = VOTERS, observers: tuple[int, ...] = ()
) -> ReplicaConfig:
    return ReplicaConfig(
        replica_id=replica_id,
        voters=voters,
        observers=observers,
        election_timeout_ms_min=1000,
        election_timeout_ms_max=2000,
        fetch_wait_ms_max=100,
        fetch_retry_ms=200,
        begin_epoch_retry_ms=100,
        hw_linger_ms=5,  # the linger's rules are tested here (off by default: config.py)
    )


def replica(
    replica_id: int = 1,
    seed: int = 0,
    *,
    state: QuorumState | None = None,
    history: Sequence[EpochStart] = (),
    log_end_offset: int = 0,
    observers: tuple[int, ...] = (),
) -> Replica:
    r = Replica(
        config(replica_id, observers=observers),
        random.Random(seed),
        0,
        state=state,
        history=history,
        log_end_offset=log_end_offset,
    )
    r.start()
    return r


def role(r: Replica) -> Role:
    """The role now (a call, so that type checkers do not narrow it across inputs)."""
    return r.role


def of_type(outputs: list[Output], kind: type[T]) -> list[T]:
    return [o for o in outputs if isinstance(o, kind)]


def sent(outputs: list[Output], kind: type[T]) -> list[T]:
    return [o.message for o in of_type(outputs, Send) if isinstance(o.message, kind)]


def leader(
    log_end_offset: int = 0,
    *,
    state: QuorumState | None = None,
    history: Sequence[EpochStart] = (),
    observers: tuple[int, ...] = (),
) -> Replica:
    """Replica 1, leader of epoch 1 (or of the epoch after `state`), control record flushed."""
    r = replica(1, state=state, history=history, log_end_offset=log_end_offset, observers=observers)
    r.campaign(0)
    r.receive(VoteResponse(r.epoch, 2, True), 0)
    assert role(r) is Role.LEADER
    r.flushed(r.log_end_offset, 0)
    return r


def fetch(r: Replica, sender: int, offset: int, last_epoch: int, now: int = 0) -> list[Output]:
    return r.receive(FetchRequest(r.epoch, sender, offset, last_epoch), now)


# -- elections ------------------------------------------------------------------------------


def test_a_follower_without_a_leader_asks_for_pre_votes_after_its_election_timeout() -> None:
    r = replica()
    assert r.tick(999) == []
    out = r.tick(2000)
    # a pre-vote changes nothing: same role, same epoch, nothing persisted
    assert role(r) is Role.FOLLOWER and r.epoch == 0
    assert of_type(out, PersistQuorumState) == []
    assert sorted(s.to for s in of_type(out, Send)) == [2, 3]
    assert sent(out, VoteRequest)[0] == VoteRequest(1, 1, 0, 0, pre_vote=True)


def test_a_majority_of_pre_votes_starts_the_real_election() -> None:
    r = replica()
    r.tick(2000)
    out = r.receive(VoteResponse(1, 2, True, pre_vote=True), 2000)
    assert role(r) is Role.CANDIDATE and r.epoch == 1
    assert of_type(out, PersistQuorumState) == [PersistQuorumState(QuorumState(1, 1, None))]
    assert sent(out, VoteRequest)[0] == VoteRequest(1, 1, 0, 0)


def test_refused_pre_votes_leave_the_epoch_alone_and_are_asked_again_later() -> None:
    r = replica()
    r.tick(2000)
    r.receive(VoteResponse(0, 2, False, pre_vote=True), 2000)
    r.receive(VoteResponse(0, 3, False, pre_vote=True), 2000)
    assert role(r) is Role.FOLLOWER and r.epoch == 0
    out = r.tick(4001)  # the next timeout: a new round
    assert sent(out, VoteRequest) == [VoteRequest(1, 1, 0, 0, pre_vote=True)] * 2


def test_a_refused_pre_vote_from_a_newer_epoch_teaches_that_epoch() -> None:
    r = replica()
    r.tick(2000)
    r.receive(VoteResponse(5, 2, False, pre_vote=True), 2000)
    assert role(r) is Role.FOLLOWER and r.epoch == 5 and r.leader_id is None


def test_a_follower_that_hears_from_its_leader_refuses_pre_votes() -> None:
    r = replica(2)
    r.receive(BeginEpoch(3, 1), 0)
    out = r.receive(VoteRequest(4, 3, 3, 10, pre_vote=True), 500)
    assert sent(out, VoteResponse) == [VoteResponse(3, 2, False, pre_vote=True)]
    assert r.epoch == 3 and r.leader_id == 1, "a pre-vote changes nothing"
    # silence from the leader for election_timeout_ms_min: now it would vote
    out = r.receive(VoteRequest(4, 3, 3, 10, pre_vote=True), 1000)
    assert sent(out, VoteResponse) == [VoteResponse(4, 2, True, pre_vote=True)]
    assert r.epoch == 3 and of_type(out, PersistQuorumState) == []


def test_a_pre_vote_needs_a_log_at_least_as_up_to_date() -> None:
    r = replica(2, history=[EpochStart(2, 0)], log_end_offset=5, state=QuorumState(2))
    out = r.receive(VoteRequest(3, 3, 1, 9, pre_vote=True), 5000)
    assert sent(out, VoteResponse) == [VoteResponse(2, 2, False, pre_vote=True)]


def test_a_leader_refuses_a_pre_vote_and_tells_its_lost_replica_who_leads() -> None:
    r = leader()
    out = r.receive(VoteRequest(1, 3, 0, 0, pre_vote=True), 0)  # e.g. a wiped node, epoch 0
    assert sent(out, VoteResponse) == [VoteResponse(r.epoch, 1, False, pre_vote=True)]
    assert sent(out, BeginEpoch) == [BeginEpoch(r.epoch, 1)]
    assert role(r) is Role.LEADER


def test_a_pre_vote_from_a_newer_epoch_still_moves_the_receiver_to_it() -> None:
    r = leader()  # epoch 1
    r.receive(VoteRequest(4, 3, 0, 0, pre_vote=True), 0)  # the asker is at epoch 3
    assert role(r) is Role.FOLLOWER and r.epoch == 3


def test_election_timeouts_come_from_the_injected_rng() -> None:
    def timeout(seed: int) -> int:
        r = replica(seed=seed)
        return next(t for t in range(1000, 2001) if r.tick(t))

    assert timeout(1) == timeout(1)
    assert len({timeout(seed) for seed in range(10)}) > 1


def test_a_voter_persists_its_vote_before_it_answers() -> None:
    r = replica(2)
    out = r.receive(VoteRequest(1, 1, 0, 0), 0)
    assert out == [
        PersistQuorumState(QuorumState(1, None, None)),
        PersistQuorumState(QuorumState(1, 1, None)),
        Send(1, VoteResponse(1, 2, True)),
    ]


def test_a_voter_grants_one_vote_per_epoch() -> None:
    r = replica(2)
    r.receive(VoteRequest(1, 1, 0, 0), 0)
    out = r.receive(VoteRequest(1, 3, 0, 0), 0)
    assert sent(out, VoteResponse) == [VoteResponse(1, 2, False)]
    assert sent(r.receive(VoteRequest(1, 1, 0, 0), 0), VoteResponse)[0].granted


def test_a_voter_compares_last_epoch_before_log_end_offset() -> None:
    history = [EpochStart(1, 0), EpochStart(2, 4)]
    r = replica(2, state=QuorumState(2), history=history, log_end_offset=6)
    # a longer log of an older epoch loses; a shorter one of a newer epoch wins
    assert not sent(r.receive(VoteRequest(3, 1, 1, 50), 0), VoteResponse)[0].granted
    assert not sent(r.receive(VoteRequest(4, 1, 2, 5), 0), VoteResponse)[0].granted
    assert sent(r.receive(VoteRequest(5, 3, 3, 1), 0), VoteResponse)[0].granted


def test_a_candidate_with_a_majority_leads_and_appends_its_control_record() -> None:
    r = replica(1, history=[EpochStart(1, 0)], log_end_offset=3, state=QuorumState(1))
    r.campaign(0)
    out = r.receive(VoteResponse(2, 2, True), 0)
    assert role(r) is Role.LEADER and r.leader_id == 1
    assert PersistEpochHistory((EpochStart(1, 0), EpochStart(2, 3))) in out
    control = of_type(out, AppendControl)[0]
    assert control.offset == 3 and control.marker.epoch == 2 and control.marker.voters == VOTERS
    assert sorted(m.leader_id for m in sent(out, BeginEpoch)) == [1, 1]
    assert r.log_end_offset == 4


def test_a_single_voter_elects_itself_and_commits_alone() -> None:
    r = Replica(config(1, (1,)), random.Random(0), 0)
    r.start()
    out = r.tick(2000)
    assert role(r) is Role.LEADER and of_type(out, AppendControl)
    out = r.flushed(1, 2000)
    assert of_type(out, SetHighWatermark) == [SetHighWatermark(1)]


def test_a_higher_epoch_in_a_vote_answer_turns_a_candidate_into_a_follower() -> None:
    r = replica()
    r.campaign(0)
    r.receive(VoteResponse(5, 2, False), 0)
    assert role(r) is Role.FOLLOWER and r.epoch == 5 and r.quorum_state.voted_for is None


def test_begin_epoch_names_the_leader_and_starts_the_fetches() -> None:
    r = replica(2)
    out = r.receive(BeginEpoch(3, 1), 0)
    assert r.leader_id == 1 and r.epoch == 3
    assert sent(out, FetchRequest) == [FetchRequest(3, 2, 0, 0)]


# -- the leader ------------------------------------------------------------------------------


def test_a_leader_fences_a_fetch_of_an_older_epoch() -> None:
    r = leader(state=QuorumState(4))
    out = r.receive(FetchRequest(3, 2, 0, 0), 0)
    assert sent(out, FetchResponse)[0].result == Fenced(5, 1)


def test_a_leader_steps_down_on_a_fetch_of_a_newer_epoch() -> None:
    r = leader()
    r.receive(FetchRequest(7, 2, 0, 0), 0)
    assert role(r) is Role.FOLLOWER and r.epoch == 7


def test_a_leader_answers_diverging_when_the_follower_passed_the_end_of_its_epoch() -> None:
    # the leader's history: epoch 1 on [0, 4), epoch 3 from 4; the follower holds 6
    # records, its last one of epoch 2, which the leader never saw
    history = [EpochStart(1, 0), EpochStart(3, 4)]
    r = leader(state=QuorumState(3), history=history, log_end_offset=8)
    out = fetch(r, 2, 6, 2)
    assert sent(out, FetchResponse)[0].result == Diverging(1, 4)
    out = fetch(r, 2, 6, 1)
    assert sent(out, FetchResponse)[0].result == Diverging(1, 4)


def test_a_leader_sends_records_with_epoch_boundaries_and_its_hw() -> None:
    r = leader(history=[EpochStart(1, 0)], log_end_offset=3, state=QuorumState(1))
    out = fetch(r, 2, 2, 1)
    records = sent(out, FetchResponse)[0].result
    assert records == Records(2, 4, (EpochStart(1, 2), EpochStart(2, 3)), 0)


def test_hw_waits_until_a_majority_holds_this_epochs_control_record() -> None:
    r = leader(history=[EpochStart(1, 0)], log_end_offset=3, state=QuorumState(1))
    assert r.high_watermark == 0
    assert not of_type(fetch(r, 2, 3, 1), SetHighWatermark)  # old records only
    out = fetch(r, 2, 4, 2)
    assert of_type(out, SetHighWatermark) == [SetHighWatermark(4)]


def test_acks_all_completes_when_hw_passes_the_last_offset_of_the_batch() -> None:
    r = leader()
    out = r.append(7, [b"a", b"b"], Acks.ALL, 0)
    assert of_type(out, AppendRecords) == [AppendRecords(1, (b"a", b"b"))]
    r.flushed(3, 0)
    assert not of_type(fetch(r, 2, 2, 1), AckCompleted)
    out = fetch(r, 2, 3, 1)
    assert of_type(out, AckCompleted) == [AckCompleted(7, 1, 2)]


def test_acks_leader_completes_once_the_leader_flushed_the_batch() -> None:
    r = leader()
    assert not of_type(r.append(7, [b"a"], Acks.LEADER, 0), AckCompleted)
    assert of_type(r.flushed(2, 0), AckCompleted) == [AckCompleted(7, 1, 1)]


def test_an_append_on_a_follower_fails_with_not_leader_naming_the_leader() -> None:
    r = replica(2)
    r.receive(BeginEpoch(1, 3), 0)
    out = r.append(9, [b"x"], Acks.ALL, 0)
    assert out == [AckFailed(9, AckFailure.NOT_LEADER, 3)]


def test_pending_acks_fail_with_outcome_unknown_when_the_leader_steps_down() -> None:
    r = leader()
    r.append(7, [b"a"], Acks.ALL, 0)
    out = r.receive(VoteRequest(9, 2, 5, 50), 0)
    assert of_type(out, AckFailed) == [AckFailed(7, AckFailure.OUTCOME_UNKNOWN, None)]
    assert role(r) is Role.FOLLOWER


def test_a_leader_without_majority_fetches_steps_down_after_the_election_timeout() -> None:
    r = leader()
    fetch(r, 2, 1, 1, now=500)
    r.tick(1999)
    assert role(r) is Role.LEADER
    fetch(r, 2, 1, 1, now=2400)
    r.tick(2500)
    assert role(r) is Role.LEADER  # replica 2 fetched within the timeout
    r.tick(4500)
    assert role(r) is Role.FOLLOWER and r.leader_id is None


def test_a_fetch_with_nothing_new_is_held_until_the_long_poll_expires() -> None:
    r = leader()
    assert sent(fetch(r, 2, 1, 1, now=0), FetchResponse)  # the HW that commits the epoch
    assert not sent(fetch(r, 2, 1, 1, now=10), FetchResponse)
    assert not sent(r.tick(109), FetchResponse)
    assert sent(r.tick(110), FetchResponse)


def test_a_new_hw_alone_is_told_hw_linger_ms_later_or_with_the_next_records() -> None:
    r = leader()
    linger = r.config.hw_linger_ms
    fetch(r, 2, 1, 1, now=0)
    fetch(r, 2, 1, 1, now=0)  # parked
    assert sent(r.append(7, [b"a"], Acks.ALL, 0), FetchResponse)  # the record, at once
    r.flushed(2, 0)
    out = fetch(r, 2, 2, 1, now=1)  # acknowledges it: the HW moves to 2, nothing else new
    assert of_type(out, AckCompleted) and not sent(out, FetchResponse)
    assert not sent(r.tick(linger), FetchResponse)
    (hw_answer,) = sent(r.tick(1 + linger), FetchResponse)
    assert isinstance(hw_answer.result, Records)
    assert (hw_answer.result.start_offset, hw_answer.result.end_offset) == (2, 2)
    assert hw_answer.result.high_watermark == 2
    # records that come before the linger ends carry the new HW, and nothing is left
    fetch(r, 2, 2, 1, now=10)  # parked
    sent(r.append(8, [b"b"], Acks.ALL, 10), FetchResponse)
    r.flushed(3, 10)
    fetch(r, 2, 3, 1, now=11)  # HW 3, held
    (answer,) = sent(r.append(9, [b"c"], Acks.ALL, 12), FetchResponse)
    assert isinstance(answer.result, Records)
    assert (answer.result.start_offset, answer.result.end_offset) == (3, 4)
    assert answer.result.high_watermark == 3
    assert not sent(r.tick(11 + linger), FetchResponse)


def test_with_no_hw_linger_a_fetch_learns_a_new_hw_at_once() -> None:
    r = Replica(dataclasses.replace(config(), hw_linger_ms=0), random.Random(0), 0)
    r.start()
    r.campaign(0)
    r.receive(VoteResponse(r.epoch, 2, True), 0)
    r.flushed(r.log_end_offset, 0)
    assert sent(fetch(r, 2, 1, 1, now=0), FetchResponse)  # first answer carries the HW
    assert not sent(fetch(r, 2, 1, 1, now=10), FetchResponse)


# -- the follower -----------------------------------------------------------------------------


def follower(log_end_offset: int = 0, history: tuple[EpochStart, ...] = ()) -> Replica:
    """Replica 2, following replica 1 in epoch 5, a fetch outstanding."""
    r = replica(2, history=history, log_end_offset=log_end_offset)
    r.receive(BeginEpoch(5, 1), 0)
    return r


def answer(r: Replica, result: Records | Diverging) -> list[Output]:
    last = r.epoch_history[-1].epoch if r.log_end_offset else 0
    return r.receive(FetchResponse(5, 1, r.log_end_offset, last, result), 0)


def test_a_follower_appends_records_that_start_at_its_log_end_and_adopts_their_epochs() -> None:
    r = follower()
    out = answer(r, Records(0, 3, (EpochStart(2, 0), EpochStart(5, 2)), 1))
    assert of_type(out, PersistEpochHistory) == [
        PersistEpochHistory((EpochStart(2, 0), EpochStart(5, 2)))
    ]
    assert len(of_type(out, AppendFrames)) == 1
    assert r.log_end_offset == 3 and r.high_watermark == 1
    assert out.index(of_type(out, PersistEpochHistory)[0]) < out.index(
        of_type(out, AppendFrames)[0]
    )


def test_a_follower_ignores_records_that_do_not_start_at_its_log_end() -> None:
    r = follower()
    out = r.receive(FetchResponse(5, 1, 4, 2, Records(4, 6, (EpochStart(5, 4),), 0)), 0)
    assert out == [] and r.log_end_offset == 0


def test_a_follower_sets_hw_to_the_smaller_of_the_leader_hw_and_its_log_end() -> None:
    r = follower()
    answer(r, Records(0, 2, (EpochStart(5, 0),), 9))
    assert r.high_watermark == 2


def test_a_follower_is_caught_up_once_its_log_reaches_its_leaders_hw_in_this_epoch() -> None:
    r = replica(2)
    assert not r.caught_up(0), "no leader known: it cannot know what it lacks"
    r.receive(BeginEpoch(5, 1), 0)
    assert not r.caught_up(0), "a leader, and no records answer from it yet"
    answer(r, Records(0, 2, (EpochStart(5, 0),), 4))
    assert not r.caught_up(0), "2 records of the 4 its leader has committed"
    r.flushed(2, 0)
    answer(r, Records(2, 4, (), 4))
    assert r.caught_up(0)
    assert not r.caught_up(1000), "no word from its leader for an election timeout"
    r.receive(BeginEpoch(6, 3), 0)
    assert not r.caught_up(0), "a new leader: caught up again only after its first answer"
    r.flushed(4, 0)
    r.receive(FetchResponse(6, 3, 4, 5, Records(4, 4, (), 4)), 0)
    assert r.caught_up(0)


def test_a_leader_is_caught_up_and_a_candidate_is_not() -> None:
    assert leader().caught_up(10_000)
    r = replica(1)
    r.campaign(0)
    assert role(r) is Role.CANDIDATE and not r.caught_up(0)


def test_a_follower_fetches_again_only_once_its_records_are_flushed() -> None:
    r = follower()
    out = answer(r, Records(0, 2, (EpochStart(5, 0),), 0))
    assert not sent(out, FetchRequest)
    assert sent(r.flushed(2, 0), FetchRequest) == [FetchRequest(5, 2, 2, 5)]


def test_a_diverging_follower_truncates_to_the_smaller_end_of_that_epoch() -> None:
    # own log: epoch 1 on [0, 3), epoch 2 on [3, 10); the leader says epoch 2 ends at 6
    history = (EpochStart(1, 0), EpochStart(2, 3))
    r = follower(10, history)
    out = answer(r, Diverging(2, 6))
    assert of_type(out, TruncateTo) == [TruncateTo(6)]
    assert sent(out, FetchRequest) == [FetchRequest(5, 2, 6, 2)]
    # the leader knows epoch 1 only up to 8: the follower's own epoch 1 ends at 3
    r = follower(10, history)
    out = answer(r, Diverging(1, 8))
    assert of_type(out, TruncateTo) == [TruncateTo(3)]
    assert of_type(out, PersistEpochHistory) == [PersistEpochHistory((EpochStart(1, 0),))]


def test_a_divergence_below_the_high_watermark_is_refused_as_a_stale_message() -> None:
    # Only a message that is not what it claims (an older incarnation's leader of the same
    # epoch, a replica that lost its state) can ask that: a committed record is never
    # truncated, the answer is ignored and counted, and the fetch is retried.
    r = follower(10, (EpochStart(1, 0),))
    r.receive(FetchResponse(5, 1, 10, 1, Records(10, 10, (), 8)), 0)
    assert r.high_watermark == 8
    r.tick(300)  # fetch retry, since the empty answer's follow-up was lost
    out = answer(r, Diverging(1, 5))
    assert not of_type(out, TruncateTo) and r.log_end_offset == 10
    assert r.stale_messages[Stale.INVALID_DIVERGENCE] == 1
    assert sent(r.tick(600), FetchRequest) == [FetchRequest(5, 2, 10, 1)]


def test_a_fenced_answer_makes_the_follower_follow_the_newer_leader() -> None:
    r = follower()
    r.receive(FetchResponse(8, 3, 0, 0, Fenced(8, 3)), 0)
    assert (r.epoch, r.leader_id) == (8, 3)


def test_a_restart_forgets_epochs_past_the_recovered_log_and_persists_that_first() -> None:
    history = [EpochStart(1, 0), EpochStart(3, 5)]
    r = Replica(
        config(2),
        random.Random(0),
        0,
        state=QuorumState(3, 2, 2),
        history=history,
        log_end_offset=4,
    )
    out = r.start()
    assert out[0] == PersistEpochHistory((EpochStart(1, 0),))
    assert PersistQuorumState(QuorumState(3, 2, None)) in out
    assert role(r) is Role.FOLLOWER


# -- observers (non-voting replicas) --------------------------------------------------------


def observer(
    replica_id: int = 4,
    *,
    state: QuorumState | None = None,
    history: Sequence[EpochStart] = (),
    log_end_offset: int = 0,
) -> Replica:
    """An observer of voters 1-3 (observers 4 and 5), nothing heard yet."""
    return replica(
        replica_id,
        state=state,
        history=history,
        log_end_offset=log_end_offset,
        observers=OBSERVERS,
    )


def test_a_replica_is_a_voter_or_an_observer_and_only_voters_make_the_majority() -> None:
    c = config(4, observers=OBSERVERS)
    assert not c.is_voter and c.majority == 2
    assert config(1, observers=OBSERVERS).is_voter
    with pytest.raises(AssertionError):
        config(6, observers=OBSERVERS)  # neither
    with pytest.raises(AssertionError):
        config(1, observers=(3, 4))  # 3 cannot be both


def test_an_observer_never_campaigns_and_forgets_a_silent_leader_after_its_election_timeout() -> (
    None
):
    r = observer()
    r.receive(BeginEpoch(3, 1), 0)
    assert r.leader_id == 1
    out = r.tick(2000)
    assert (role(r), r.epoch, r.leader_id) == (Role.FOLLOWER, 3, None)
    assert out == [PersistQuorumState(QuorumState(3, None, None))]
    for now in range(2000, 20_000, 100):  # leader unknown: it waits, silently
        assert r.tick(now) == []
    assert (role(r), r.epoch) == (Role.FOLLOWER, 3)


def test_an_observer_without_any_leader_never_becomes_a_candidate() -> None:
    r = observer()
    assert all(r.tick(now) == [] for now in range(0, 20_000, 100))
    assert r.campaign(20_000) == []
    assert (role(r), r.epoch) == (Role.FOLLOWER, 0)


def test_an_observer_never_grants_a_vote_but_learns_a_higher_epoch_from_the_request() -> None:
    r = observer()
    out = r.receive(VoteRequest(2, 1, 0, 0), 0)
    assert out == [
        PersistQuorumState(QuorumState(2, None, None)),
        Send(1, VoteResponse(2, 4, False)),
    ]
    assert sent(r.receive(VoteRequest(2, 1, 9, 99), 0), VoteResponse) == [VoteResponse(2, 4, False)]
    assert r.quorum_state.voted_for is None


def test_an_observer_follows_begin_epoch_and_appends_records_like_a_follower() -> None:
    r = observer()
    out = r.receive(BeginEpoch(5, 1), 0)
    assert out[-1] == Send(1, FetchRequest(5, 4, 0, 0))
    out = r.receive(FetchResponse(5, 1, 0, 0, Records(0, 3, (EpochStart(5, 0),), 9)), 0)
    assert len(of_type(out, AppendFrames)) == 1
    assert r.log_end_offset == 3 and r.high_watermark == 3  # min(leader HW, own LEO)
    assert sent(r.flushed(3, 0), FetchRequest) == [FetchRequest(5, 4, 3, 5)]


def test_an_observer_truncates_a_divergent_tail_like_a_follower() -> None:
    r = observer(history=[EpochStart(1, 0), EpochStart(2, 3)], log_end_offset=10)
    r.receive(BeginEpoch(5, 1), 0)
    out = r.receive(FetchResponse(5, 1, 10, 2, Diverging(2, 6)), 0)
    assert of_type(out, TruncateTo) == [TruncateTo(6)]
    assert sent(out, FetchRequest) == [FetchRequest(5, 4, 6, 2)]


def test_an_append_on_an_observer_fails_with_not_leader_naming_the_leader() -> None:
    r = observer()
    r.receive(BeginEpoch(1, 2), 0)
    assert r.append(9, [b"x"], Acks.ALL, 0) == [AckFailed(9, AckFailure.NOT_LEADER, 2)]


def test_an_observer_learns_the_new_leader_from_a_fenced_answer() -> None:
    r = observer()
    r.receive(BeginEpoch(3, 1), 0)
    out = r.receive(FetchResponse(4, 1, 0, 0, Fenced(4, 2)), 0)
    assert (r.epoch, r.leader_id) == (4, 2)
    assert sent(out, FetchRequest) == [FetchRequest(4, 4, 0, 0)]


def test_an_observer_restarted_without_a_leader_waits_for_begin_epoch_then_fetches() -> None:
    r = observer(state=QuorumState(3, None, None), history=[EpochStart(3, 0)], log_end_offset=2)
    assert r.tick(100) == []
    out = r.receive(BeginEpoch(3, 1), 100)
    assert r.leader_id == 1
    assert sent(out, FetchRequest) == [FetchRequest(3, 4, 2, 3)]


def test_a_new_leader_sends_begin_epoch_to_voters_and_observers_and_names_only_voters() -> None:
    r = replica(1, observers=OBSERVERS)
    r.campaign(0)
    out = r.receive(VoteResponse(1, 2, True), 0)
    assert role(r) is Role.LEADER
    assert sorted(s.to for s in of_type(out, Send)) == [2, 3, 4, 5]
    assert of_type(out, AppendControl)[0].marker.voters == VOTERS
    assert set(r.followers()) == {2, 3, 4, 5}


def test_a_leader_serves_observers_but_counts_only_voters_toward_the_high_watermark() -> None:
    r = leader(observers=OBSERVERS)
    r.append(7, [b"a", b"b"], Acks.ALL, 0)
    r.flushed(3, 0)
    for obs in OBSERVERS:  # both observers hold everything: still no commit
        out = fetch(r, obs, 3, 1)
        assert not of_type(out, SetHighWatermark) and not of_type(out, AckCompleted)
    assert r.high_watermark == 0
    records = sent(fetch(r, 4, 0, 0), FetchResponse)[0].result
    assert isinstance(records, Records) and (records.start_offset, records.end_offset) == (0, 3)
    out = fetch(r, 2, 3, 1)
    assert of_type(out, SetHighWatermark) == [SetHighWatermark(3)]
    assert of_type(out, AckCompleted) == [AckCompleted(7, 1, 2)]
    # the observer's progress is tracked all the same: its latest fetch (from 0) wins, as a
    # replica that fetches from lower down no longer holds what it had (a repaired log)
    assert r.followers()[4][0] == 0
    fetch(r, 4, 3, 1)
    assert r.followers()[4][0] == 3


def test_a_leader_long_polls_an_observer_fetch_and_answers_it_on_new_data() -> None:
    r = leader(observers=OBSERVERS)
    assert not sent(fetch(r, 4, 1, 1, now=0), FetchResponse)  # only the HW to tell
    assert sent(r.tick(r.config.hw_linger_ms), FetchResponse)  # the HW, a linger later
    assert not sent(fetch(r, 4, 1, 1, now=10), FetchResponse)  # parked
    out = r.append(7, [b"a"], Acks.LEADER, 20)
    assert [s.to for s in of_type(out, Send)] == [4]


def test_a_leader_whose_only_fetchers_are_observers_steps_down_after_the_election_timeout() -> None:
    r = leader(observers=OBSERVERS)
    now = 0
    while role(r) is Role.LEADER and now < 10_000:
        fetch(r, 4, 1, 1, now=now)
        fetch(r, 5, 1, 1, now=now)
        r.tick(now)
        now += 100
    assert now - 100 == 2000  # election_timeout_ms_max, as without observers
    assert role(r) is Role.FOLLOWER and r.leader_id is None


def test_a_leader_repeats_begin_epoch_to_observers_until_they_fetch() -> None:
    r = leader(observers=OBSERVERS)
    fetch(r, 2, 1, 1, now=50)
    fetch(r, 3, 1, 1, now=50)
    fetch(r, 5, 1, 1, now=50)
    r.tick(50 + r.config.hw_linger_ms)  # the new HW to the fetches held for it
    out = r.tick(100)
    assert [(s.to, s.message) for s in of_type(out, Send)] == [(4, BeginEpoch(1, 1))]


def test_a_leader_tells_an_observer_that_went_quiet_who_leads_so_it_finds_the_leader_again() -> (
    None
):
    r = leader(observers=OBSERVERS)
    o = observer()
    o.receive(BeginEpoch(1, 1), 0)
    for replica_id in (2, 3, 4, 5):
        fetch(r, replica_id, 1, 1, now=0)
    for now in range(100, 1000, 100):  # within the election timeout: nobody is told again
        fetch(r, 2, 1, 1, now=now)
        fetch(r, 5, 1, 1, now=now)
        assert not sent(r.tick(now), BeginEpoch)
    out = r.tick(1000)  # observer 4 has been quiet for election_timeout_ms_min; voter 3 too
    assert [s.to for s in of_type(out, Send) if isinstance(s.message, BeginEpoch)] == [4]
    o.tick(2000)
    assert o.leader_id is None  # it forgot the leader meanwhile
    begin = [s.message for s in of_type(r.tick(2000), Send) if s.to == 4]
    assert begin == [BeginEpoch(1, 1)]
    out = o.receive(begin[0], 2000)
    assert o.leader_id == 1 and sent(out, FetchRequest) == [FetchRequest(1, 4, 0, 0)]


# -- retention: a follower behind the leader's log start --------------------------------------


def committed_leader(log_end_offset: int) -> Replica:
    """Leader of epoch 2 over `log_end_offset` records of epoch 1; follower 2 holds them all
    and the control record, so HW = LEO."""
    r = leader(history=[EpochStart(1, 0)], log_end_offset=log_end_offset, state=QuorumState(1))
    fetch(r, 2, r.log_end_offset, 2)
    assert r.high_watermark == r.log_end_offset
    return r


def test_a_leader_sends_a_follower_below_its_log_start_to_start_there() -> None:
    r = committed_leader(10)  # epoch 1 on [0, 10), epoch 2 from 10
    r.log_start_advanced(6, 0)
    out = fetch(r, 3, 2, 1)
    assert sent(out, FetchResponse)[0].result == StartAt(6, (EpochStart(1, 0),))
    # at the log start itself, records as usual
    out = fetch(r, 3, 6, 1)
    assert isinstance(sent(out, FetchResponse)[0].result, Records)


def test_a_leader_sends_the_epochs_before_its_log_start_only() -> None:
    r = committed_leader(10)
    r.log_start_advanced(11, 0)  # the control record of epoch 2 (offset 10) is gone too
    out = fetch(r, 3, 0, 0)
    assert sent(out, FetchResponse)[0].result == StartAt(11, (EpochStart(1, 0), EpochStart(2, 10)))


def test_retention_never_passes_the_high_watermark() -> None:
    r = leader(history=[EpochStart(1, 0)], log_end_offset=10, state=QuorumState(1))
    with pytest.raises(AssertionError):
        r.log_start_advanced(r.high_watermark + 1, 0)


def test_a_follower_told_to_start_at_the_log_start_resets_its_log_and_fetches_from_there() -> None:
    r = replica(2, history=[EpochStart(1, 0)], log_end_offset=2)
    r.receive(BeginEpoch(2, 1), 0)
    start_at = StartAt(6, (EpochStart(1, 0),))
    out = r.receive(FetchResponse(2, 1, 2, 1, start_at), 0)
    # the history first (a crash before the reset fetches below the log start again)
    assert [type(o) for o in out if not isinstance(o, Send)] == [
        PersistEpochHistory,
        ResetLog,
        SetHighWatermark,
    ]
    assert of_type(out, ResetLog) == [ResetLog(6)]
    assert (r.log_end_offset, r.high_watermark, r.flushed_offset) == (6, 6, 6)
    assert sent(out, FetchRequest) == [FetchRequest(2, 2, 6, 1)]


def test_a_restarted_replica_counts_everything_below_its_log_start_as_committed() -> None:
    r = Replica(
        config(2),
        random.Random(0),
        0,
        history=[EpochStart(1, 0)],
        log_end_offset=9,
        high_watermark=3,  # an older checkpoint than the last retention
        log_start_offset=6,
    )
    assert r.high_watermark == 6
