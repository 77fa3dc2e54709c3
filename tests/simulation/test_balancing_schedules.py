"""The leader balancer in the simulator: random schedules, convergence, and broken balancers.

Every node runs the server's balancer for its partition at seeded random intervals (50, 200
or 1000 ms, +-50%), through the faults and after them: a serving leader asks the real
`replog.server.cluster.balancer.preferred_target` about its voters and `replica_status` rows
(computed from the core as the driver computes them, see `Simulation.replica_status`) and
hands leadership to the preferred replica (the first voter) it names. The schedules mix it
with crashes, restarts, partitions, message loss and duplication, elections, appends,
cancelled callers, random leadership transfers, bit rot and membership changes, and check
every invariant of checker.py after every event (no acknowledged record lost, one leader per
epoch, HW never going back, committed reads never changing). After healing, `run_schedule`
also checks that leadership ends on the preferred replica within `balance_bound_ms` (at
most 3 balancer intervals + 1.3 s) of the cluster being quiet, serves there and stays.

The number of schedules is fixed (never a wall-clock budget): about 20 s of CPU on 2 cores. A
failure names the seed: `python -m tests.simulation.run --seed N --nodes 3 --balance
--voters 2,3,1` (plus the flags of its test).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

import pytest

from replog.replication import Acks, Message, Role, Send, TimeoutNow
from replog.server.cluster.balancer import preferred_target
from replog.server.meta.metadata import assign
from tests.simulation import sim as sim_module
from tests.simulation.sim import (
    TICK_MS,
    Node,
    SimConfig,
    SimulationFailure,
    balance_bound_ms,
    run_schedule,
)
from tests.simulation.test_liveness import HOSTILE
from tests.simulation.test_random_schedules import _blocks
from tests.simulation.test_scenarios import calm, elect, values_at, wait_replicated

Status = Sequence[tuple[int, int, int, int]]


def _rotated(nodes: int, seed: int) -> tuple[int, ...]:
    """The voters 1..nodes starting at a seed-chosen one: each node is preferred in turn."""
    k = seed % nodes
    ids = list(range(1, nodes + 1))
    return tuple(ids[k:] + ids[:k])


def _run(seeds: range, nodes: int, **kwargs: object) -> None:
    """Every seed of `seeds` with the balancer on; `kwargs` may draw on the seed."""
    for seed in seeds:
        chosen = {k: v(seed) if callable(v) else v for k, v in kwargs.items()}
        config = SimConfig.random(
            seed,
            nodes,
            balance=True,
            voter_order=_rotated(nodes, seed),
            **chosen,  # type: ignore[arg-type]
        )
        outcome = run_schedule(config)  # raises on any invariant, liveness or balance failure
        assert outcome.final_leader == config.voter_order[0] or config.memberships_per_s
        assert 0 <= outcome.balanced_ms <= balance_bound_ms(config)


# -- random schedules ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _blocks(200), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_three_replicas_balance_leadership_among_every_fault_and_keep_every_invariant(
    seeds: range,
) -> None:
    _run(
        seeds, 3,
        flush_always=lambda s: s % 2 == 0,
        interrupts=lambda s: s % 2 == 1,  # the owner model, with cancelled callers
        transfers=lambda s: s % 3 == 0,  # random transfers fight the balancer's
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [range(0, 40)], ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_five_voters_and_observers_balance_leadership_among_transfers_and_bit_rot(
    seeds: range,
) -> None:
    _run(
        seeds, 5, observers=2, interrupts=True,
        flush_always=lambda s: s % 2 == 0,
        transfers=lambda s: s % 2 == 1,
        corruption=lambda s: s % 3 == 0,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [range(0, 100)], ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_the_balancer_follows_membership_changes_to_the_new_first_voter(seeds: range) -> None:
    # Membership changes reorder the voters (a promoted observer is appended): the preferred
    # replica is the first voter of the leader's latest membership, and leadership ends there.
    _run(
        seeds, 3, observers=1, spares=1, memberships=True,
        flush_always=lambda s: s % 2 == 0,
        interrupts=lambda s: s % 3 != 0,
    )  # fmt: skip


# -- liveness: leadership converges on the preferred replicas -------------------------------


@pytest.mark.parametrize(("nodes", "partitions"), [(3, 6), (5, 10)])
def test_once_healed_every_partition_is_led_by_its_preferred_replica_and_leaders_even_out(
    nodes: int, partitions: int
) -> None:
    """One simulation per partition (the simulator runs one partition), each with the voter
    order `assign` gives it, through a hostile network (30% loss, crashes, partitions). Once
    healed and quiet, each partition's leadership reaches its preferred replica within
    `balance_bound_ms` (here 3 x 200 ms + 1.3 s = 190 ticks of 10 ms) and stays. Since
    `assign` rotates the preferred replica over the nodes, leaders per node then differ by
    at most one."""
    assignment = assign("events", partitions, nodes, list(range(1, nodes + 1)))
    leaders: Counter[int] = Counter()
    moved = 0  # partitions that healed led elsewhere (or not serving yet)
    for p, voters in enumerate(assignment):
        config = dataclasses.replace(
            SimConfig(seed=p, nodes=nodes, balance_interval_ms=200, voter_order=voters),
            **HOSTILE,  # type: ignore[arg-type]
        )
        outcome = run_schedule(config)
        assert outcome.final_leader == voters[0], (p, voters, outcome)
        assert outcome.balanced_ms <= balance_bound_ms(config)
        assert balance_bound_ms(config) // TICK_MS == 190
        leaders[outcome.final_leader] += 1
        moved += outcome.balanced_ms > 100
    assert moved >= 2, "the faults left every leader where it was preferred: a weak test"
    per_node = [leaders[n] for n in range(1, nodes + 1)]
    assert max(per_node) - min(per_node) <= 1, per_node
    assert sum(per_node) == partitions


# -- broken balancers ------------------------------------------------------------------------


def _lag_blind(me: int, voters: Sequence[int], status: Status) -> int | None:
    """A broken balancer: hands leadership to the preferred replica whether or not it is
    alive and caught up."""
    return voters[0] if voters and voters[0] != me else None


def test_a_lagging_preferred_replica_is_not_chosen_and_a_lag_blind_balancer_loses_nothing() -> None:
    # Node 3 is preferred, but cut off while node 1 leads and commits without it.
    sim = calm(
        3,
        voter_order=(3, 1, 2),
        balance_interval_ms=100,
        election_timeout_ms_min=150,
        election_timeout_ms_max=300,
    )
    timeouts: list[tuple[int, int, int]] = []  # (target, its match, leader LEO) when sent
    send = sim._send

    def spy(node: Node, to: int, message: Message) -> None:
        if isinstance(message, TimeoutNow) and node.replica is not None:
            match = node.replica.followers()[to][0]
            timeouts.append((to, match, node.replica.log_end_offset))
        send(node, to, message)

    sim._send = spy  # type: ignore[method-assign]
    sim.partition({1, 2}, {3})
    elect(sim, 1)
    acked = [sim.client_append(Acks.ALL, 1, 2) for _ in range(5)]
    assert sim.run_for(1000, lambda: all(sim.requests[r].outcome == "acked" for r in acked))
    sim.run_for(1000)  # ten balancer rounds on each node
    status = sim.replica_status(1)
    assert [row[0] for row in status] == [1, 2, 3]
    assert status[2][2] > 0 and status[2][3] == -1, "node 3 lags and never fetched"
    assert preferred_target(1, (3, 1, 2), status) is None
    assert sim.balancer_transfers == [], "the real rule starts no transfer to a lagging node"
    assert sim.replica(1).role is Role.LEADER and sim.replica(1).serving

    # The broken rule starts transfers to node 3 over and over: the core waits for the
    # target to hold the whole log and sends it no TimeoutNow (each transfer is abandoned
    # after the election timeout); nothing acknowledged is lost.
    sim.balance_rule = _lag_blind
    sim.run_for(2000)
    assert sum(target == 3 for _, _, target in sim.balancer_transfers) >= 5
    assert timeouts == [], "TimeoutNow sent to a replica that lacks records"
    assert set(sim.checker.leaders.values()) == {1}
    assert sim.replica(1).role is Role.LEADER

    # Healed while appends go on, node 3 is reachable and behind: the broken rule fires
    # at once, and the TimeoutNow goes out only when node 3 holds the leader's whole log.
    sim.heal()
    more = [sim.client_append(Acks.ALL, 1, 3) for _ in range(3)]
    assert sim.run_for(2000, lambda: sim.replica(3).role is Role.LEADER and sim.replica(3).serving)
    assert timeouts, "node 3 never took over"
    assert all(match == leo for _, match, leo in timeouts), timeouts
    committed = [v for r in acked + more if sim.requests[r].outcome == "acked"
                 for v in sim.requests[r].values]  # fmt: skip
    assert len(committed) >= 10
    assert set(committed) <= set(values_at(sim, 3))


def test_even_a_transfer_that_skips_the_catch_up_wait_cannot_elect_a_lagging_replica() -> None:
    # A balancer bypassing the core (TimeoutNow sent at once to a voter that missed records)
    # is caught by the second guard: voters refuse a candidate whose log is behind theirs.
    sim = calm(3)  # no election timeouts: only the TimeoutNow starts a campaign
    elect(sim, 1)
    wait_replicated(sim, 1, [2, 3])
    sim.partition({1, 2}, {3})
    acked = [sim.client_append(Acks.ALL, 1, 2) for _ in range(5)]
    assert sim.run_for(1000, lambda: all(sim.requests[r].outcome == "acked" for r in acked))
    epoch = sim.replica(1).epoch
    assert sim.replica(3).leader_id == 1, "node 3 still follows node 1 (it obeys a TimeoutNow)"
    assert sim.replica(3).log_end_offset < sim.replica(1).log_end_offset
    sim.heal()
    sim.apply(sim.nodes[1], [Send(3, TimeoutNow(epoch, 1))])
    assert sim.run_for(50, lambda: sim.replica(3).epoch > epoch), "node 3 did not campaign"
    sim.run_for(500)
    assert sim.replica(3).role is not Role.LEADER
    assert 3 not in sim.checker.leaders.values(), "a replica that missed records was elected"
    elect(sim, 2)  # the cluster goes on under an up-to-date leader
    done = sim.client_append(Acks.ALL, 2, 1)
    assert sim.run_for(1000, lambda: sim.requests[done].outcome == "acked")
    acked_values = [v for r in acked for v in sim.requests[r].values]
    assert set(acked_values) <= set(values_at(sim, 2))
    wait_replicated(sim, 2, [1, 3])
    assert values_at(sim, 3) == values_at(sim, 2)


@pytest.mark.slow
def test_a_lag_blind_balancer_among_faults_keeps_every_invariant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The same broken rule in random schedules: the core's refusal holds through every fault.
    monkeypatch.setattr(sim_module, "preferred_target", _lag_blind)
    _run(range(50), 3, flush_always=lambda s: s % 2 == 0, interrupts=lambda s: s % 2 == 1)


def test_the_balance_check_catches_a_balancer_that_never_acts_or_one_that_flaps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The checker's side: a balancer that does nothing leaves leadership where the faults
    put it, and one that hands leadership on to the next voter never lets it settle. Both
    fail the schedules (the real rule passes the same seeds above)."""

    def idle(me: int, voters: Sequence[int], status: Status) -> int | None:
        return None

    def next_voter(me: int, voters: Sequence[int], status: Status) -> int | None:
        if me not in voters or len(voters) < 2:
            return None
        return voters[(list(voters).index(me) + 1) % len(voters)]

    for rule, seeds in ((idle, range(20)), (next_voter, range(6))):
        monkeypatch.setattr(sim_module, "preferred_target", rule)
        failures = []
        for seed in seeds:
            config = SimConfig.random(seed, 3, balance=True, voter_order=_rotated(3, seed))
            try:
                run_schedule(config)
            except SimulationFailure as exc:
                assert "balancing:" in str(exc), exc
                failures.append(seed)
        if rule is next_voter:
            assert failures == list(seeds), failures
        else:  # leadership starts (and may stay) on a node that is not preferred
            assert len(failures) >= len(seeds) // 2, failures
