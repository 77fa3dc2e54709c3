"""Liveness and determinism of the simulated cluster."""

from __future__ import annotations

import dataclasses

import pytest

from tests.simulation.sim import SimConfig, run_schedule

HOSTILE: dict[str, float] = {
    "loss": 0.3,
    "duplication": 0.1,
    "delay_ms_max": 60,
    "crash_per_s": 4.0,
    "partition_per_s": 2.0,
    "appends_per_s": 200.0,
    "fetch_records_max": 2,
}


@pytest.mark.parametrize("nodes", [3, 5])
def test_after_a_hostile_network_heals_a_leader_commits_within_bounded_time(nodes: int) -> None:
    for seed in range(40):
        config = dataclasses.replace(SimConfig(seed=seed, nodes=nodes), **HOSTILE)  # type: ignore[arg-type]
        outcome = run_schedule(config)  # raises if no commit within config.liveness_ms
        assert outcome.liveness_ms <= config.liveness_ms
        assert outcome.leaders_elected >= 1


@pytest.mark.parametrize("shape", [(3, 1), (5, 2)], ids=["3+1", "5+2"])
def test_after_a_hostile_network_heals_the_observers_catch_up_with_the_leader_too(
    shape: tuple[int, int],
) -> None:
    nodes, observers = shape
    for seed in range(40):
        config = dataclasses.replace(
            SimConfig(seed=seed, nodes=nodes, observers=observers),
            **HOSTILE,  # type: ignore[arg-type]
        )
        outcome = run_schedule(config)  # also raises unless every observer converged
        assert outcome.liveness_ms <= config.liveness_ms


def test_a_seed_replays_exactly_the_same_schedule() -> None:
    config = SimConfig.random(7, 5)
    first, second = run_schedule(config), run_schedule(config)
    assert first == second
    assert first.events > 1000
    with_observers = SimConfig.random(7, 5, observers=2)
    assert run_schedule(with_observers) == run_schedule(with_observers)
