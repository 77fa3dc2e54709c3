"""Compacted topics under faults: each replica's cleaner runs on its own seeded schedule,
and the replicas never disagree below the HW (compaction.py has the model and the checks).

`SimConfig.random(compaction=True)` makes the partition a compacted topic: keyed envelopes
over 2-40 keys, tombstones, each replica's own segment size, its cleaner every 20-500 ms
(before and after the heal), `delete_retention_ms` from 0 to "never", a compaction lag, a
dirty ratio, offset maps of 1 key to all; 5% of the swaps during the chaos crash their node
just before or after the commit point. Every invariant of checker.py and compaction.py
holds after every event and pass, and once healed the replicas converge and agree on every
key's latest value. A failure names the seed: `python -m tests.simulation.run --seed N
--nodes 3 --compaction` (plus the test's flags); `--seeds 500` sweeps.

Before merging, sweeps of 4,000 seeds (3 nodes x {flush always, never, owner model with
transfers}, 3+1, 5 voters with the owner model: 800 each) and 500 more (100 each with bit
rot, membership changes with a spare, quiescence, late votes, the reassigner) passed; here
a fixed share runs: 320 schedules, every fifth with bit rot (about 18 s of CPU).
"""

from __future__ import annotations

import pytest

from tests.simulation.compaction import CompactionStats
from tests.simulation.sim import SimConfig, run_schedule
from tests.simulation.test_random_schedules import _blocks


def _config(seed: int, nodes: int = 3, observers: int = 0) -> SimConfig:
    return SimConfig.random(
        seed, nodes, observers=observers, compaction=True, flush_always=seed % 2 == 0,
        interrupts=seed % 3 == 0, transfers=seed % 4 == 1, corruption=seed % 5 == 0,
    )  # fmt: skip


def _run(seeds: range, nodes: int = 3, observers: int = 0) -> CompactionStats:
    total = CompactionStats()
    for seed in seeds:
        outcome = run_schedule(_config(seed, nodes, observers))
        stats = outcome.compaction
        assert stats is not None
        for name in vars(total):
            setattr(total, name, getattr(total, name) + getattr(stats, name))
        if outcome.config.compaction and outcome.config.compaction.delete_retention_ms > 10**6:
            assert stats.resurrections == 0, outcome.config.repro()
    return total


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _blocks(200), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_three_replicas_compacting_on_their_own_schedules_never_disagree(seeds: range) -> None:
    stats = _run(seeds)
    # what the schedules claim to cover: passes that drop records and tombstones, followers
    # copying gaps, passes cut by crashes in the middle of their swaps
    assert stats.dropped > 1000 and stats.tombstones_dropped > 50, stats
    assert stats.gaps_received > 50 and stats.swap_crashes > 20 and stats.passes_cut > 5, stats


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [range(0, 80)], ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_voters_and_an_observer_compacting_never_disagree(seeds: range) -> None:
    stats = _run(seeds, 3, observers=1)
    assert stats.gaps_received > 50, stats


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [range(0, 40)], ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_five_replicas_compacting_never_disagree(seeds: range) -> None:
    stats = _run(seeds, 5)
    assert stats.gaps_received > 20, stats
