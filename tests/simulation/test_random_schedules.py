"""Thousands of seeded schedules: loss, duplication, reordering, partitions, crashes.

Each schedule runs 3 s of chaos with clients appending (acks=all and acks=leader), then
heals the network and restarts every node: a leader must then commit a new acks=all append
within 10 s of simulated time (liveness), and every follower must end with an exact copy of
the leader's log. Every invariant of checker.py is checked after
every event. A failure names the seed: `python -m tests.simulation.run --seed N --nodes M`
(plus `--observers K` for the runs with non-voting replicas).
The number of schedules is fixed (never a wall-clock budget), so CI runs the same ones.
"""

from __future__ import annotations

import pytest

from tests.simulation.sim import SimConfig, run_schedule

BLOCK = 100


def _blocks(count: int) -> list[range]:
    return [range(start, start + BLOCK) for start in range(0, count, BLOCK)]


def _run_block(seeds: range, nodes: int, *, flush_always: bool, observers: int = 0) -> None:
    for seed in seeds:
        run_schedule(SimConfig.random(seed, nodes, flush_always=flush_always, observers=observers))


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _blocks(2000), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_three_replicas_with_flush_always_keep_every_invariant(seeds: range) -> None:
    _run_block(seeds, 3, flush_always=True)


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _blocks(800), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_five_replicas_with_flush_always_keep_every_invariant(seeds: range) -> None:
    _run_block(seeds, 5, flush_always=True)


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _blocks(300), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
@pytest.mark.parametrize("nodes", [3, 5])
def test_replicas_with_flush_never_survive_process_crashes(seeds: range, nodes: int) -> None:
    # flush=never: a crash is a process crash (the page cache survives), not a power loss
    _run_block(seeds, nodes, flush_always=False)


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _blocks(400), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
@pytest.mark.parametrize("shape", [(3, 1), (5, 2)], ids=["3+1", "5+2"])
def test_voters_with_observers_keep_every_invariant_and_observers_never_vote(
    seeds: range, shape: tuple[int, int]
) -> None:
    nodes, observers = shape
    _run_block(seeds, nodes, flush_always=True, observers=observers)


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _blocks(100), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
@pytest.mark.parametrize("shape", [(3, 1), (5, 2)], ids=["3+1", "5+2"])
def test_voters_with_observers_and_flush_never_survive_process_crashes(
    seeds: range, shape: tuple[int, int]
) -> None:
    nodes, observers = shape
    _run_block(seeds, nodes, flush_always=False, observers=observers)


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _blocks(1000), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
@pytest.mark.parametrize("flush_always", [True, False], ids=["always", "never"])
def test_cancelled_callers_never_put_a_replica_ahead_of_its_log(
    seeds: range, flush_always: bool
) -> None:
    # The driver as its owner task: outputs take time, crashes strike between any two of
    # them, and the callers of in-flight inputs are cancelled (gRPC handlers whose clients
    # went away). Committed reads never change; replicas end byte-identical.
    for seed in seeds:
        run_schedule(SimConfig.random(seed, 3, flush_always=flush_always, interrupts=True))


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _blocks(200), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_five_replicas_and_observers_with_cancelled_callers_keep_every_invariant(
    seeds: range,
) -> None:
    for seed in seeds:
        run_schedule(SimConfig.random(seed, 5, observers=2, interrupts=True))


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _blocks(600), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
@pytest.mark.parametrize("nodes", [3, 5])
def test_leadership_transfers_among_faults_keep_every_invariant(seeds: range, nodes: int) -> None:
    for seed in seeds:
        run_schedule(
            SimConfig.random(
                seed, nodes, flush_always=seed % 2 == 0, interrupts=True, transfers=True
            )
        )


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _blocks(600), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
@pytest.mark.parametrize("nodes", [3, 5])
def test_bit_rot_on_one_node_at_a_time_is_repaired_and_never_loses_or_serves_bad_data(
    seeds: range, nodes: int
) -> None:
    # A committed record's bytes flip on one node's disk; its checksums refuse to serve it,
    # the node discards its log and fetches it again (and, with its vote floor, does not
    # vote for a log that lacks what it had acknowledged until it holds it again).
    for seed in seeds:
        config = SimConfig.random(
            seed, nodes, flush_always=seed % 2 == 0, interrupts=True, transfers=True,
            corruption=True,
        )  # fmt: skip
        run_schedule(config)


@pytest.mark.slow
@pytest.mark.parametrize("seeds", _blocks(300), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
@pytest.mark.parametrize("interrupts", [False, True], ids=["direct", "owner"])
def test_idempotent_producers_write_each_batch_once_through_every_fault(
    seeds: range, interrupts: bool
) -> None:
    # Three idempotent producers resend each batch with the same sequence numbers until it
    # is acknowledged, through crashes, partitions, lost answers and cancelled callers;
    # some are replaced by a newer epoch while the old instance keeps retrying. The
    # committed log holds every value once and every producer's batches in order.
    for seed in seeds:
        run_schedule(SimConfig.random(seed, 3, interrupts=interrupts, producers=3))
