"""Membership changes, scripted on the simulator (every invariant checked after each event).

Replicas 1..n start as voters; spares (ids after them) start in neither set, as replicas
that join later. A change is one voter added or removed at a time (`change_membership`).
"""

from __future__ import annotations

import pytest

from replog.replication import AckFailure, Acks, Membership, Role
from replog.replication.roles import leading
from replog.replication.roles.core import Core
from tests.simulation.checker import InvariantViolation
from tests.simulation.sim import MembershipRequest, Simulation
from tests.simulation.test_scenarios import calm, elect, wait_replicated


def lead(sim: Simulation, node: int) -> None:
    """`node` leads and serves (its epoch committed: it may change the membership)."""
    elect(sim, node)
    assert sim.run_for(2000, lambda: sim.replica(node).serving)


def change(
    sim: Simulation, node: int, voters: tuple[int, ...], observers: tuple[int, ...] = ()
) -> MembershipRequest:
    request_id = sim.change_membership(node, voters, observers)
    return sim.membership_requests[request_id]


def settle_request(sim: Simulation, request: MembershipRequest, ms: int = 2000) -> str:
    sim.run_for(ms, lambda: request.outcome != "pending")
    return request.outcome


def committed(sim: Simulation, request_id: int, ms: int = 2000) -> bool:
    request = sim.requests[request_id]
    sim.run_for(ms, lambda: request.outcome != "pending")
    return request.outcome == "acked"


def joined(sim: Simulation, leader: int, spare: int) -> None:
    """Spare `spare` added as observer and promoted to voter (both changes committed)."""
    voters = sim.replica(leader).membership.voters
    assert settle_request(sim, change(sim, leader, voters, (spare,))) == "acked"
    r = sim.replica(leader)
    # caught up: the leader saw it fetch from at or past its HW
    assert sim.run_for(2000, lambda: r.followers()[spare][0] >= r.high_watermark)
    assert settle_request(sim, change(sim, leader, (*voters, spare))) == "acked"


def test_an_observer_added_then_promoted_counts_in_the_new_majority() -> None:
    sim = calm(3, spares=1)
    lead(sim, 1)
    assert not sim.replica(4).is_voter
    joined(sim, 1, 4)
    wait_replicated(sim, 1, [2, 3, 4])
    for node in (1, 2, 3, 4):
        assert sim.replica(node).membership == Membership((1, 2, 3, 4), ())
    assert sim.replica(4).is_voter
    # four voters: a majority is three, so 1 and 4 alone commit nothing ...
    sim.crash(2)
    sim.crash(3)
    request_id = sim.client_append(Acks.ALL, 1, 1)
    assert not committed(sim, request_id, 500)
    # ... and 1, 4 and 2 do: the new voter's acknowledgement counts
    sim.restart(2)
    assert committed(sim, request_id)


def test_a_removed_voter_is_sent_nothing_and_the_remaining_majority_commits() -> None:
    sim = calm(3)
    lead(sim, 1)
    wait_replicated(sim, 1, [2, 3])
    sim.crash(3)
    assert settle_request(sim, change(sim, 1, (1, 2))) == "acked"
    assert sim.replica(1).followers().keys() == {2}
    # two voters: 1 and 2 are the majority; 3 coming back changes nothing
    sim.restart(3)
    end_of_3 = sim.replica(3).log_end_offset
    request_id = sim.client_append(Acks.ALL, 1, 1)
    assert committed(sim, request_id)
    sim.run_for(1000)
    assert sim.replica(1).role is Role.LEADER and sim.replica(1).epoch == 1
    assert sim.replica(3).log_end_offset == end_of_3  # the leader ignores its fetches
    # without 2 nothing commits any more (a majority of two is two)
    sim.crash(2)
    assert not committed(sim, sim.client_append(Acks.ALL, 1, 1), 500)


def test_a_second_change_is_refused_while_the_first_is_not_committed() -> None:
    sim = calm(3, spares=2)
    lead(sim, 1)
    wait_replicated(sim, 1, [2, 3])
    sim.partition({1}, {2, 3, 4, 5})  # nothing the leader appends commits now
    first = change(sim, 1, (1, 2, 3), (4,))
    second = change(sim, 1, (1, 2, 3), (4, 5))
    assert settle_request(sim, second, 10) == "failed"
    assert second.failure is AckFailure.MEMBERSHIP_CHANGE_IN_PROGRESS
    # asking for the pending membership again waits for the same record
    again = change(sim, 1, (1, 2, 3), (4,))
    assert first.outcome == again.outcome == "pending"
    sim.heal()
    assert settle_request(sim, first) == "acked" and settle_request(sim, again) == "acked"
    assert first.offset == again.offset
    assert settle_request(sim, change(sim, 1, (1, 2, 3), (4, 5))) == "acked"


def test_the_leader_refuses_to_remove_itself_or_to_change_two_voters_at_once() -> None:
    sim = calm(3, spares=1)
    lead(sim, 1)
    wait_replicated(sim, 1, [2, 3])
    removal = change(sim, 1, (2, 3))
    both = change(sim, 1, (1,))
    early = change(sim, 1, (1, 2, 3, 4))  # 4 is no observer yet
    sim.run_for(10)
    assert removal.failure is AckFailure.LEADER_REMOVAL
    assert both.failure is AckFailure.TOO_MANY_VOTER_CHANGES
    assert early.failure is AckFailure.NOT_CAUGHT_UP
    assert change(sim, 2, (1, 2)).outcome == "failed"  # not the leader
    sim.run_for(10)
    assert sim.replica(1).membership == Membership((1, 2, 3))


def test_a_membership_record_truncated_away_reverts_the_membership() -> None:
    sim = calm(3, spares=1)
    lead(sim, 1)
    wait_replicated(sim, 1, [2, 3])
    sim.partition({1}, {2, 3, 4})
    request = change(sim, 1, (1, 2, 3), (4,))
    sim.run_for(50)
    assert sim.replica(1).membership == Membership((1, 2, 3), (4,))
    assert sim.nodes[1].memberships  # persisted before the record
    elect(sim, 2)
    sim.heal()
    sim.run_for(2000, lambda: sim.replica(1).membership == Membership((1, 2, 3)))
    assert request.outcome in ("failed", "unknown")
    assert sim.replica(1).membership == Membership((1, 2, 3))
    assert sim.nodes[1].memberships == ()


def test_a_restarted_cluster_keeps_the_membership_it_changed_to() -> None:
    sim = calm(3, spares=1)
    lead(sim, 1)
    joined(sim, 1, 4)
    assert settle_request(sim, change(sim, 1, (1, 2, 4), (3,))) == "acked"
    wait_replicated(sim, 1, [2, 3, 4])
    sim.run_for(50)  # flushed everywhere (a crash loses what is not)
    for node in (1, 2, 3, 4):
        sim.crash(node)
    for node in (1, 2, 3, 4):
        sim.restart(node)
        assert sim.replica(node).membership == Membership((1, 2, 4), (3,))
    elect(sim, 4)  # the spare, a voter now, wins with the votes of 1 and 2
    assert sim.replica(3).is_voter is False
    sim.campaign(3)  # an observer never campaigns
    sim.run_for(100)
    assert sim.replica(4).role is Role.LEADER
    assert committed(sim, sim.client_append(Acks.ALL, 4, 1))


def test_a_new_leader_finishes_the_change_of_a_leader_that_crashed_when_it_holds_it() -> None:
    sim = calm(5)
    lead(sim, 1)
    wait_replicated(sim, 1, [2, 3, 4, 5])
    sim.partition({1, 2}, {3, 4, 5})
    sim.fetch_records_max = 100
    request = change(sim, 1, (1, 2, 3, 4))
    wait_replicated(sim, 1, [2])  # the removal of 5 is on 1 and 2 only: not committed
    sim.crash(1)
    assert request.outcome == "unknown"
    sim.heal()
    # 2 (voters 1-4 in its log) wins with 3 and 4, a majority of them; 5 is asked nothing
    elect(sim, 2)
    sim.run_for(1000, lambda: sim.replica(2).serving)
    assert sim.replica(2).serving
    for node in (3, 4):
        assert sim.replica(node).membership == Membership((1, 2, 3, 4))
    record = sim.checker.committed[sim.replica(2).membership_history[-1].offset]
    assert record.control and record.value.startswith(b"members ")


def test_a_change_held_by_a_minority_is_truncated_when_the_others_elect_a_leader() -> None:
    sim = calm(5)
    lead(sim, 1)
    wait_replicated(sim, 1, [2, 3, 4, 5])
    sim.partition({1, 2}, {3, 4, 5})
    change(sim, 1, (1, 2, 3, 4))
    wait_replicated(sim, 1, [2])
    sim.crash(1)
    elect(sim, 3)  # the old membership: 3, 4 and 5 are a majority of its five voters
    sim.heal()
    sim.run_for(2000, lambda: sim.replica(2).membership == Membership((1, 2, 3, 4, 5)))
    assert sim.replica(2).membership == Membership((1, 2, 3, 4, 5))
    sim.restart(1)
    sim.run_for(2000, lambda: sim.replica(1).membership == Membership((1, 2, 3, 4, 5)))
    assert sim.replica(1).membership == Membership((1, 2, 3, 4, 5))
    assert committed(sim, sim.client_append(Acks.ALL, 3, 1))


def _ongaro(sim: Simulation) -> MembershipRequest:
    """The single-server-change bug (Ongaro, raft-dev, 2015), up to the new leader's change:
    leader 1 of voters 1-4 promotes observer 5 (on 1 and 5 only, not committed); 2 is
    elected by 2, 3 and 4 without that record and at once asks to remove voter 4."""
    lead(sim, 1)
    assert settle_request(sim, change(sim, 1, (1, 2, 3, 4), (5,))) == "acked"
    r = sim.replica(1)
    assert sim.run_for(2000, lambda: r.followers()[5][0] >= r.high_watermark)
    sim.run_for(200)  # every follower learns that HW
    sim.partition({1, 5}, {2, 3, 4})
    change(sim, 1, (1, 2, 3, 4, 5))
    wait_replicated(sim, 1, [5])
    elect(sim, 2)
    sim.partition({1, 5}, {2, 3}, {4})  # 4 hears nothing of epoch 2
    return change(sim, 2, (1, 2, 3), (5,))


def test_a_new_leader_changes_nothing_before_its_epoch_commits_ongaros_bug() -> None:
    sim = calm(4, spares=1)
    removal = _ongaro(sim)
    assert settle_request(sim, removal, 10) == "failed"
    assert removal.failure is AckFailure.EPOCH_NOT_COMMITTED
    # once its epoch commits (4 back), 1's uncommitted promotion of 5 can never win
    sim.heal()
    assert sim.run_for(2000, lambda: sim.replica(2).serving)
    assert settle_request(sim, change(sim, 2, (1, 2, 3), (5,))) == "acked"
    # 1 follows 2: the promotion of 5 is truncated away, 2's removal of 4 is in force
    wait_replicated(sim, 2, [1, 5])
    for node in (1, 2, 3, 5):
        assert sim.replica(node).membership == Membership((1, 2, 3), (5,))


def test_without_the_serving_rule_the_checker_catches_two_disjoint_majorities(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the checker's sanity check: drop the rule and the scenario loses committed records
    refusal = leading.membership_refusal

    def no_serving_rule(c: Core, wanted: Membership) -> AckFailure | None:
        control, c.control_offset = c.control_offset, -1  # "serving" at once
        try:
            return refusal(c, wanted)
        finally:
            c.control_offset = control

    monkeypatch.setattr(leading, "membership_refusal", no_serving_rule)
    sim = calm(4, spares=1)
    removal = _ongaro(sim)
    assert settle_request(sim, removal) == "acked", removal  # by 2 and 3, majority of 1-3
    sim.run_for(50)  # flushed
    sim.crash(1)  # (a leader never campaigns: restarted, it is a follower)
    sim.restart(1)
    sim.partition({1, 4, 5}, {2, 3})
    # 1 (voters 1-5 in its log) wins with 4 (removed, never told) and 5: it lacks epoch 2
    with pytest.raises(InvariantViolation, match="leader completeness"):
        elect(sim, 1)
