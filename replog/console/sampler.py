"""The console's chart data: bounded rings of samples, and rates from counters (pure logic).

Every `interval_s` the console takes an `Observation` of the cluster (`charts.observe`):
each node's state, each partition's high watermark, leader and size, each group's
committed offset and lag per partition. `Sampler.add` turns two successive observations
into one point per series:

    produce  records/s per topic and per node (the partition's leader): HW deltas
    consume  records/s per topic and per node: committed-offset deltas of every group
    lag      records per group: the sum of its partitions' lags
    leaders  partitions led, per node
    bytes    bytes of the partitions a node leads, per node

A rate is known only when both observations saw the counter and it did not go back (a
topic deleted and made again, an offset reset): otherwise that partition adds nothing,
and a series none of whose parts is known gets a gap (None), as does every series of a
node that is down. Memory is bounded: `points_max` points per series (one hour at one
sample every 10 s) and at most `series_max` series; a series that has been empty for a
whole window is dropped, and one over the cap is not started (`refused` counts them).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

CHARTS = (
    "produce_topic",
    "produce_node",
    "consume_topic",
    "consume_node",
    "lag",
    "leaders",
    "bytes",
)


@dataclass(frozen=True, slots=True)
class PartitionSample:
    high_watermark: int
    leader_id: int | None
    size_bytes: int


@dataclass(frozen=True, slots=True)
class Observation:
    at: float  # seconds since the epoch
    nodes: Mapping[int, bool]  # node id -> up
    partitions: Mapping[tuple[str, int], PartitionSample] = field(default_factory=dict)
    # group -> (topic, partition) -> (committed offset (-1: none), lag (-1: unknown))
    groups: Mapping[str, Mapping[tuple[str, int], tuple[int, int]]] = field(default_factory=dict)


Key = tuple[str, str]  # (chart, label)


class Sampler:
    """Rings of points per series, all aligned on one ring of times."""

    def __init__(self, points_max: int = 360, series_max: int = 256) -> None:
        assert points_max >= 2 and series_max >= 1
        self.points_max = points_max
        self.series_max = series_max
        self.times: deque[float] = deque(maxlen=points_max)
        self.series: dict[Key, deque[float | None]] = {}
        self.refused = 0
        self.took_s: float | None = None  # how long the last observation took (the task's)
        self._last: Observation | None = None

    def add(self, obs: Observation) -> None:
        """One point per series from `obs` and the observation before it."""
        assert self._last is None or obs.at > self._last.at, "observations go forward"
        points = points_of(self._last, obs)
        self._last = obs
        self.times.append(obs.at)
        for key, ring in list(self.series.items()):
            ring.append(points.pop(key, None))
            if all(v is None for v in ring) and len(ring) == self.points_max:
                del self.series[key]
        for key, value in sorted(points.items()):
            if len(self.series) >= self.series_max:
                self.refused += 1
                continue
            ring = deque([None] * (len(self.times) - 1), maxlen=self.points_max)
            ring.append(value)
            self.series[key] = ring

    def export(self) -> dict[str, object]:
        """The JSON the chart page polls: times, then per chart label -> values."""
        charts: dict[str, dict[str, list[float | None]]] = {c: {} for c in CHARTS}
        for (chart, label), ring in sorted(self.series.items()):
            charts[chart][label] = list(ring)
        return {
            "times": list(self.times),
            "charts": charts,
            "refused": self.refused,
            "took_s": self.took_s,
        }


def points_of(last: Observation | None, obs: Observation) -> dict[Key, float | None]:
    """The value of every series `obs` says something about (None: a gap)."""
    points: dict[Key, float | None] = {}
    for node_id, up in obs.nodes.items():
        for chart in ("produce_node", "consume_node", "leaders", "bytes"):
            rate = chart.endswith("_node")
            points[(chart, str(node_id))] = 0.0 if up and (last or not rate) else None
    for (topic, _p), part in obs.partitions.items():
        points.setdefault(("produce_topic", topic), None)
        node = str(part.leader_id)
        if part.leader_id is not None and points.get(("leaders", node)) is not None:
            points[("leaders", node)] = (points[("leaders", node)] or 0.0) + 1
            points[("bytes", node)] = (points[("bytes", node)] or 0.0) + part.size_bytes
    for group, lags in obs.groups.items():
        for topic, _p in lags:
            points.setdefault(("consume_topic", topic), None)
        known = [lag for _c, lag in lags.values() if lag >= 0]
        points[("lag", group)] = float(sum(known)) if known else None
    if last is None:
        return points
    elapsed = obs.at - last.at
    for tp, part in obs.partitions.items():
        before = last.partitions.get(tp)
        if before is not None and part.high_watermark >= before.high_watermark:
            _add_rate(
                points,
                "produce",
                tp[0],
                part,
                (part.high_watermark - before.high_watermark) / elapsed,
            )
    for group, offsets in obs.groups.items():
        previous = last.groups.get(group, {})
        for tp, (committed, _lag) in offsets.items():
            was = previous.get(tp, (-1, -1))[0]
            held = obs.partitions.get(tp)
            if held is not None and was >= 0 and committed >= was:
                _add_rate(points, "consume", tp[0], held, (committed - was) / elapsed)
    return points


def _add_rate(
    points: dict[Key, float | None], kind: str, topic: str, part: PartitionSample, rate: float
) -> None:
    key = (f"{kind}_topic", topic)
    points[key] = (points.get(key) or 0.0) + rate
    node_key = (f"{kind}_node", str(part.leader_id))
    if part.leader_id is not None and points.get(node_key) is not None:
        points[node_key] = (points[node_key] or 0.0) + rate
