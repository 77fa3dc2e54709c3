"""Membership changes in the replica state machine: the rules, input by input."""

from __future__ import annotations

import random

import pytest

from replog.replication import (
    AckCompleted,
    AckFailed,
    AckFailure,
    AppendControl,
    AppendFrames,
    BeginEpoch,
    Diverging,
    EpochStart,
    FetchRequest,
    FetchResponse,
    Membership,
    MembershipChange,
    MembershipEntry,
    Output,
    PersistMembershipHistory,
    QuorumState,
    Records,
    Replica,
    ReplicaConfig,
    Role,
    Send,
    SetHighWatermark,
    StartAt,
    TruncateTo,
    VoteRequest,
    VoteResponse,
)
from tests.unit.test_replication_replica import fetch, of_type, role, sent

VOTERS = (1, 2, 3)


def make(
    replica_id: int = 1,
    *,
    observers: tuple[int, ...] = (4,),
    memberships: tuple[MembershipEntry, ...] = (),
    history: tuple[EpochStart, ...] = (),
    log_end_offset: int = 0,
    state: QuorumState | None = None,
) -> Replica:
    config = ReplicaConfig(
        replica_id, VOTERS, observers, election_timeout_ms_min=1000,
        election_timeout_ms_max=2000, fetch_wait_ms_max=100, fetch_retry_ms=200,
        begin_epoch_retry_ms=100,
    )  # fmt: skip
    r = Replica(
        config,
        random.Random(0),
        0,
        state=state,
        history=history,
        log_end_offset=log_end_offset,
        memberships=memberships,
    )
    r.start()
    return r


def serving_leader(observers: tuple[int, ...] = (4,)) -> Replica:
    """Replica 1 leads epoch 1; its epoch marker (offset 0) is committed by 2's fetch."""
    r = make(1, observers=observers)
    r.campaign(0)
    r.receive(VoteResponse(1, 2, True), 0)
    r.flushed(r.log_end_offset, 0)
    fetch(r, 2, 1, 1)
    assert r.serving and r.high_watermark == 1
    return r


def failure(outputs: list[Output]) -> AckFailure:
    (failed,) = of_type(outputs, AckFailed)
    return failed.failure


def commit(r: Replica, *followers: int) -> list[Output]:
    """Flush the leader's log and have `followers` fetch all of it."""
    out = r.flushed(r.log_end_offset, 0)
    for follower in followers:
        out += fetch(r, follower, r.log_end_offset, r.epoch)
    return out


# -- refusals ----------------------------------------------------------------------------


def test_a_follower_refuses_a_membership_change_as_not_leader_naming_the_leader() -> None:
    r = make(2)
    r.receive(BeginEpoch(1, 1), 0)
    out = r.change_membership(7, (1, 2, 3), (), 0)
    assert out == [AckFailed(7, AckFailure.NOT_LEADER, 1)]


def test_a_leader_whose_epoch_is_not_committed_refuses_any_change() -> None:
    # Ongaro's single-server-change bug: a change appended before the leader's own epoch
    # commits could form a majority disjoint from an earlier leader's uncommitted change
    r = make(1)
    r.campaign(0)
    r.receive(VoteResponse(1, 2, True), 0)
    assert r.role is Role.LEADER and not r.serving
    assert failure(r.change_membership(7, (1, 2, 3), (), 0)) is AckFailure.EPOCH_NOT_COMMITTED


def test_a_leader_handing_over_refuses_naming_the_target() -> None:
    r = serving_leader()
    r.transfer_leadership(2, 0)
    assert r.change_membership(7, (1, 2), (), 0) == [AckFailed(7, AckFailure.NOT_LEADER, 2)]


@pytest.mark.parametrize(
    ("voters", "observers"),
    [((), (4,)), ((1, 1, 2), ()), ((1, 2, 3), (3,)), ((1, 2, 3), (4, 4))],
    ids=["no-voter", "duplicate-voter", "both-sets", "duplicate-observer"],
)
def test_malformed_memberships_are_refused_as_invalid(
    voters: tuple[int, ...], observers: tuple[int, ...]
) -> None:
    r = serving_leader()
    assert failure(r.change_membership(7, voters, observers, 0)) is AckFailure.INVALID_MEMBERSHIP


def test_more_than_one_voter_changed_at_once_is_refused() -> None:
    r = serving_leader(observers=(4, 5))
    fetch(r, 4, r.log_end_offset, 1)
    fetch(r, 5, r.log_end_offset, 1)
    for voters in [(1, 2, 3, 4, 5), (1,), (1, 2, 4)]:  # two added, two removed, a swap
        out = r.change_membership(7, voters, (), 0)
        assert failure(out) is AckFailure.TOO_MANY_VOTER_CHANGES, voters


def test_the_leader_refuses_to_remove_itself() -> None:
    r = serving_leader()
    assert failure(r.change_membership(7, (2, 3), (), 0)) is AckFailure.LEADER_REMOVAL
    assert failure(r.change_membership(7, (2, 3), (1,), 0)) is AckFailure.LEADER_REMOVAL


def test_a_voter_is_added_only_from_an_observer_that_fetched_up_to_the_high_watermark() -> None:
    r = serving_leader(observers=(4,))
    # 5 is in neither set; 4 is an observer that has not fetched in this epoch
    assert failure(r.change_membership(7, (1, 2, 3, 5), (4,), 0)) is AckFailure.NOT_CAUGHT_UP
    assert failure(r.change_membership(7, (1, 2, 3, 4), (), 0)) is AckFailure.NOT_CAUGHT_UP
    fetch(r, 4, 0, 0)  # fetching, but behind the HW (1)
    assert failure(r.change_membership(7, (1, 2, 3, 4), (), 0)) is AckFailure.NOT_CAUGHT_UP
    fetch(r, 4, 1, 1)  # at the HW: caught up
    out = r.change_membership(7, (1, 2, 3, 4), (), 0)
    assert of_type(out, AckFailed) == []
    assert r.membership == Membership((1, 2, 3, 4), ())


def test_a_second_change_waits_until_the_first_is_committed() -> None:
    r = serving_leader(observers=(4,))
    r.change_membership(7, (1, 2, 3), (), 0)  # drop observer 4
    out = r.change_membership(8, (1, 2, 3), (5,), 0)
    assert failure(out) is AckFailure.MEMBERSHIP_CHANGE_IN_PROGRESS
    commit(r, 2)
    assert of_type(r.change_membership(9, (1, 2, 3), (5,), 0), AckFailed) == []


# -- a change, from the leader's side ------------------------------------------------------


def test_the_leader_persists_the_history_then_appends_the_record_and_acks_once_committed() -> None:
    r = serving_leader(observers=())
    out = r.change_membership(7, (1, 2, 3), (4,), 0)
    entry = MembershipEntry(1, Membership((1, 2, 3), (4,)))
    disk = [o for o in out if isinstance(o, PersistMembershipHistory | AppendControl)]
    assert disk == [
        PersistMembershipHistory((entry,)),
        AppendControl(1, MembershipChange((1, 2, 3), (4,))),
    ]
    assert r.membership_history == (entry,)
    # the new observer is told who leads at once
    assert Send(4, BeginEpoch(1, 1)) in out
    assert of_type(out, AckCompleted) == []
    out = commit(r, 2)
    assert of_type(out, AckCompleted) == [AckCompleted(7, 1, 1)]


def test_asking_again_for_the_membership_the_log_holds_appends_nothing() -> None:
    r = serving_leader(observers=(4,))
    r.change_membership(6, (1, 2, 3), (), 0)
    leo = r.log_end_offset
    out = r.change_membership(7, (1, 2, 3), (), 0)  # the pending one: wait for it
    assert r.log_end_offset == leo and of_type(out, AckCompleted) == []
    out = commit(r, 2)
    assert of_type(out, AckCompleted) == [AckCompleted(6, 1, 1), AckCompleted(7, 1, 1)]
    out = r.change_membership(8, (3, 2, 1), (), 0)  # committed: answered at once
    assert r.log_end_offset == leo and of_type(out, AckCompleted) == [AckCompleted(8, 1, 1)]


def test_asking_for_the_starting_membership_records_it_once() -> None:
    """The starting membership (no record yet) is written to the log when asked for, so
    that the quorum is read from the log from then on; asking again appends nothing."""
    r = serving_leader(observers=(4,))
    assert r.membership_history == ()
    out = r.change_membership(5, (3, 2, 1), (4,), 0)
    entry = MembershipEntry(1, Membership((3, 2, 1), (4,)))
    assert r.membership_history == (entry,)
    assert AppendControl(1, MembershipChange((3, 2, 1), (4,))) in out
    assert r.membership.same_as(Membership((1, 2, 3), (4,)))
    out = r.change_membership(6, (1, 2, 3), (4,), 0)  # the retry waits for the same record
    assert r.log_end_offset == 2 and of_type(out, AckCompleted) == []
    out = commit(r, 2)
    assert of_type(out, AckCompleted) == [AckCompleted(5, 1, 1), AckCompleted(6, 1, 1)]


def test_the_high_watermark_counts_the_voters_of_the_latest_membership_at_once() -> None:
    r = serving_leader(observers=(4,))
    fetch(r, 4, 1, 1)
    r.change_membership(7, (1, 2, 3, 4), (), 0)  # four voters: a majority is three
    r.flushed(r.log_end_offset, 0)
    fetch(r, 2, r.log_end_offset, 1)
    assert r.high_watermark == 1  # 1 and 2 are no majority of four
    out = fetch(r, 4, r.log_end_offset, 1)
    assert r.high_watermark == 2 and of_type(out, AckCompleted) == [AckCompleted(7, 1, 1)]


def test_a_removed_voter_is_sent_nothing_and_no_longer_counts() -> None:
    r = serving_leader(observers=())
    r.change_membership(7, (1, 2), (), 0)
    assert 3 not in r.followers()
    assert fetch(r, 3, 1, 1) == []  # its fetches go unanswered
    out = commit(r, 2)  # 1 and 2 are the majority of the new voters
    assert of_type(out, AckCompleted) == [AckCompleted(7, 1, 1)]


def test_a_removed_replica_never_campaigns_nor_votes() -> None:
    removed = (MembershipEntry(0, Membership((1, 2), ())),)
    r = make(3, observers=(), memberships=removed, history=(EpochStart(1, 0),), log_end_offset=1)
    assert not r.is_voter
    assert of_type(r.tick(5000), Send) == []
    r.campaign(5000)
    assert r.role is Role.FOLLOWER
    out = r.receive(VoteRequest(2, 1, 1, 1), 5000)
    assert sent(out, VoteResponse) == [VoteResponse(2, 3, False)]


def test_a_candidate_counts_only_the_votes_of_its_own_voters() -> None:
    r = make(1, observers=(4,))
    r.campaign(0)
    r.receive(VoteResponse(1, 4, True), 0)  # an observer's vote does not count
    assert role(r) is Role.CANDIDATE
    r.receive(VoteResponse(1, 3, True), 0)
    assert role(r) is Role.LEADER


def test_an_observer_votes_for_a_candidate_whose_membership_is_newer_than_its_own() -> None:
    # 4 was made a voter by a record at offset 5 it has not fetched: a candidate holding
    # it may need its vote (Raft thesis 4.1, KIP-853)
    r = make(4, observers=(4,), history=(EpochStart(1, 0),), log_end_offset=3)
    older = VoteRequest(2, 1, 1, 6, membership_offset=-1)
    assert sent(r.receive(older, 0), VoteResponse) == [VoteResponse(2, 4, False)]
    newer = VoteRequest(3, 1, 1, 6, membership_offset=5)
    assert sent(r.receive(newer, 0), VoteResponse) == [VoteResponse(3, 4, True)]
    assert r.role is Role.FOLLOWER  # it still never campaigns


def test_candidates_name_their_latest_membership_record() -> None:
    entry = MembershipEntry(2, Membership((1, 2, 3, 4), ()))
    r = make(1, observers=(), memberships=(entry,), history=(EpochStart(1, 0),), log_end_offset=3)
    out = r.tick(5000)
    assert [request.membership_offset for request in sent(out, VoteRequest)] == [2, 2, 2]


# -- a change, from a follower's side --------------------------------------------------------


def follower(replica_id: int = 2) -> Replica:
    r = make(replica_id)
    r.receive(BeginEpoch(1, 1), 0)
    return r


def records(start: int, end: int, hw: int, *entries: MembershipEntry) -> Records:
    return Records(start, end, (EpochStart(1, start),) if start == 0 else (), hw, b"", entries)


def test_a_follower_persists_the_membership_before_the_records_and_uses_it_at_once() -> None:
    r = follower()
    entry = MembershipEntry(1, Membership((1, 2), (3,)))
    out = r.receive(FetchResponse(1, 1, 0, 0, records(0, 2, 0, entry)), 0)
    kinds = [type(o) for o in out if isinstance(o, PersistMembershipHistory | AppendFrames)]
    assert kinds == [PersistMembershipHistory, AppendFrames]
    assert r.membership == Membership((1, 2), (3,))  # uncommitted, and in force


def test_a_truncation_that_removes_the_record_reverts_to_the_membership_before() -> None:
    r = follower()
    entry = MembershipEntry(1, Membership((1, 2), (3,)))
    r.receive(FetchResponse(1, 1, 0, 0, records(0, 2, 1, entry)), 0)
    r.flushed(2, 0)
    r.receive(BeginEpoch(2, 3), 0)
    out = r.receive(FetchResponse(2, 3, 2, 1, Diverging(1, 1)), 0)
    assert of_type(out, TruncateTo) == [TruncateTo(1)]
    assert of_type(out, PersistMembershipHistory) == [PersistMembershipHistory(())]
    assert r.membership == Membership(VOTERS, (4,))


def test_a_follower_told_to_start_at_the_log_start_takes_the_membership_in_force_there() -> None:
    r = follower()
    entry = MembershipEntry(3, Membership((1, 2, 3, 4), ()))
    start_at = StartAt(10, (EpochStart(1, 0),), (entry,))
    out = r.receive(FetchResponse(1, 1, 0, 0, start_at), 0)
    assert of_type(out, PersistMembershipHistory) == [PersistMembershipHistory((entry,))]
    assert r.membership == Membership((1, 2, 3, 4), ())
    assert of_type(out, SetHighWatermark) == [SetHighWatermark(10)]


def test_a_leader_sends_the_memberships_among_the_records_and_the_one_in_force_at_its_start() -> (
    None
):
    r = serving_leader(observers=())
    r.change_membership(7, (1, 2, 3), (4,), 0)
    commit(r, 2)
    answer = sent(fetch(r, 3, 0, 0), FetchResponse)[0].result
    assert isinstance(answer, Records)
    assert answer.memberships == (MembershipEntry(1, Membership((1, 2, 3), (4,))),)
    r.log_start_advanced(2, 0)
    answer = sent(fetch(r, 4, 0, 0), FetchResponse)[0].result
    entry = MembershipEntry(1, Membership((1, 2, 3), (4,)))
    assert answer == StartAt(2, (EpochStart(1, 0),), (entry,))


def test_a_restart_drops_memberships_past_the_log_end_and_persists_the_repair() -> None:
    entries = (
        MembershipEntry(1, Membership((1, 2), ())),
        MembershipEntry(5, Membership((1, 2, 3), ())),  # its record was lost (not flushed)
    )
    config = ReplicaConfig(2, VOTERS)
    r = Replica(
        config, random.Random(0), 0, history=(EpochStart(1, 0),), log_end_offset=3,
        memberships=entries,
    )  # fmt: skip
    assert PersistMembershipHistory(entries[:1]) in r.start()
    assert r.membership == Membership((1, 2), ())


def test_a_fetch_of_a_removed_replica_is_not_answered_but_a_new_observer_is() -> None:
    r = serving_leader(observers=())
    assert fetch(r, 5, 0, 0) == []
    r.change_membership(7, (1, 2, 3), (5,), 0)
    out = fetch(r, 5, 0, 0)
    assert isinstance(sent(out, FetchResponse)[0].result, Records)
    assert FetchRequest(1, 5, 0, 0).replica_id in r.followers()


def test_retention_forgets_the_changes_before_the_one_in_force_at_the_log_start() -> None:
    r = serving_leader(observers=())
    r.change_membership(7, (1, 2, 3), (4,), 0)
    commit(r, 2)
    r.change_membership(8, (1, 2, 3), (4, 5), 0)
    commit(r, 2)
    r.change_membership(9, (1, 2, 3), (5,), 0)
    commit(r, 2)
    assert [e.offset for e in r.membership_history] == [1, 2, 3]
    assert r.log_start_advanced(2, 0) == []  # the change at 1 is in force at 2: kept
    out = r.log_start_advanced(3, 0)
    assert out == [PersistMembershipHistory(r.membership_history)]
    assert [e.offset for e in r.membership_history] == [2, 3]
    assert r.membership == Membership((1, 2, 3), (5,))
