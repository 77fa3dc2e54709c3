"""The Charts page's sampler: rates from counters, gaps, and bounded memory (pure logic)."""

from __future__ import annotations

import asyncio

import pytest

from replog.console import charts
from replog.console.sampler import Observation, PartitionSample, Sampler
from replog.errors import UnavailableError


def obs(
    at: float,
    hws: dict[tuple[str, int], int],
    leader: int = 0,
    down: tuple[int, ...] = (),
    groups: dict[str, dict[tuple[str, int], tuple[int, int]]] | None = None,
) -> Observation:
    nodes = {n: n not in down for n in (0, 1)}
    parts = {tp: PartitionSample(hw, leader, hw * 10) for tp, hw in hws.items()}
    return Observation(at, nodes, parts, groups or {})


def last(s: Sampler, chart: str, label: str) -> float | None:
    return s.series[(chart, label)][-1]


def test_rates_are_counter_deltas_per_second_summed_per_topic_and_leader() -> None:
    s = Sampler()
    s.add(obs(100.0, {("a", 0): 0, ("a", 1): 10, ("b", 0): 5}))
    assert last(s, "produce_topic", "a") is None  # one observation: no rate yet
    s.add(obs(110.0, {("a", 0): 100, ("a", 1): 110, ("b", 0): 5}))
    assert last(s, "produce_topic", "a") == 20.0  # (100 + 100) / 10 s
    assert last(s, "produce_topic", "b") == 0.0
    assert last(s, "produce_node", "0") == 20.0
    assert last(s, "produce_node", "1") == 0.0
    assert last(s, "leaders", "0") == 3 and last(s, "leaders", "1") == 0
    assert last(s, "bytes", "0") == 2150  # sizes are 10 x HW here


def test_consume_rate_and_lag_per_group() -> None:
    s = Sampler()
    s.add(obs(0.0, {("a", 0): 50}, groups={"g": {("a", 0): (10, 40)}}))
    assert last(s, "lag", "g") == 40
    s.add(obs(5.0, {("a", 0): 100}, groups={"g": {("a", 0): (30, 70)}}))
    assert last(s, "consume_topic", "a") == 4.0  # 20 records in 5 s
    assert last(s, "consume_node", "0") == 4.0
    assert last(s, "lag", "g") == 70
    # a group that stops: its lag rises, its consume rate drops to 0
    s.add(obs(10.0, {("a", 0): 150}, groups={"g": {("a", 0): (30, 120)}}))
    assert last(s, "consume_topic", "a") == 0.0
    assert last(s, "lag", "g") == 120


def test_a_counter_going_back_or_unknown_lag_is_a_gap_not_a_negative_rate() -> None:
    s = Sampler()
    s.add(obs(0.0, {("a", 0): 100}, groups={"g": {("a", 0): (90, -1)}}))
    assert last(s, "lag", "g") is None
    s.add(obs(1.0, {("a", 0): 3}, groups={"g": {("a", 0): (0, 3)}}))  # topic made again
    assert last(s, "produce_topic", "a") is None
    assert last(s, "consume_topic", "a") is None
    assert last(s, "produce_node", "0") == 0.0  # the node is up: nothing measured into it


def test_a_node_down_is_a_gap_in_its_series_and_they_resume() -> None:
    s = Sampler()
    s.add(obs(0.0, {("a", 0): 0}, leader=1))
    s.add(obs(1.0, {("a", 0): 10}, leader=1))
    assert last(s, "produce_node", "1") == 10.0
    # node 1 down: the console leaves out partitions it leads (charts.observe)
    s.add(obs(2.0, {}, down=(1,)))
    for chart in ("produce_node", "consume_node", "leaders", "bytes"):
        assert last(s, chart, "1") is None
    assert last(s, "produce_topic", "a") is None
    assert last(s, "leaders", "0") == 0
    s.add(obs(3.0, {("a", 0): 30}, leader=0))  # a new leader on node 0
    s.add(obs(4.0, {("a", 0): 40}, leader=0))
    assert last(s, "produce_topic", "a") == 10.0
    assert last(s, "produce_node", "0") == 10.0
    assert last(s, "leaders", "1") == 0
    exported = s.export()
    assert exported["times"] == [0.0, 1.0, 2.0, 3.0, 4.0]
    charts = exported["charts"]
    assert isinstance(charts, dict)
    assert charts["produce_node"]["1"] == [None, 10.0, None, 0.0, 0.0]


def test_memory_is_bounded_in_points_and_series() -> None:
    s = Sampler(points_max=5, series_max=12)
    for i in range(50):
        # a new topic every sample: old ones go quiet, then empty for a window, then dropped
        s.add(obs(float(i), {(f"t{i}", 0): i}))
        assert len(s.times) <= 5
        assert len(s.series) <= 12
        assert all(len(ring) == len(s.times) for ring in s.series.values())
    assert ("produce_topic", "t49") in s.series
    assert ("produce_topic", "t0") not in s.series
    crowded = Sampler(points_max=5, series_max=9)  # 8 node series, then one topic
    crowded.add(obs(0.0, {("a", 0): 0, ("b", 0): 0}))
    assert crowded.refused == 1 and len(crowded.series) == 9


def test_the_background_task_samples_skips_failures_and_stops_when_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers: list[Observation | Exception] = [
        obs(1.0, {("a", 0): 0}),
        UnavailableError("the cluster is away"),
        RuntimeError("a bug in a sample"),
        obs(2.0, {("a", 0): 7}),
    ]

    def observe(_client: object, _prober: object) -> Observation:
        answer = answers.pop(0) if answers else obs(1.0, {})  # the clock went back: skipped
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(charts, "observe", observe)
    sampler = Sampler()

    async def run() -> None:
        task = asyncio.create_task(charts.sample_forever(None, None, sampler, 0.001))  # type: ignore[arg-type]
        while answers:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert list(sampler.times) == [1.0, 2.0]
    assert last(sampler, "produce_topic", "a") == 7.0
