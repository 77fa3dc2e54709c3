"""Quiet partitions under faults: quiescence changes timers only, never votes, logs or HWs.

`SimConfig.random(quiet=True)` turns quiescence on (`quiet_fetch_wait_ms` 400 or 1500 ms
against election timeouts of 150-300 ms), models the node-level liveness (heartbeats with
incarnations, silence checks, wakes: quiet.py) and draws few appends (0.5-10 a second over
an 8 s chaos), so that the partition is quiet for long stretches while the usual faults hit
it: loss (a held fetch's answer may be lost: the follower's retry is then parked as usual),
duplication, delay, crashes and quick restarts (a new incarnation: the held fetch is gone),
partitions, plus pauses of 50-1200 ms (SIGSTOP: half of them the leader's), one-way cuts
(half of them between the leader and a follower) and reconnections. Every invariant of
checker.py holds after every event, and once healed a leader commits again and the replicas
converge. A failure names the seed: `python -m tests.simulation.run --seed N --nodes 3
--quiet` (plus the test's flags).

Before merging, a sweep of 1,500 seeds (3 nodes, with the owner model, transfers, bit rot
and late votes on some) and 300 seeds (5 voters + 1 observer) passed; here a fixed share of
them runs (300 and 100 seeds: about 40 s on 2 cores).
"""

from __future__ import annotations

import pytest

from tests.simulation.sim import SimConfig, Simulation, run_schedule
from tests.simulation.test_random_schedules import _blocks


def _config(seed: int, nodes: int = 3, observers: int = 0) -> SimConfig:
    return SimConfig.random(
        seed, nodes, observers=observers, quiet=True, flush_always=seed % 2 == 0,
        interrupts=seed % 3 == 0, transfers=seed % 4 == 1, corruption=seed % 5 == 0,
        late_votes=seed % 7 == 3,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _blocks(300), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_quiet_partitions_under_crashes_pauses_and_one_way_cuts_keep_every_invariant(
    seeds: range,
) -> None:
    for seed in seeds:
        run_schedule(_config(seed))


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [range(0, 100)], ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_five_voters_and_an_observer_quiet_keep_every_invariant(seeds: range) -> None:
    for seed in seeds:
        run_schedule(_config(seed, 5, observers=1))


def test_the_quiet_schedules_are_quiet_most_of_the_time_and_their_nodes_wake_replicas() -> None:
    """What the schedules above claim to cover: quiet partitions, and liveness wakes."""
    quiet_events = events = wakes = 0
    for seed in range(4):
        sim = Simulation(_config(seed))
        until = sim.config.chaos_ms
        while sim.now < until:
            sim.run_until(sim.now + 50)
            events += 1
            quiet_events += any(
                n.replica is not None and n.replica.quiet for n in sim.nodes.values()
            )
        wakes += sum(n.liveness.wakes for n in sim.nodes.values() if n.liveness is not None)
    assert quiet_events > events // 4, (quiet_events, events)
    assert wakes > 0
