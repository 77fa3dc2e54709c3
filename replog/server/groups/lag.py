"""Consumer lag on the coordinator: high watermarks of the groups' partitions, and metrics.

`HighWatermarks.of(topic)` gives each partition's (log start, HW) as its leader has them:
read here for partitions this node leads, asked of the nodes that hold the others
(`Admin.ListOffsets`, which they forward to the leader); a partition nobody answers for is
left out (lag unknown). `run` refreshes the HWs of every partition with a committed offset
in a group coordinated here, every `LAG_REFRESH_S`, for the metrics:

    replog_group_lag_records{group,topic,partition}   HW - committed (at the last refresh)
    replog_group_committed_offset{group,topic,partition}
    replog_group_members{group}, replog_group_generation{group}

Only the coordinator of a group exports its series, so summing over nodes never counts one
twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from replog.errors import ReplogError
from replog.server.control.routing import Here
from replog.server.groups.coordinator import Coordinator
from replog.server.peering.peers import remote
from replog.v1 import admin_pb2

LAG_REFRESH_S = 5.0
REMOTE_TIMEOUT_S = 5.0
Offsets = dict[int, tuple[int, int]]  # partition -> (log start, HW)


class HighWatermarks:
    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        self.cached: dict[str, Offsets] = {}

    async def of(self, topic: str) -> Offsets:
        c = self.coordinator
        meta = c.metadata.image.topics.get(topic)
        if meta is None:
            return {}
        out: Offsets = {}
        ask: dict[int, list[int]] = {}  # node -> partitions to ask it about
        for p in range(meta.partitions):
            try:
                route = await c.router.locate(topic, p)
            except ReplogError:
                continue
            if isinstance(route, Here):
                part = route.replica
                if part.is_leader:
                    out[p] = (part.log.log_start_offset, part.high_watermark)
                    continue
                leader = part.driver.leader_id
                if leader is None or leader == c.node_id:
                    continue
                ask.setdefault(leader, []).append(p)
            else:
                ask.setdefault(route.replicas[0], []).append(p)
        for node, wanted in ask.items():
            request = admin_pb2.ListOffsetsRequest(topic=topic, partitions=wanted)
            with contextlib.suppress(ReplogError):
                reply = await remote(
                    c.peers.admin(node).ListOffsets(request, timeout=REMOTE_TIMEOUT_S)
                )
                for o in reply.partitions:
                    out[o.partition] = (o.earliest, o.latest)
        self.cached[topic] = out
        return out

    async def run(self) -> None:
        """Refresh the cache for the metrics; runs until cancelled."""
        while True:
            await asyncio.sleep(LAG_REFRESH_S)
            topics: set[str] = set()
            for shard in self.coordinator.loaded_shards():
                for group in list(shard.groups.groups.values()):
                    topics.update(t for t, _p in group.offsets)
            for topic in sorted(topics):
                await self.of(topic)
            for gone in set(self.cached) - topics:
                del self.cached[gone]


class LagCollector(Collector):
    """The groups this node coordinates, read at scrape time (HWs from the last refresh)."""

    def __init__(self, coordinator: Coordinator, hws: HighWatermarks) -> None:
        self.coordinator = coordinator
        self.hws = hws

    def collect(self) -> Iterable[GaugeMetricFamily]:
        labels = ["group", "topic", "partition"]
        lag = GaugeMetricFamily(
            "replog_group_lag_records",
            "High watermark minus the group's committed offset (coordinator's view)",
            labels=labels,
        )
        committed = GaugeMetricFamily(
            "replog_group_committed_offset", "The group's committed offset", labels=labels
        )
        members = GaugeMetricFamily("replog_group_members", "Members", labels=["group"])
        generation = GaugeMetricFamily(
            "replog_group_generation", "The group's generation", labels=["group"]
        )
        c = self.coordinator
        for shard in list(c.shards.values()):
            if not shard.loaded:
                continue
            for group in list(shard.groups.groups.values()):
                members.add_metric([group.name], len(group.members))
                generation.add_metric([group.name], group.generation)
                for (topic, p), entry in list(group.offsets.items()):
                    if entry.topic_id != c.topic_id(topic):
                        continue
                    key = [group.name, topic, str(p)]
                    committed.add_metric(key, entry.offset)
                    hw = self.hws.cached.get(topic, {}).get(p)
                    if hw is not None:
                        lag.add_metric(key, max(0, hw[1] - entry.offset))
        yield from (lag, committed, members, generation)
