"""Late, duplicate and stale messages: the replica ignores them (and counts them), never
crashes. Each test drives the pure core into the state a reordered, duplicated or delayed
message reaches (issue 25: a burst of topic creations killed every node with an assert)."""

from __future__ import annotations

from replog.replication import (
    AppendFrames,
    BeginEpoch,
    Diverging,
    EpochStart,
    Fenced,
    FetchRequest,
    FetchResponse,
    Membership,
    MembershipEntry,
    Records,
    ResetLog,
    Role,
    StartAt,
    TimeoutNow,
    TruncateTo,
    VoteRequest,
    VoteResponse,
)
from replog.replication.stale import Stale
from tests.unit.test_replication_replica import (
    answer,
    follower,
    leader,
    of_type,
    replica,
    role,
    sent,
)


def test_a_late_vote_that_elects_a_candidate_in_a_pre_vote_round_ends_that_round() -> None:
    # The burst's ordering: a candidate's election timeout passes while its votes are in
    # flight (a busy node), so it asks for pre-votes for the next epoch; the late vote of
    # its own epoch then makes it leader, and the pre-vote answers arrive after that.
    r = replica(1)
    r.campaign(0)
    assert role(r) is Role.CANDIDATE and r.epoch == 1
    out = r.tick(10_000)  # election timeout as a candidate: a pre-vote round for epoch 2
    assert [m.epoch for m in sent(out, VoteRequest) if m.pre_vote] == [2, 2]
    r.receive(VoteResponse(1, 2, True), 10_001)  # the late vote of epoch 1
    assert role(r) is Role.LEADER and r.epoch == 1
    out = r.receive(VoteResponse(2, 3, True, True), 10_002)  # the late pre-vote grant
    assert role(r) is Role.LEADER and r.epoch == 1
    assert not sent(out, VoteRequest)  # no election started by a leader
    assert r.stale_messages[Stale.PRE_VOTE_ANSWER] == 1


def test_a_pre_vote_answer_after_the_round_ended_is_ignored() -> None:
    r = follower()  # replica 2, following 1 in epoch 5
    r.tick(10_000)  # its leader went quiet: a pre-vote round for epoch 6
    answer(r, Records(0, 0, (), 0))  # the leader answers after all: the round ends
    out = r.receive(VoteResponse(6, 3, True, True), 10_001)
    assert role(r) is Role.FOLLOWER and r.epoch == 5 and not sent(out, VoteRequest)
    assert r.stale_messages[Stale.PRE_VOTE_ANSWER] == 1


def test_a_duplicate_vote_after_winning_is_ignored() -> None:
    r = replica(1)
    r.campaign(0)
    r.receive(VoteResponse(1, 2, True), 1)
    assert role(r) is Role.LEADER
    out = r.receive(VoteResponse(1, 2, True), 2)  # duplicated by the network
    assert role(r) is Role.LEADER and out == []
    assert r.stale_messages[Stale.VOTE_ANSWER] == 1


def test_records_from_another_leader_of_the_same_epoch_are_never_followed() -> None:
    # (was: assert "two leaders in one epoch") An older incarnation of the partition, or
    # a replica that lost its vote, may lead "epoch 5" too: its answer is input, not proof
    # of a broken protocol, and this replica keeps following its own leader.
    r = follower()
    out = r.receive(FetchResponse(5, 3, 0, 0, Records(0, 2, (EpochStart(5, 0),), 2)), 0)
    assert not of_type(out, AppendFrames) and r.log_end_offset == 0 and r.leader_id == 1
    assert r.stale_messages[Stale.OTHER_LEADER] == 1


def test_begin_epoch_of_another_leader_of_the_same_epoch_is_ignored() -> None:
    # (was: assert "two leaders in one epoch") on a follower and on the leader itself
    r = follower()
    r.receive(BeginEpoch(5, 3), 0)
    assert r.leader_id == 1
    lead = leader()
    lead.receive(BeginEpoch(lead.epoch, 3), 0)
    assert role(lead) is Role.LEADER and lead.leader_id == 1
    assert r.stale_messages[Stale.OTHER_LEADER] == lead.stale_messages[Stale.OTHER_LEADER] == 1


def test_a_late_begin_epoch_of_an_older_epoch_is_ignored() -> None:
    r = follower()
    assert r.receive(BeginEpoch(4, 3), 0) == [] and r.leader_id == 1
    assert r.stale_messages[Stale.BEGIN_EPOCH] == 1


def test_an_echo_of_its_own_earlier_leadership_does_not_make_a_follower_follow_itself() -> None:
    # A replica recreated (new incarnation, or restarted on an empty disk) while messages
    # naming its former leadership are in flight.
    r = replica(2)
    r.receive(BeginEpoch(3, 2), 0)
    assert r.epoch == 3 and r.leader_id is None and role(r) is Role.FOLLOWER
    out = r.receive(FetchResponse(3, 1, 0, 0, Fenced(4, 2)), 0)
    assert r.epoch == 4 and r.leader_id is None and not sent(out, FetchRequest)
    assert r.stale_messages[Stale.OWN_LEADERSHIP] == 2


def test_records_that_do_not_extend_the_log_are_ignored() -> None:
    # (was: asserts in _append_records, EpochHistory.append and MembershipHistory.append)
    backwards = (MembershipEntry(3, Membership((1,))), MembershipEntry(2, Membership((2,))))
    bad = [
        Records(1, 3, (), 0),  # does not start at the log end
        Records(2, 1, (), 0),  # ends before it starts
        Records(2, 4, (EpochStart(1, 2),), 0),  # an epoch older than the log's last
        Records(2, 4, (EpochStart(6, 7),), 0),  # a boundary outside the records
        Records(2, 4, (EpochStart(6, 3), EpochStart(5, 3)), 0),  # epochs out of order
        Records(2, 4, (), 0, memberships=(MembershipEntry(9, Membership((1, 2))),)),
        Records(2, 4, (), 0, memberships=(MembershipEntry(2, Membership((1, 1))),)),
        Records(2, 4, (), 0, memberships=backwards),  # changes out of order
    ]
    for records in bad:
        r = follower(2, (EpochStart(4, 0),))
        out = r.receive(FetchResponse(5, 1, 2, 4, records), 0)
        assert not of_type(out, AppendFrames) and r.log_end_offset == 2, records
        assert r.epoch_history == (EpochStart(4, 0),), records
        assert r.stale_messages[Stale.INVALID_RECORDS] == 1, records


def test_a_divergence_that_would_not_move_the_log_back_is_ignored() -> None:
    # (was: assert "divergence must move back")
    r = follower(4, (EpochStart(4, 0),))
    out = r.receive(FetchResponse(5, 1, 4, 4, Diverging(4, 9)), 0)
    assert not of_type(out, TruncateTo) and r.log_end_offset == 4
    assert r.stale_messages[Stale.INVALID_DIVERGENCE] == 1


def test_a_log_start_that_does_not_move_the_log_forward_or_is_out_of_order_is_ignored() -> None:
    # (was: assert "a log start moves a follower forward", and EpochHistory's order)
    bad = [
        StartAt(3, (EpochStart(1, 0),)),  # behind the log end
        StartAt(9, (EpochStart(2, 0), EpochStart(1, 4))),  # epochs out of order
        StartAt(9, (EpochStart(1, 0), EpochStart(2, 9))),  # an epoch starting at its end
        StartAt(9, (EpochStart(1, 0),), (MembershipEntry(9, Membership((1, 2))),)),
        StartAt(9, (EpochStart(1, 0),), (MembershipEntry(2, Membership(())),)),
    ]
    for start_at in bad:
        r = follower(4, (EpochStart(4, 0),))
        out = r.receive(FetchResponse(5, 1, 4, 4, start_at), 0)
        assert not of_type(out, ResetLog) and r.log_end_offset == 4, start_at
        assert r.stale_messages[Stale.INVALID_START] == 1, start_at


def test_fetches_to_a_follower_and_from_a_removed_replica_are_ignored() -> None:
    r = follower()
    assert r.receive(FetchRequest(5, 3, 0, 0), 0) == []
    lead = leader()
    assert lead.receive(FetchRequest(lead.epoch, 9, 0, 0), 0) == []  # not a member
    assert r.stale_messages[Stale.FETCH_NOT_LEADER] == 1
    assert lead.stale_messages[Stale.FETCH_NOT_MEMBER] == 1


def test_a_late_timeout_now_of_an_older_epoch_is_ignored() -> None:
    r = follower()
    r.receive(TimeoutNow(4, 1), 0)
    assert role(r) is Role.FOLLOWER and r.epoch == 5
    assert r.stale_messages[Stale.TIMEOUT_NOW] == 1


def test_a_replica_created_while_messages_for_its_predecessor_are_in_flight_ignores_them() -> None:
    # A topic deleted and created again, or a replica moved away and back: answers to
    # rounds and fetches the new replica never started arrive (an observer's included).
    for r in (replica(1), replica(4, observers=(4,))):
        r.receive(VoteResponse(3, 2, True, True), 0)  # a pre-vote grant: no round open
        out = r.receive(FetchResponse(3, 2, 0, 0, Records(0, 2, (EpochStart(3, 0),), 2)), 0)
        assert r.epoch == 0 and r.log_end_offset == 0 and not of_type(out, AppendFrames)
        assert r.stale_messages[Stale.PRE_VOTE_ANSWER] == r.stale_messages[Stale.FETCH_ANSWER] == 1
