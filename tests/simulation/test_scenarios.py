"""Classic replication scenarios, scripted on the simulator (invariants checked throughout)."""

from __future__ import annotations

import dataclasses

from replog.replication import Acks, FetchRequest, Role
from tests.simulation.checker import InvariantViolation
from tests.simulation.sim import (
    ClientRequest,
    SimConfig,
    Simulation,
    SimulationFailure,
    run_schedule,
)

CALM = {
    "loss": 0.0,
    "duplication": 0.0,
    "delay_ms_max": 1,
    "flush_delay_ms_max": 0,
    "crash_per_s": 0.0,
    "partition_per_s": 0.0,
    "appends_per_s": 0.0,
}
NO_TIMEOUTS = {"election_timeout_ms_min": 1_000_000, "election_timeout_ms_max": 2_000_000}


def calm(nodes: int, **overrides: object) -> Simulation:
    settings: dict[str, object] = {**CALM, **NO_TIMEOUTS, **overrides}
    return Simulation(SimConfig(seed=0, nodes=nodes, **settings))  # type: ignore[arg-type]


def elect(sim: Simulation, node: int, ms: int = 1000) -> None:
    """Campaign until `node` leads (a rejected campaign still raises its epoch)."""
    for _ in range(5):
        sim.campaign(node)
        if sim.run_for(ms, lambda: sim.replica(node).role is Role.LEADER):
            return
    raise AssertionError(f"node {node} did not win an election")


def wait_replicated(sim: Simulation, leader: int, followers: list[int], ms: int = 2000) -> None:
    def done() -> bool:
        target = sim.replica(leader).log_end_offset
        return all(sim.replica(f).log_end_offset == target for f in followers)

    assert sim.run_for(ms, done), "followers did not catch up"


def values_at(sim: Simulation, node: int) -> list[bytes]:
    return [rec.value for rec in sim.nodes[node].log]


def test_raft_figure_8_an_old_epoch_record_on_a_majority_is_not_committed_and_may_be_replaced() -> (
    None
):
    sim = calm(5)
    elect(sim, 1)
    wait_replicated(sim, 1, [2, 3, 4, 5])
    # (a) S1 leads epoch 1 and replicates x to S2 only
    sim.partition({1, 2}, {3, 4, 5})
    sim.client_append(Acks.LEADER, 1, 1)
    x = values_at(sim, 1)[-1]
    x_offset = len(values_at(sim, 1)) - 1
    wait_replicated(sim, 1, [2])
    # (b) S1 crashes; S5 wins epoch 2 with S3, S4 and writes at x's offset, only locally
    sim.crash(1)
    sim.partition({3, 4, 5}, {2})
    elect(sim, 5)
    sim.partition({5}, {2}, {3, 4})
    sim.client_append(Acks.LEADER, 5, 1)
    sim.run_for(5)  # S5 flushes its epoch-2 records
    assert sim.checker.seen.get((x_offset, 2)) is not None
    # (c) S5 crashes; S1 restarts, wins epoch 3 and copies x to S3: x is on a majority
    sim.crash(5)
    sim.restart(1)
    sim.partition({1, 2, 3, 4}, {5})
    sim.fetch_records_max = 1
    sim.cut_at_batch_ends = False  # one record per answer (the driver would send x whole
    # with S1's epoch marker: the core must be safe whatever the answers' ends)
    elect(sim, 1)

    def s3_fetched_past_x() -> bool:
        last = sim.last_delivered
        return (
            last is not None
            and last[:2] == (3, 1)
            and isinstance(last[2], FetchRequest)
            and last[2].fetch_offset > x_offset
        )

    assert sim.run_for(1000, s3_fetched_past_x)
    assert [values_at(sim, n)[x_offset] for n in (1, 2, 3)] == [x, x, x]
    # ... but x is of an older epoch: HW waits for epoch 3's control record, so x is not
    # committed when S1 crashes
    assert sim.replica(1).high_watermark <= x_offset
    sim.partition({1}, {2, 3, 4}, {5})
    sim.crash(1)
    # (d) S5 returns and wins epoch 4 with S2, S3, S4 (its last epoch, 2, is newer than x's)
    sim.restart(5)
    sim.partition({2, 3, 4, 5}, {1})
    sim.fetch_records_max = 100
    elect(sim, 5)
    wait_replicated(sim, 5, [2, 3, 4])
    # x was overwritten everywhere it was: legal, because it was never committed
    assert all(values_at(sim, n)[x_offset] != x for n in (2, 3, 4, 5))
    assert len(sim.checker.committed) > x_offset


def test_a_follower_with_a_longer_divergent_tail_truncates_it_and_copies_the_leader() -> None:
    sim = calm(5)
    elect(sim, 1)
    committed = sim.client_append(Acks.ALL, 1, 2)
    assert sim.run_for(1000, lambda: sim.requests[committed].outcome == "acked")
    # S1 and S2 build a long tail in epoch 1 that a majority never sees
    sim.partition({1, 2}, {3, 4, 5})
    for _ in range(10):
        sim.client_append(Acks.LEADER, 1, 2)
    wait_replicated(sim, 1, [2])
    tail = values_at(sim, 2)[-20:]
    elect(sim, 3)
    acked = [sim.client_append(Acks.ALL, 3, 1) for _ in range(3)]
    assert sim.run_for(1000, lambda: all(sim.requests[r].outcome == "acked" for r in acked))
    assert len(values_at(sim, 2)) > len(values_at(sim, 3))
    sim.heal()
    wait_replicated(sim, 3, [1, 2, 4, 5])
    logs = {n: values_at(sim, n) for n in range(1, 6)}
    assert all(log == logs[3] for log in logs.values())
    assert not set(tail) & set(logs[3])
    assert sim.replica(1).role is Role.FOLLOWER


def test_back_to_back_failovers_lose_no_acks_all_record() -> None:
    sim = calm(5, election_timeout_ms_min=150, election_timeout_ms_max=300)
    acked: list[ClientRequest] = []
    crashed: list[int] = []
    for _ in range(6):
        assert sim.run_for(3000, lambda: sim.leader() is not None)
        leader = sim.leader()
        assert leader is not None
        request = sim.requests[sim.client_append(Acks.ALL, leader.id, 2)]

        def answered(request: ClientRequest = request) -> bool:
            return request.outcome != "pending"

        if sim.run_for(1000, answered) and request.outcome == "acked":
            acked.append(request)
        # the leader dies; the one before it comes back (two down at most)
        sim.crash(leader.id)
        crashed.append(leader.id)
        if len(crashed) > 1:
            sim.restart(crashed.pop(0))
        # and the next leader dies right after its election, before it commits anything
        if sim.run_for(3000, lambda: sim.leader() is not None):
            quick = sim.leader()
            assert quick is not None
            sim.crash(quick.id)
            sim.restart(quick.id)
    for node in crashed:
        sim.restart(node)
    assert sim.run_for(5000, lambda: sim.leader() is not None)
    leader = sim.leader()
    assert leader is not None
    final = sim.client_append(Acks.ALL, leader.id, 1)
    assert sim.run_for(5000, lambda: sim.requests[final].outcome == "acked")
    log = values_at(sim, leader.id)
    assert acked, "some appends were acknowledged"
    for request in [*acked, sim.requests[final]]:
        for value in request.values:
            assert value in log


def test_a_partitioned_leader_keeps_acking_acks_leader_writes_which_are_truncated_later() -> None:
    sim = calm(3, election_timeout_ms_min=1000, election_timeout_ms_max=2000)
    elect(sim, 1)
    before = sim.client_append(Acks.ALL, 1, 2)
    assert sim.run_for(1000, lambda: sim.requests[before].outcome == "acked")
    sim.partition({1}, {2, 3})
    doomed_leader = [sim.client_append(Acks.LEADER, 1, 1) for _ in range(5)]
    doomed_all = [sim.client_append(Acks.ALL, 1, 1) for _ in range(2)]
    sim.run_for(50)
    assert all(sim.requests[r].outcome == "acked" for r in doomed_leader)
    assert all(sim.requests[r].outcome == "pending" for r in doomed_all)
    elect(sim, 2)
    kept = [sim.client_append(Acks.ALL, 2, 1) for _ in range(3)]
    assert sim.run_for(1000, lambda: all(sim.requests[r].outcome == "acked" for r in kept))
    # check quorum: the old leader gives up, and says the pending acks=all are unknown
    assert sim.run_for(3000, lambda: sim.replica(1).role is not Role.LEADER)
    assert all(sim.requests[r].outcome == "failed" for r in doomed_all)
    sim.heal()
    wait_replicated(sim, 2, [1, 3])
    for node in (1, 2, 3):
        log = values_at(sim, node)
        for request in doomed_leader + doomed_all:
            assert sim.requests[request].values[0] not in log
        for request in [before, *kept]:
            assert all(value in log for value in sim.requests[request].values)


# -- observers (non-voting replicas, as nodes beyond the fifth are for __cluster) ------------

PATIENT = {"election_timeout_ms_min": 1000, "election_timeout_ms_max": 2000}


def leader_id(sim: Simulation) -> int | None:
    leader = sim.leader()
    return None if leader is None else leader.id


def test_a_leader_cut_off_from_the_other_voters_commits_nothing_though_observers_hold_copies() -> (
    None
):
    sim = calm(3, observers=2, **PATIENT)  # voters 1-3, observers 4 and 5
    elect(sim, 1)
    before = sim.client_append(Acks.ALL, 1, 1)
    assert sim.run_for(1000, lambda: sim.requests[before].outcome == "acked")
    sim.partition({1, 4, 5}, {2, 3})
    doomed = sim.client_append(Acks.ALL, 1, 1)
    doomed_value = sim.requests[doomed].values[0]
    wait_replicated(sim, 1, [4, 5])
    # leader + two observers are three of five replicas, but only one of three voters
    assert sim.requests[doomed].outcome == "pending"
    assert sim.replica(1).high_watermark < sim.replica(1).log_end_offset
    assert doomed_value in values_at(sim, 4) and doomed_value in values_at(sim, 5)
    # check quorum counts voters only: the observers' fetches do not keep it leading
    assert sim.run_for(3000, lambda: sim.replica(1).role is not Role.LEADER)
    assert sim.requests[doomed].outcome == "failed"
    assert sim.run_for(3000, lambda: leader_id(sim) in {2, 3})
    sim.heal()
    new = leader_id(sim)
    assert new is not None
    after = sim.client_append(Acks.ALL, new, 1)
    assert sim.run_for(3000, lambda: sim.requests[after].outcome == "acked")
    wait_replicated(sim, new, [1, 2, 3, 4, 5])
    # the observers truncated the uncommitted record like any follower would
    for node in range(1, 6):
        assert doomed_value not in values_at(sim, node)
        assert values_at(sim, node) == values_at(sim, new)
    assert all(sim.replica(o).role is Role.FOLLOWER for o in (4, 5))


def test_an_observer_cut_off_from_its_leader_forgets_it_without_campaigning_then_rejoins() -> None:
    sim = calm(3, observers=1, **PATIENT)
    elect(sim, 1)
    wait_replicated(sim, 1, [2, 3, 4])
    epoch = sim.replica(4).epoch
    sim.partition({4}, {1, 2, 3})
    assert sim.run_for(3000, lambda: sim.replica(4).leader_id is None)
    assert (sim.replica(4).role, sim.replica(4).epoch) == (Role.FOLLOWER, epoch)
    during = sim.client_append(Acks.ALL, 1, 2)  # the voters commit without the observer
    assert sim.run_for(1000, lambda: sim.requests[during].outcome == "acked")
    sim.run_for(5000)
    assert sim.replica(4).leader_id is None and sim.replica(4).epoch == epoch
    assert leader_id(sim) == 1
    sim.heal()  # the leader tells it again (BeginEpoch), it fetches and catches up
    assert sim.run_for(1000, lambda: sim.replica(4).leader_id == 1)
    wait_replicated(sim, 1, [4])
    assert sim.run_for(1000, lambda: sim.replica(4).high_watermark == sim.replica(1).high_watermark)


def test_an_observer_that_restarts_without_knowing_the_leader_is_told_again_and_catches_up() -> (
    None
):
    sim = calm(3, observers=1, **PATIENT)
    elect(sim, 1)
    wait_replicated(sim, 1, [2, 3, 4])
    sim.partition({4}, {1, 2, 3})
    assert sim.run_for(3000, lambda: sim.replica(4).leader_id is None)
    sim.crash(4)
    missed = sim.client_append(Acks.ALL, 1, 3)
    assert sim.run_for(1000, lambda: sim.requests[missed].outcome == "acked")
    sim.heal()
    sim.restart(4)  # its durable quorum state names no leader: it waits to be told
    assert sim.replica(4).leader_id is None
    assert sim.run_for(1000, lambda: sim.replica(4).leader_id == 1)
    wait_replicated(sim, 1, [4])
    assert values_at(sim, 4) == values_at(sim, 1)


def test_a_new_leader_tells_the_observers_and_they_follow_it() -> None:
    sim = calm(3, observers=2, **PATIENT)
    elect(sim, 1)
    first = sim.client_append(Acks.ALL, 1, 2)
    assert sim.run_for(1000, lambda: sim.requests[first].outcome == "acked")
    wait_replicated(sim, 1, [4, 5])
    sim.crash(1)
    elect(sim, 2)
    assert sim.run_for(1000, lambda: all(sim.replica(o).leader_id == 2 for o in (4, 5)))
    second = sim.client_append(Acks.ALL, 2, 2)
    assert sim.run_for(1000, lambda: sim.requests[second].outcome == "acked")
    wait_replicated(sim, 2, [3, 4, 5])
    assert all(sim.replica(o).epoch == sim.replica(2).epoch for o in (4, 5))
    # an observer's append fails with NOT_LEADER naming the leader
    sim.client_append(Acks.ALL, 4, 1)
    assert all(r.outcome == "failed" for r in sim.requests.values() if r.node == 4)


def test_a_follower_behind_the_leaders_retention_restarts_its_log_at_the_leaders_log_start() -> (
    None
):
    sim = calm(3)
    elect(sim, 1)
    wait_replicated(sim, 1, [2, 3])
    sim.crash(3)  # node 3 misses everything from here on
    lagging_leo = len(sim.nodes[3].log)
    for _ in range(10):
        sim.client_append(Acks.ALL, 1, 3)
    wait_replicated(sim, 1, [2])
    assert sim.run_for(500, lambda: sim.replica(1).high_watermark == len(sim.nodes[1].log))
    # retention on the leader deletes what node 3 would fetch next
    start = sim.replica(1).high_watermark - 2
    sim.retention(1, start)
    assert start > lagging_leo
    sim.restart(3)
    wait_replicated(sim, 1, [3])
    # node 3 holds nothing below the leader's log start, and everything from it on
    assert sim.nodes[3].log_start == start
    assert values_at(sim, 3)[start:] == values_at(sim, 1)[start:]
    assert sim.replica(3).high_watermark == sim.replica(1).high_watermark


def test_a_node_cut_off_for_many_election_timeouts_rejoins_without_deposing_the_leader() -> None:
    sim = calm(3, election_timeout_ms_min=150, election_timeout_ms_max=300)
    assert sim.run_for(5000, lambda: sim.leader() is not None)
    leader = sim.leader()
    assert leader is not None and leader.replica is not None
    epoch = leader.replica.epoch
    loner = next(i for i in (1, 2, 3) if i != leader.id)
    sim.partition({loner})
    sim.run_for(3000)  # ten and more election timeouts: only pre-votes, all unanswered
    assert sim.replica(loner).epoch == epoch, "pre-votes never raise the epoch"
    sim.client_append(Acks.ALL, leader.id, 2)
    sim.heal()
    others = [i for i in (1, 2, 3) if i != leader.id]
    wait_replicated(sim, leader.id, others)
    assert sim.leader() is leader and sim.replica(leader.id).epoch == epoch
    assert all(sim.replica(i).leader_id == leader.id for i in others)


def test_the_old_driver_rule_where_a_cancel_dropped_outputs_breaks_the_invariants() -> None:
    """The simulator finds the field bug of issue 9 when it models the old driver (a
    cancelled handler dropped the rest of its input's outputs), and the same schedules
    pass under the owner rule."""
    failures = 0
    for seed in range(40):
        config = SimConfig.random(seed, 3, interrupts=True)
        run_schedule(config)
        try:
            run_schedule(dataclasses.replace(config, interrupt_drops_outputs=True))
        except SimulationFailure as exc:
            failures += 1
            assert "core LEO" in str(exc) or "not at LEO" in str(exc) or "differs" in str(exc)
    assert failures >= 5, failures


def _ack_then_power_loss_then_leader_cut_off(flush_always: bool) -> Simulation:
    """Issue 16's schedule: a record acked by the leader and one follower; that follower
    loses power before its flush; then the leader is cut off and the two others elect."""
    sim = calm(3, flush_always=flush_always, power_loss=True, flush_delay_ms_max=200)
    elect(sim, 1)
    wait_replicated(sim, 1, [2, 3])
    sim.partition({1, 2}, {3})  # node 3 misses the record
    request = sim.client_append(Acks.ALL, 1, 1)
    assert sim.run_for(2000, lambda: sim.requests[request].outcome == "acked")
    sim.crash(2)  # power loss: whatever node 2 had not fsynced is gone
    sim.restart(2)
    sim.partition({1}, {2, 3})  # the leader is cut off; the two others elect one of them
    for candidate in (2, 3):
        try:
            elect(sim, candidate)
            return sim
        except InvariantViolation:
            raise
        except AssertionError:  # its log is behind the other's: the other one wins
            continue
    raise AssertionError("neither node 2 nor node 3 became leader")


def test_a_power_loss_after_an_ack_loses_the_record_when_acks_do_not_wait_for_fsync() -> None:
    # flush=interval (the old default): the follower acknowledged from its page cache
    try:
        _ack_then_power_loss_then_leader_cut_off(flush_always=False)
    except InvariantViolation as exc:
        assert "lost acked record" in str(exc) or "lacks committed" in str(exc)
    else:
        raise AssertionError("the acknowledged record survived a lost page cache")


def test_a_power_loss_after_an_ack_loses_nothing_when_acks_wait_for_a_majoritys_fsync() -> None:
    # flush=always (the default now): the follower's fetch acknowledges only fsynced records
    sim = _ack_then_power_loss_then_leader_cut_off(flush_always=True)
    assert Role.LEADER in (sim.replica(2).role, sim.replica(3).role)
    assert sim.checker.acked_all, "the append was acknowledged"


def test_a_leadership_transfer_hands_over_at_once_and_loses_no_acknowledged_record() -> None:
    sim = calm(3)  # election timeouts of ~1000 s: only TimeoutNow can move leadership
    elect(sim, 1)
    acked = [sim.client_append(Acks.ALL, 1, 2) for _ in range(5)]
    assert sim.run_for(1000, lambda: all(sim.requests[r].outcome == "acked" for r in acked))
    started = sim.now
    sim.transfer(1, 2)
    refused = sim.client_append(Acks.ALL, 1, 1)  # appends stop during the hand-over
    assert sim.run_for(1000, lambda: sim.replica(2).role is Role.LEADER)
    assert sim.now - started < 50, "the target campaigned without waiting for a timeout"
    assert sim.requests[refused].outcome == "failed"
    assert sim.replica(1).role is Role.FOLLOWER
    after = sim.client_append(Acks.ALL, 2, 1)
    assert sim.run_for(1000, lambda: sim.requests[after].outcome == "acked")
    wait_replicated(sim, 2, [1, 3])


def test_a_transfer_to_a_lagging_voter_waits_until_it_holds_the_whole_log() -> None:
    sim = calm(3)
    elect(sim, 1)
    sim.partition({1, 2}, {3})
    acked = [sim.client_append(Acks.ALL, 1, 3) for _ in range(5)]
    assert sim.run_for(1000, lambda: all(sim.requests[r].outcome == "acked" for r in acked))
    sim.transfer(1, 3)
    sim.run_for(100)
    assert sim.replica(1).role is Role.LEADER, "no hand-over to a voter that lacks records"
    sim.heal()
    assert sim.run_for(1000, lambda: sim.replica(3).role is Role.LEADER)
    assert (
        values_at(sim, 3)[: len(values_at(sim, 1))] == values_at(sim, 1)[: len(values_at(sim, 3))]
    )


def test_a_transfer_that_cannot_finish_is_abandoned_and_the_leader_takes_appends_again() -> None:
    sim = calm(3, election_timeout_ms_min=150, election_timeout_ms_max=300)
    elect(sim, 1)
    sim.partition({1, 2}, {3})  # the target is unreachable
    sim.transfer(1, 3)
    sim.run_for(10)
    assert not sim.replica(1).serving
    assert sim.run_for(1000, lambda: sim.replica(1).serving), "the transfer was not abandoned"
    request = sim.client_append(Acks.ALL, 1, 1)
    assert sim.run_for(1000, lambda: sim.requests[request].outcome == "acked")


def test_a_repaired_voter_does_not_elect_a_leader_that_lacks_what_it_acknowledged() -> None:
    """The wiped-disk hazard: a record committed by nodes 1 and 2 only; node 2's copy rots
    and node 2 discards its log. Node 3, which never had the record, must not become leader
    with node 2's vote: node 2 votes only for a log as up to date as the one it discarded."""
    sim = calm(3, election_timeout_ms_min=150, election_timeout_ms_max=300)
    elect(sim, 1)
    wait_replicated(sim, 1, [2, 3])
    sim.partition({1, 2}, {3})
    request = sim.client_append(Acks.ALL, 1, 1)
    assert sim.run_for(1000, lambda: sim.requests[request].outcome == "acked")
    sim.corrupt(2, offset=len(sim.nodes[2].log) - 1)
    sim.repair(2)
    assert sim.nodes[2].quorum.vote_floor > 0
    sim.crash(1)  # the only intact copy is down for now
    sim.partition({2, 3})
    sim.run_for(2000)
    assert all(sim.replica(n).role is not Role.LEADER for n in (2, 3)), "elected without it"
    sim.heal()
    sim.restart(1)  # the holder returns: the three elect a leader with the record
    assert sim.run_for(5000, lambda: sim.leader() is not None)
    done = sim.client_append(Acks.ALL, sim.leader().id, 1)  # type: ignore[union-attr]
    assert sim.run_for(5000, lambda: sim.requests[done].outcome == "acked")
    assert sim.nodes[2].quorum.vote_floor == 0, "node 2 caught up and votes again"
