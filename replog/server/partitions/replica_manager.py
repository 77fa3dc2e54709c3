"""The reconciler: moves this node's replicas towards what the metadata image says.

Desired state is the `MetadataImage` (which topics exist, which partitions this node holds a
replica of, each topic's `topic_id`); local state is the topic directories on disk
(`replica_dirs`) and the replicas running here. One supervised task (`run`) compares them
whenever the image changes and performs, topic by topic:

* a local topic the image no longer has, or has under another `topic_id` (deleted, perhaps
  created again): mark its replicas deleted (every append, long poll and stream on them ends
  with UNKNOWN_TOPIC from then on, never with an error of a closed file), stop them, close
  their logs, move its directory to the trash;
* a topic the image assigns here: make its directory (or adopt an unstamped one from an
  earlier release), open each hosted partition's log, start its replica (a partition being
  reassigned is hosted by its assignment's nodes and its target's: see `metadata`);
* a partition of a topic still hosted here that the image no longer hosts here (a
  completed reassignment moved it away): stop its replica, move its directory to the trash;
* a running replica of a topic whose configs changed (`topic_configs`): its log takes the
  topic's storage config again (retention, segment size, record limit: no restart).

What a pass looks at is what changed: the first pass (start-up) looks at every topic that
exists locally or in the image, once each; every later pass only at the topics the image
changed since the pass before (its change set, `MetadataImage.watch`), those with a failure
due for a retry, and local topics the image does not know yet (their fate waits for the
metadata to catch up). Looking at one topic costs its partitions: creating a topic costs the
same with 10 topics or 10,000 (`visited_topics`, `visited_partitions` count the work).

A local failure (ENOSPC, EMFILE, a name too long for the file system, ...) is recorded for
that topic or partition (`failures()`: logs, metrics, errors on the request path), and
retried with exponential backoff; it never blocks the metadata log, other topics or other
partitions. Only `ReplogError` and `OSError` count as local failures: anything else is a bug
and ends the node (see `supervisor`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from replog.errors import ReplogError, TooManyPartitionsError
from replog.server.logs import log
from replog.server.meta import timestamps, topic_configs
from replog.server.meta.metadata import MetadataImage, TopicMeta
from replog.server.partitions import replica_dirs
from replog.server.partitions.flusher import GroupFlusher
from replog.server.partitions.replica_dirs import LocalTopic
from replog.server.partitions.replicated import ReplicatedPartition
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from replog.storage.names import partition_dir
from replog.storage.open_files import FILES_PER_SEGMENT, OpenFiles, nofile_soft_limit
from replog.storage.space import DiskSpace

_log = logging.getLogger("replog.server.replicas")

BACKOFF_S_MIN = 0.1
BACKOFF_S_MAX = 30.0
FILES_RESERVE = 32  # descriptors kept free for sockets and files opened briefly
CLOSE_WINDOW = 64  # replicas stopped at once when the node closes

MakeReplica = Callable[[TopicMeta, int, PartitionLog], ReplicatedPartition]
Key = tuple[str, int | None]  # (topic, partition); None: the topic's directory


@dataclass(frozen=True, slots=True)
class Failure:
    topic: str
    partition: int | None  # None: the topic as a whole (its directory)
    action: str  # create | open | delete
    error: str
    attempts: int
    retry_at: float  # on the manager's clock


# Off: measured slower than each write fsyncing its own log, also now that a log's fsync
# no longer holds its lock and the owner holds appends back meanwhile
# (bench/group_flush_inprocess.py: 0.82 / 0.44 of its rate with 1 / 4 appenders, the same
# fsyncs per batch; flush_ratio.py on against off in one run: the `always` cluster faster
# off in 5 of 6 repeats). docs/benchmarks.md, "Group flush in process".
GROUP_FLUSH = False


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        data_dir: Path,
        config: StorageConfig,
        image: MetadataImage,
        make_replica: MakeReplica,
        metadata_ready: Callable[[], bool],
        *,
        clock: Callable[[], float] = time.monotonic,
        files: OpenFiles | None = None,
        partitions_max: int = 1 << 30,
    ) -> None:
        self.node_id = node_id
        self.data_dir = data_dir
        self.config = config
        self.image = image
        self._make_replica = make_replica
        self._metadata_ready = metadata_ready
        self._clock = clock
        self.files = files  # the open-files budget of every replica's log (open_files.py)
        self.partitions_max = partitions_max
        self.replicas: dict[tuple[str, int], ReplicatedPartition] = {}
        self._running: dict[str, set[int]] = {}  # topic -> its partitions in `replicas`
        self._changed = image.watch()  # topics the image changed since they were looked at
        self._full = True  # the next pass looks at every topic (start-up)
        self._undecided: set[str] = set()  # local topics the image does not know (yet)
        self.visited_topics = 0  # topics looked at, every pass (the work; a metric)
        self.visited_partitions = 0  # partitions looked at by those visits
        self._local: dict[str, LocalTopic] = {}
        self._failures: dict[Key, Failure] = {}
        self._moved: set[tuple[str, int]] = set()  # partitions moved away, directory left
        self._wake = asyncio.Event()
        self._passes = 0
        self._pass_done = asyncio.Event()
        self._closed = False
        # flush=always with GROUP_FLUSH: every replica's log is fsynced by the node's group
        # flusher (its task: `group_flusher.run`, started with the node's other tasks)
        self.group_flusher = GroupFlusher()

    # -- lifecycle -------------------------------------------------------------------------

    async def load(self) -> None:
        """Read local state: empty the trash, list topic directories."""
        await asyncio.to_thread(replica_dirs.empty_trash, self.data_dir)
        # a reserve of the disk for the writes that keep replication safe (storage.space)
        await asyncio.to_thread(DiskSpace.of(self.data_dir).enable_reserve)
        self._local = await asyncio.to_thread(replica_dirs.scan, self.data_dir)

    def wake(self) -> None:
        """The image changed (or a caller wants a pass now)."""
        self._wake.set()

    async def run(self) -> None:
        """Reconcile on every wake-up and at the earliest retry time; runs until cancelled."""
        while True:
            timeout = self._next_retry_s()
            if timeout is None:
                await self._wake.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
            self._wake.clear()
            await self.reconcile()

    async def reconcile(self) -> None:
        """One pass over the topics to look at (the module's docstring): every topic the
        first time, the changed ones (and those retried or undecided) after."""
        now = self._clock()
        names = self._to_visit(now)
        for name in sorted(names):
            if self._closed:
                return
            meta = self.image.topics.get(name)
            hosted = meta.hosted_by(self.node_id) if meta is not None else []
            self.visited_topics += 1
            self.visited_partitions += meta.partitions if meta is not None else 0
            await self._reconcile_topic(name, meta if hosted else None, hosted, now)
        self._passes += 1
        done, self._pass_done = self._pass_done, asyncio.Event()
        done.set()

    def _to_visit(self, now: float) -> set[str]:
        """The topics this pass looks at; takes them out of the change set (a change that
        comes while the pass runs is looked at by the next one)."""
        names = set(self._changed)
        self._changed.clear()
        if self._full:
            self._full = False
            names.update(self.image.topics, self._local, self._running)
        if self._metadata_ready():  # (until then they stay as they are: see `_stale`)
            names.update(self._undecided)
        names.update(k[0] for k, f in self._failures.items() if f.retry_at <= now)
        return names

    async def wait_passes(self, count: int, timeout_s: float) -> bool:
        """Wait until `count` more passes finished (True) or `timeout_s` passed (False)."""
        target = self._passes + count
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._passes < target:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            event = self._pass_done
            self.wake()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)
        return True

    def begin_shutdown(self) -> None:
        """Wake every long poll and stream of every replica; refuse new work."""
        for part in self.replicas.values():
            part.close()

    async def close(self) -> None:
        """Stop every replica and close its log, `CLOSE_WINDOW` at a time (one at a time, a
        node of 3,000 replicas took 8 s to stop: each stop waits for its owner's next pass
        and a thread hop); every one is stopped even if some fail, then the first failure
        is raised."""
        self._closed = True
        keys = list(self.replicas)
        failures: list[BaseException] = []
        for i in range(0, len(keys), CLOSE_WINDOW):
            wave = keys[i : i + CLOSE_WINDOW]
            results = await asyncio.gather(*map(self._stop, wave), return_exceptions=True)
            failures += [r for r in results if isinstance(r, BaseException)]
        self.group_flusher.close()
        if failures:
            raise failures[0]

    # -- capacity ----------------------------------------------------------------------------

    def check_capacity(self, assignment: Sequence[Sequence[int]]) -> None:
        """Before a create of a topic with `assignment` (each partition's replicas), or a
        reassignment that adds replicas (`assignment`: the nodes it adds), on the metadata
        leader: RESOURCE_EXHAUSTED TOO_MANY_PARTITIONS if any node would host more than
        `partitions_max` replicas, those that moves in progress add included (every node
        is assumed to run this node's setting),
        or if this node has so few descriptors left that opening its new logs (one at a
        time, each at least one segment's files, parked afterwards) could fail with EMFILE."""
        hosted = self.image.hosted  # (kept by the image's apply: no pass over every topic)
        adding = Counter(n for replicas in assignment for n in replicas)
        for node, count in sorted(adding.items()):
            if hosted[node] + count > self.partitions_max:
                raise TooManyPartitionsError(
                    f"node {node} hosts {hosted[node]} partition replicas; {count} more would "
                    f"exceed partitions_max={self.partitions_max}",
                    limit="partitions_max",
                    limit_value=self.partitions_max,
                )
        more = adding[self.node_id]
        if more and self.files is not None:
            free = nofile_soft_limit() - _open_descriptors()
            need = FILES_PER_SEGMENT + FILES_RESERVE  # logs open one at a time, then park
            if free < need:
                raise TooManyPartitionsError(
                    f"node {self.node_id} has {free} file descriptors left (RLIMIT_NOFILE)",
                    limit="open_files",
                    limit_value=nofile_soft_limit(),
                )

    # -- lookups ---------------------------------------------------------------------------

    def replica(self, meta: TopicMeta, partition: int) -> ReplicatedPartition | None:
        """The running replica of this very topic (not an older one of the same name)."""
        part = self.replicas.get((meta.name, partition))
        if part is None or part.topic_id != meta.topic_id:
            return None
        return part

    def failure(self, topic: str, partition: int) -> Failure | None:
        return self._failures.get((topic, partition)) or self._failures.get((topic, None))

    def failures(self) -> list[Failure]:
        return list(self._failures.values())

    def logs(self) -> list[PartitionLog]:
        return [part.log for part in list(self.replicas.values())]

    # -- one topic -------------------------------------------------------------------------

    async def _reconcile_topic(
        self, name: str, meta: TopicMeta | None, hosted: list[int], now: float
    ) -> None:
        """Move topic `name` towards `meta` (None: not hosted here) whose partitions `hosted`
        have a replica here."""
        local = self._local.get(name)
        running = [(name, p) for p in sorted(self._running.get(name, ()))]
        if (local is not None or running) and self._stale(name, meta, local, running):
            if not self._due((name, None), now):
                return
            for key in running:  # at once, before any await: requests end with NOT_FOUND
                self.replicas[key].close(deleted=True)
            try:
                for key in running:
                    await self._stop(key)
                await asyncio.to_thread(replica_dirs.remove, self.data_dir, name)
            except (ReplogError, OSError) as exc:
                self._failed((name, None), "delete", exc, now)
                return
            self._local.pop(name, None)
            self._moved = {k for k in self._moved if k[0] != name}
            self._succeeded((name, None))
            for stale_key in [k for k in self._failures if k[0] == name and k[1] is not None]:
                del self._failures[stale_key]
            log(_log, "topic.removed", topic=name)
        if meta is None:
            self._failures.pop((name, None), None)
            if name in self._local or name in self._running:
                self._undecided.add(name)  # not deleted before the metadata has caught up
            else:
                self._undecided.discard(name)
            return
        self._undecided.discard(name)
        local = self._local.get(name)
        if local is not None and local.topic_id not in (None, meta.topic_id):
            return  # a later incarnation on disk: the image has not caught up with it yet
        if local is None or local.topic_id is None:
            if not self._due((name, None), now):
                return
            try:
                local = await asyncio.to_thread(
                    replica_dirs.create, self.data_dir, name, meta.partitions, meta.topic_id
                )
            except (ReplogError, OSError) as exc:
                self._failed((name, None), "create", exc, now)
                return
            self._local[name] = local
            self._succeeded((name, None))
        moved = {k for k in self._moved if k[0] == name}
        moved.update((name, p) for p in self._running.get(name, ()))
        hosting = set(hosted)
        for key in sorted(k for k in moved if k[1] not in hosting):
            await self._remove_partition(key, now)  # reassigned to other nodes
        config = self._topic_config(meta)
        for p in hosted:
            running_part = self.replicas.get((name, p))
            if running_part is not None and running_part.log.config != config:
                await asyncio.to_thread(running_part.log.reconfigure, config)
                log(_log, "replica.reconfigured", topic=name, partition=p)
            if running_part is not None or not self._due((name, p), now):
                continue
            try:
                await self._start(meta, p)
            except (ReplogError, OSError) as exc:
                self._failed((name, p), "open", exc, now)
                continue
            self._succeeded((name, p))

    def _stale(
        self,
        name: str,
        meta: TopicMeta | None,
        local: LocalTopic | None,
        running: list[tuple[str, int]],
    ) -> bool:
        """Whether the local topic `name` is one the image deleted. A topic the image does not
        know (yet) is deleted only once the image holds every command of the local metadata
        log (a restarted node replays its log up to the HW it knows; the rest comes later),
        and only if it was created before what the image has applied."""
        if meta is not None:
            ids = [self.replicas[k].topic_id for k in running]
            if local is not None and local.topic_id is not None:
                ids.append(local.topic_id)
            return any(i < meta.topic_id for i in ids)
        if not self._metadata_ready():
            return False
        return local is None or local.topic_id is None or local.topic_id < self.image.applied_offset

    async def _start(self, meta: TopicMeta, p: int) -> None:
        directory = partition_dir(self.data_dir, meta.name, p)
        config = self._topic_config(meta)
        plog = await asyncio.to_thread(PartitionLog, directory, meta.name, p, config, self.files)
        try:
            part = self._make_replica(meta, p, plog)
            if GROUP_FLUSH and config.flush is FlushPolicy.ALWAYS:
                plog.flush_deferred = True
                part.driver.group_flush = self.group_flusher
            await part.start()
            preferred = meta.assignment[p][0] == self.node_id
            if preferred and plog.log_end_offset == 0 and part.driver.epoch == 0:
                # A new partition's preferred replica campaigns at once (`Replica.campaign`:
                # an ordinary election, in epoch 1 when nothing happened yet): its first
                # leader is the one the balancer wants, instead of whichever timed out
                # first and then a transfer (two elections, each a quorum-state fsync on
                # every voter). Timing only: the votes decide, as always.
                await part.driver.campaign()
        except BaseException:
            await asyncio.to_thread(plog.close)
            raise
        self.replicas[(meta.name, p)] = part
        self._running.setdefault(meta.name, set()).add(p)

    def _topic_config(self, meta: TopicMeta) -> StorageConfig:
        """The storage config of a replica of `meta`: how its records are dated, and the
        topic's configs over the node's."""
        return topic_configs.storage_config(
            timestamps.topic_config(self.config, meta), meta.configs
        )

    async def _remove_partition(self, key: tuple[str, int], now: float) -> None:
        """Stop and delete the replica of a partition the image no longer hosts here (a
        completed reassignment moved it away): requests on it end with UNKNOWN_TOPIC. A
        directory that could not be removed is retried (`_moved`) with backoff."""
        if not self._due(key, now):
            return
        self._moved.add(key)
        part = self.replicas.get(key)
        if part is not None:
            part.close(deleted=True)
        try:
            if part is not None:
                await self._stop(key)
            await asyncio.to_thread(replica_dirs.remove_partition, self.data_dir, *key)
        except (ReplogError, OSError) as exc:
            self._failed(key, "delete", exc, now)
            return
        self._moved.discard(key)
        self._succeeded(key)
        log(_log, "partition.removed", topic=key[0], partition=key[1])

    async def _stop(self, key: tuple[str, int]) -> None:
        part = self.replicas.pop(key)
        running = self._running[key[0]]
        running.discard(key[1])
        if not running:
            del self._running[key[0]]
        await part.stop()
        await asyncio.to_thread(part.log.close)

    # -- failures --------------------------------------------------------------------------

    def _due(self, key: Key, now: float) -> bool:
        failure = self._failures.get(key)
        return failure is None or failure.retry_at <= now

    def _failed(self, key: Key, action: str, exc: BaseException, now: float) -> None:
        previous = self._failures.get(key)
        attempts = 1 if previous is None else previous.attempts + 1
        delay_s = min(BACKOFF_S_MAX, BACKOFF_S_MIN * 2 ** (attempts - 1))
        self._failures[key] = Failure(key[0], key[1], action, repr(exc), attempts, now + delay_s)
        log(
            _log,
            "replica.failed",
            logging.WARNING,
            topic=key[0],
            partition=key[1],
            action=action,
            error=repr(exc),
            attempts=attempts,
            retry_in_ms=int(delay_s * 1000),
        )

    def _succeeded(self, key: Key) -> None:
        failure = self._failures.pop(key, None)
        if failure is not None:
            log(_log, "replica.recovered", topic=key[0], partition=key[1], action=failure.action)

    def _next_retry_s(self) -> float | None:
        if not self._failures:
            return None
        soonest = min(f.retry_at for f in self._failures.values())
        return max(0.0, soonest - self._clock())


def _open_descriptors() -> int:
    """How many descriptors the process has open (0 where /proc is not available)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0
