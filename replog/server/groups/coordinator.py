"""The group coordinator of a node: which groups it coordinates, and their shards.

Groups live in the internal topic `__consumer_offsets` (N partitions, created by the first
FindCoordinator of the cluster on the metadata leader, replicated like any topic). Group
`g` belongs to partition `crc32(g) % N`; the leader of that partition is `g`'s coordinator.
This node runs one `Shard` for each partition whose replica here serves as leader
(`run`: started when it begins serving, loaded from the log, ended when it stops, one per
epoch); a request for a group whose shard is elsewhere gets NOT_COORDINATOR naming the
leader this node knows, one whose shard is still loading gets COORDINATOR_LOADING.

Background work, in supervised tasks started by `start`:

    run             follow leadership of the partitions (shards come and go): woken when
                    a replica of the topic here starts serving as leader (`wake`) or a
                    request finds no shard, and every WATCH_INTERVAL_S in any case
    run_expiry      remove members past their session or rebalance timeout (every 100 ms
                    while this node holds groups, every second while it holds none)
    run_retention   every retention_check_interval_ms: drop the offsets of groups empty and
                    without commits for offsets_retention_ms (a `delete_group` record,
                    reason "expired"); and, when the node has a log retention_ms, rewrite
                    the offsets of groups whose newest record is older than half of it, so
                    that log retention never removes a live group's offsets
    run_snapshots   every second: a shard with `snapshot_records` records since its last
                    snapshot writes one (`Shard.snapshot`), so that a new coordinator's
                    load reads only what followed the snapshot before last
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import Callable, Coroutine
from typing import Any

from replog.errors import (
    CoordinatorLoadingError,
    LeaderUnknownError,
    NotCoordinatorError,
    NotLeaderError,
    ReplogError,
    TopicExistsError,
)
from replog.server.control.routing import Elsewhere, Router
from replog.server.control.topics import OFFSETS_TOPIC, Topics
from replog.server.groups import records
from replog.server.groups.config import GroupsConfig
from replog.server.groups.shard import Shard
from replog.server.groups.state import Groups, GroupsLimits
from replog.server.logs import log
from replog.server.meta.metadata import METADATA_TOPIC, TopicMeta
from replog.server.meta.metadata_log import MetadataLog
from replog.server.partitions.replica_manager import ReplicaManager
from replog.server.partitions.replicated import ReplicatedPartition
from replog.server.peering.peers import Peers

_log = logging.getLogger("replog.server.groups")

WATCH_INTERVAL_S = 1.0  # a safety net: leadership gained wakes the watch at once
EXPIRY_INTERVAL_S = 0.1
IDLE_EXPIRY_INTERVAL_S = 1.0  # no group held here: nobody to expire but one that joins
SNAPSHOT_CHECK_S = 1.0
Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


def partition_of(group: str, partitions: int) -> int:
    """The `__consumer_offsets` partition of `group`: crc32 (IEEE) of its UTF-8 bytes."""
    return zlib.crc32(group.encode()) % partitions


def wall_ms() -> int:
    return int(time.time() * 1000)


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class Coordinator:
    def __init__(
        self,
        config: GroupsConfig,
        router: Router,
        metadata: MetadataLog,
        replicas: ReplicaManager,
        topics: Topics,
        peers: Peers,
        *,
        now_ms: Callable[[], int] = monotonic_ms,
        wall_ms: Callable[[], int] = wall_ms,
    ) -> None:
        self.config = config
        self.router = router
        self.metadata = metadata
        self.replicas = replicas
        self.topics = topics
        self.peers = peers
        self.node_id = peers.node_id
        self.now_ms = now_ms
        self.wall_ms = wall_ms
        self.shards: dict[int, Shard] = {}
        self._shard_tasks: dict[int, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._spawn: Spawn | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.limits = GroupsLimits(config.groups_max, config.members_max)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, spawn: Spawn) -> None:
        self._spawn = spawn
        self._tasks = [
            spawn(self.run(), "groups-leadership"),
            spawn(self.run_expiry(), "groups-expiry"),
            spawn(self.run_retention(), "groups-retention"),
            spawn(self.run_snapshots(), "groups-snapshots"),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for p in list(self.shards):
            await self._drop(p)

    # -- topic and image ---------------------------------------------------------------------

    def offsets_meta(self) -> TopicMeta | None:
        return self.metadata.image.topics.get(OFFSETS_TOPIC)

    def counts(self, topic: str) -> int:
        """A topic's partition count for assignment (0: it does not exist, or is internal)."""
        meta = self.metadata.image.topics.get(topic)
        if meta is None or topic in (OFFSETS_TOPIC, METADATA_TOPIC):
            return 0
        return meta.partitions

    def topic_id(self, topic: str) -> int:
        meta = self.metadata.image.topics.get(topic)
        return 0 if meta is None else meta.topic_id

    async def create_offsets_topic(self) -> TopicMeta:
        """On the metadata leader: create `__consumer_offsets` unless it exists."""
        meta = self.offsets_meta()
        if meta is not None:
            return meta
        rf = min(self.config.offsets_replication_factor, len(self.peers.nodes()))
        with contextlib.suppress(TopicExistsError):  # another call created it meanwhile
            await self.topics.create(
                OFFSETS_TOPIC, self.config.offsets_partitions, rf, internal=True
            )
        log(_log, "groups.offsets_topic_created", partitions=self.config.offsets_partitions, rf=rf)
        return self.metadata.image.topic(OFFSETS_TOPIC)

    # -- routing -----------------------------------------------------------------------------

    async def shard_for(self, group: str) -> Shard:
        """The loaded shard of `group` on this node; NOT_COORDINATOR (with the leader this
        node knows), COORDINATOR_LOADING, or LEADER_UNKNOWN otherwise."""
        meta = self.offsets_meta()
        if meta is None:
            raise NotCoordinatorError(
                "no group coordinator exists yet: call FindCoordinator first", group=group
            )
        p = partition_of(group, meta.partitions)
        try:
            part = await self.router.leader_replica(OFFSETS_TOPIC, p)
        except NotLeaderError as exc:
            raise NotCoordinatorError(
                f"node {self.node_id} does not coordinate group {group!r} "
                f"({OFFSETS_TOPIC} partition {p})",
                leader_id=exc.leader_id,
                leader_address=exc.leader_address,
                group=group,
            ) from None
        shard = self.shards.get(p)
        if shard is None or shard.part is not part or not shard.current():
            self._wake.set()
            raise CoordinatorLoadingError(
                f"node {self.node_id} is taking over group {group!r}; retry", group=group
            )
        if not shard.loaded:
            raise CoordinatorLoadingError(
                f"node {self.node_id} is loading the groups of {OFFSETS_TOPIC} partition {p} "
                f"({shard.applied_offset}/{shard.load_target} records); retry",
                group=group,
            )
        return shard

    async def find(self, group: str) -> tuple[int, str, int] | int:
        """`(node_id, address, partition)` of the coordinator when this node knows it, else
        the node to ask instead (the partition's first replica: this node holds none)."""
        meta = self.offsets_meta()
        assert meta is not None
        p = partition_of(group, meta.partitions)
        route = await self.router.locate(OFFSETS_TOPIC, p)
        if isinstance(route, Elsewhere):
            return route.replicas[0]
        part = route.replica
        leader = self.node_id if part.is_leader else part.driver.leader_id
        address = self.peers.address(leader)
        if leader is None or address is None or (leader == self.node_id and not part.is_leader):
            raise LeaderUnknownError(
                f"{OFFSETS_TOPIC} partition {p} (group {group!r}) has no leader right now",
                group=group,
            )
        return leader, address, p

    def loaded_shards(self) -> list[Shard]:
        return [s for s in self.shards.values() if s.loaded and s.current()]

    def groups_held(self) -> int:
        return sum(len(s.groups.groups) for s in self.shards.values())

    # -- leadership --------------------------------------------------------------------------

    def wake(self) -> None:
        """Leadership of a `__consumer_offsets` replica here changed: look now."""
        self._wake.set()

    async def run(self) -> None:
        """Keep one shard per partition led here; runs until cancelled. Waits on `_wake`
        with one loop timer per wait (no task per wait, as `asyncio.wait_for` makes)."""
        loop = asyncio.get_running_loop()
        while True:
            await self._sync()
            self._wake.clear()
            timer = loop.call_later(WATCH_INTERVAL_S, self._wake.set)
            try:
                await self._wake.wait()
            finally:
                timer.cancel()

    async def _sync(self) -> None:
        meta = self.offsets_meta()
        wanted: dict[int, Any] = {}
        if meta is not None:
            for p in meta.hosted_by(self.node_id):
                part = self.replicas.replica(meta, p)
                if part is not None and not part.closed and part.is_leader:
                    wanted[p] = part
        for p in list(self.shards):
            shard = self.shards[p]
            if wanted.get(p) is not shard.part or not shard.current():
                await self._drop(p)
        for p, part in wanted.items():
            if p not in self.shards:
                self._open(p, part)

    def _open(self, p: int, part: Any) -> None:
        assert self._spawn is not None
        groups = Groups(self.limits, self.groups_held)
        shard = Shard(part, groups, timeout_s=self.config.timeout_s, wall_ms=self.wall_ms)
        self.shards[p] = shard
        self._shard_tasks[p] = self._spawn(shard.run(), f"groups-shard-{p}")
        log(_log, "groups.shard_opened", partition=p, epoch=shard.epoch, load=shard.load_target)

    async def _drop(self, p: int) -> None:
        shard = self.shards.pop(p)
        shard.close()
        task = self._shard_tasks.pop(p, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        log(_log, "groups.shard_closed", partition=p, epoch=shard.epoch)

    # -- expiry and retention ----------------------------------------------------------------

    async def run_expiry(self) -> None:
        while True:
            held = any(shard.groups.groups for shard in self.loaded_shards())
            await asyncio.sleep(EXPIRY_INTERVAL_S if held else IDLE_EXPIRY_INTERVAL_S)
            self.expire()

    def expire(self) -> None:
        now, wall = self.now_ms(), self.wall_ms()
        for shard in self.loaded_shards():
            for removed in shard.groups.expire(now, wall, self.counts):
                log(
                    _log,
                    "groups.member_removed",
                    group=removed.group,
                    member_id=removed.member_id,
                    why=removed.why,
                )

    async def run_retention(self) -> None:
        interval_s = self.config.retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            with contextlib.suppress(ReplogError):  # leadership moved, a timeout: next time
                await self.apply_retention()

    async def apply_retention(self) -> None:
        """Expire idle groups' offsets; rewrite live offsets ahead of log retention."""
        for shard in self.loaded_shards():
            wall = self.wall_ms()
            for name in shard.groups.expired_groups(wall, self.config.offsets_retention_ms):
                await shard.write(records.DeleteGroup(name, wall, "expired"))
                log(_log, "groups.offsets_expired", group=name)
            if self.config.log_retention_ms is None:
                continue
            for name in shard.groups.stale_records(wall, self.config.log_retention_ms // 2):
                offsets = shard.groups.live_offsets(name, self.topic_id)
                if offsets:
                    await shard.write(records.Commit(name, self.wall_ms(), offsets))
            shard.refreshed = True

    def retention_allowed(self, part: ReplicatedPartition) -> bool:
        """Whether log retention may delete old segments of the replica `part` on this node.
        Any topic but `__consumer_offsets`: yes. A replica of it that follows a known other
        leader: yes (that leader's refreshes reach its log). One this node leads, or whose
        leader is unknown: only once its shard has loaded and a retention pass has since
        rewritten every group whose newest record is old, so that the segments retention
        deletes hold no group's only record (a node that has just started or taken over
        keeps them until its refreshes have run)."""
        if part.topic != OFFSETS_TOPIC:
            return True
        leader = part.driver.leader_id
        if leader is not None and leader != self.node_id:
            return True
        shard = self.shards.get(part.partition)
        return shard is not None and shard.loaded and shard.current() and shard.refreshed

    async def run_snapshots(self) -> None:
        while True:
            await asyncio.sleep(SNAPSHOT_CHECK_S)
            await self.take_snapshots()

    async def take_snapshots(self) -> None:
        """Snapshot each loaded shard with `snapshot_records` records since its last one (and
        at least two per group it holds: a snapshot writes one per group)."""
        for shard in self.loaded_shards():
            due = max(self.config.snapshot_records, 2 * len(shard.groups.groups))
            if shard.since_snapshot >= due:
                with contextlib.suppress(ReplogError, TimeoutError):  # moved, timed out: later
                    await shard.snapshot(self.topic_id)
