"""Seeded schedules with membership changes in the middle of the chaos.

Every schedule starts some replicas as observers and one in neither set (a spare, as a
replica that joins later), and asks the leader for a membership change every so often, one
at a time, retried on refusals: add a spare as observer, promote a caught-up observer to
voter, demote a voter (never the leader) to observer, remove a voter or an observer. Loss,
partitions, crashes, restarts, cancelled callers, leadership transfers, bit rot and
idempotent producers go on around them. Every invariant of checker.py holds after every
event, plus: at most one uncommitted membership record in any leader's log; every leader
was elected by a majority of its own membership's voters, and a vote only ever went to a
candidate that counts the voter; a non-voter never campaigns; every acknowledged change is
committed at the offset it was acknowledged with. After healing, a leader commits within
10 s and every replica of its membership ends with an exact copy of its log.

The number of schedules is fixed (never a wall-clock budget): about 70 s on 2 cores.
A failure names the seed: `python -m tests.simulation.run --seed N --nodes 3
--observers 1 --memberships --spares 1` (plus the flags of its test).
"""

from __future__ import annotations

import pytest

from tests.simulation.sim import SimConfig, run_schedule
from tests.simulation.test_random_schedules import _blocks


def _run(seeds: range, nodes: int, **kwargs: object) -> None:
    """Every seed of `seeds`, with membership changes; `kwargs` may draw on the seed."""
    for seed in seeds:
        chosen = {k: v(seed) if callable(v) else v for k, v in kwargs.items()}
        run_schedule(SimConfig.random(seed, nodes, memberships=True, **chosen))  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _blocks(1000), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_three_voters_change_membership_one_at_a_time_through_every_fault(seeds: range) -> None:
    _run(
        seeds, 3, observers=1, spares=1,
        flush_always=lambda s: s % 2 == 0,
        interrupts=lambda s: s % 3 != 0,
        transfers=lambda s: s % 4 == 0,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _blocks(500), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_five_voters_change_membership_among_bit_rot_and_transfers(seeds: range) -> None:
    # A node repairing its rotted disk keeps its vote floor: the membership keeps at least
    # three voters here, so that it is the minority the quorum tolerates.
    _run(
        seeds, 5, observers=2, spares=1, interrupts=True, corruption=True,
        flush_always=lambda s: s % 2 == 0,
        transfers=lambda s: s % 2 == 1,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _blocks(200), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_idempotent_producers_write_each_batch_once_while_the_membership_changes(
    seeds: range,
) -> None:
    _run(seeds, 3, spares=2, producers=3, interrupts=lambda s: s % 2 == 0)
