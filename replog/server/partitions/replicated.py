"""A partition replica as the services see it: its log, its leader, its HW notifications.

The services never write the storage log; they call a `ReplicatedPartition`, whose writes
and HW go through replication. The replica's driver (`replog.replication.driver`) runs the
protocol core and is the only writer of the high watermark (HW, exclusive); this role maps
the server's calls onto it: `append`, `check_leader` (NOT_LEADER with the leader's id and
address, or LEADER_UNKNOWN during an election), and HW notifications for long polls and
streams. A single node is a cluster of one: its replicas have one voter and lead at once.

Waiting is event-driven: every HW change replaces an `asyncio.Event`, so long polls and
streams wake at once on new committed data (no polling loops).

`append` is the one place that decides when an Append is answered, for each `Acks` (the
core's enum, the server's only representation of acks): `NONE` answers once the batch is
checked and handed to the driver (the append runs in a supervised task, its failure is
logged); `LEADER` and `ALL` answer when the driver says (see the README's table). The bytes
of acks=none batches handed over and not yet written count against the node's
`acks_none_bytes_max` (`limits`): past it, RESOURCE_EXHAUSTED TOO_MANY_BYTES_IN_FLIGHT
(retriable), so a producer that does not wait for acks cannot queue unbounded memory.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from replog import records
from replog.errors import (
    LeaderUnknownError,
    NotLeaderError,
    PartitionOfflineError,
    ReplogError,
    ShuttingDownError,
    TopicNotFoundError,
)
from replog.replication import Acks, ReplicaConfig, Role
from replog.replication.driver import ReplicaDriver, Spawn, Transport
from replog.replication.producers import ProducerBatch
from replog.server.edge.limits import Limits, LimitsConfig
from replog.server.logs import log
from replog.storage import AppendResult, PartitionLog

_log = logging.getLogger("replog.server.log")
# How long a request waits for a replica about to lead (`wait_leadership`): an election
# started by a hand-over and the new leader's first commit take milliseconds; one that
# takes longer is answered LEADER_UNKNOWN (retriable) as before.
LEADERSHIP_WAIT_S = 0.5
LEADERSHIP_POLL_S = 0.005


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    leader_id: int | None  # None: unknown
    epoch: int
    replicas: tuple[int, ...]


class ReplicatedPartition:
    def __init__(
        self,
        log: PartitionLog,
        config: ReplicaConfig,
        transport: Transport,
        peers: Mapping[int, str],
        *,
        fetch_bytes_max: int,
        spawn: Spawn,
        answer_bytes_max: int = 4 * 1024 * 1024 - 64 * 1024,
        rng: random.Random | None = None,
        topic_id: int = 0,
        limits: Limits | None = None,
        on_serving: Callable[[ReplicatedPartition], None] | None = None,
    ) -> None:
        """`on_serving(self)` is called when this replica starts serving as leader (its own
        epoch committed: seen when its HW moves; once per epoch), so that what follows
        leadership (group coordinators, the leader directory) need not poll for it."""
        self.log = log
        self.node_id = config.replica_id
        self.topic = log.topic
        self.partition = log.partition
        self._hw_changed = asyncio.Event()
        self._closed = False
        self._deleted = False
        self._on_serving = on_serving
        self._serving_seen: int | None = None  # the epoch it was last seen serving in
        self.limits = limits if limits is not None else Limits(LimitsConfig())
        self.topic_id = topic_id  # which incarnation of the topic's name (see `metadata`)
        self.peers = peers
        self._spawn = spawn
        self.driver = ReplicaDriver(
            log,
            config,
            transport,
            rng=rng,
            fetch_bytes_max=fetch_bytes_max,
            answer_bytes_max=answer_bytes_max,
            on_high_watermark=self._high_watermark_moved,
            spawn=spawn,
        )

    async def start(self) -> None:
        await self.driver.start()

    def _high_watermark_moved(self, _hw: int) -> None:
        self._notify()
        # Each epoch this replica serves in is told once, also one won again without an HW
        # move seen in between (a leader that lost an election and won the next one).
        serving = self.driver.epoch if self.driver.serving else None
        if serving != self._serving_seen:
            self._serving_seen = serving
            if serving is not None and self._on_serving is not None:
                self._on_serving(self)

    async def stop(self) -> None:
        self.close()
        await self.driver.close()

    @property
    def leader(self) -> LeaderInfo:
        return LeaderInfo(self.driver.leader_id, self.driver.epoch, self.driver.membership.voters)

    @property
    def is_leader(self) -> bool:
        """Leads, with its own epoch committed: its HW is never below one an earlier leader
        reported, so it may answer reads, `latest` and appends."""
        return self.driver.serving

    async def wait_leadership(self, timeout_s: float = LEADERSHIP_WAIT_S) -> None:
        """While leadership of this partition is changing as far as this replica knows, wait
        until it has settled, up to `timeout_s`; `check_leader` then says how. Changing: a
        leader handing over, or whose own epoch is not committed yet; a candidate; a
        follower that voted in this epoch and has not heard of a winner. So a client that
        asks during a hand-over is answered once, with the new leader's address (or by the
        new leader itself once it serves), instead of being refused, sent back and forth
        between the old leader and the target, and backing off longer at each refusal."""
        if not self._leadership_changing():
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._leadership_changing() and loop.time() < deadline:
            await asyncio.sleep(LEADERSHIP_POLL_S)

    def _leadership_changing(self) -> bool:
        driver = self.driver
        if self._closed or driver.stopped:
            return False
        if driver.role is Role.LEADER:
            return not driver.serving
        if driver.role is Role.CANDIDATE:
            return True
        return driver.leader_id is None and driver.voted_for is not None

    def check_leader(self) -> None:
        if self._closed:
            raise self.closed_error()
        if self.driver.offline is not None or self.log.io_error is not None:
            raise PartitionOfflineError(
                f"the replica of {self.topic}/{self.partition} on node {self.node_id} is "
                f"offline (an I/O error on its files: {self.driver.offline or self.log.io_error})"
                "; another replica may lead it",
                topic=self.topic,
                partition=self.partition,
            )
        if self.driver.serving:
            return
        leader = self.driver.leader_id
        where = f"{self.topic}/{self.partition}"
        target = self.driver.transferring_to
        if self.driver.role is Role.LEADER and target is not None:
            # handing over (a SIGTERM, a balancer, a command): the client goes to the target
            # at once instead of backing off, as the core answers appends meanwhile
            raise self._not_leader(f"node {self.node_id} is handing {where} over", target)
        if self.driver.role is Role.LEADER:
            raise LeaderUnknownError(
                f"{where}: node {self.node_id} was just elected and its high watermark is "
                "catching up with its predecessor's; retry",
                topic=self.topic,
                partition=self.partition,
            )
        if leader is None or leader == self.node_id:
            raise LeaderUnknownError(
                f"{where} has no leader right now (an election is under way)",
                topic=self.topic,
                partition=self.partition,
            )
        raise self._not_leader(f"node {self.node_id} does not lead {where}", leader)

    def _not_leader(self, why: str, leader: int) -> NotLeaderError:
        return NotLeaderError(
            f"{why}; node {leader} does",
            leader_id=leader,
            leader_address=self.peers.get(leader),
            topic=self.topic,
            partition=self.partition,
        )

    async def append(
        self,
        values: Sequence[bytes],
        acks: Acks,
        timeout_s: float,
        producer: ProducerBatch | None = None,
        *,
        values_bytes: int | None = None,
    ) -> AppendResult | None:
        """Append as leader; the offsets once `acks` is satisfied (None for acks=none).
        `producer`: an idempotent producer's batch (appended once, see `producers`).
        `values_bytes`: the values' total size, if the caller has it (then a batch whose
        total fits `record_bytes_max` is not measured record by record)."""
        self.check_leader()
        # Checked before the driver sees the batch: a write the log refuses would make the
        # driver rebuild its core from disk (and a lone voter hold a new election).
        config = self.log.config
        # no record can be larger than the whole batch: measured one by one only past it
        limit = min(
            config.record_bytes_max, config.topic_record_bytes_max or config.record_bytes_max
        )
        if values_bytes is None or values_bytes > limit:
            config.check_record_bytes(max(map(len, values)), new=True)
        if config.compact:  # (an envelope topic: the checks above ran on its values)
            records.check_keyed(values)
        if acks is Acks.NONE:  # nobody hears about later failures
            size_bytes = sum(map(len, values)) if values_bytes is None else values_bytes
            self.limits.take_acks_none(size_bytes)  # TOO_MANY_BYTES_IN_FLIGHT past the limit
            try:
                self._spawn(
                    self._append_unacknowledged(values, timeout_s, size_bytes, producer),
                    "append-acks-none",
                )
            except BaseException:
                self.limits.release_acks_none(size_bytes)
                raise
            return None
        try:
            base, last = await self.driver.append(values, acks, timeout_s, producer)
        except ShuttingDownError as exc:  # stopped meanwhile: the topic may have been deleted
            if self._closed:
                raise self.closed_error() from exc
            raise
        return AppendResult(base, last)

    async def _append_unacknowledged(
        self,
        values: Sequence[bytes],
        timeout_s: float,
        size_bytes: int,
        producer: ProducerBatch | None,
    ) -> None:
        try:
            await self.driver.append(values, Acks.NONE, timeout_s, producer)
        except ReplogError as exc:  # e.g. leadership lost, disk full: nobody waits; log it
            log(_log, "append.dropped", logging.WARNING, topic=self.topic, error=repr(exc))
        finally:
            self.limits.release_acks_none(size_bytes)

    # -- the log's HW, its waiters, closing --------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def hw_changed(self) -> asyncio.Event:
        """An event set at the next HW change (or shutdown); take it BEFORE checking the HW."""
        return self._hw_changed

    def _notify(self) -> None:
        event, self._hw_changed = self._hw_changed, asyncio.Event()
        event.set()

    async def wait_high_watermark(self, offset: int, timeout_s: float) -> bool:
        """Wait until HW > offset; False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.log.high_watermark <= offset:
            if self._closed:
                raise self.closed_error()
            event = self._hw_changed
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return self.log.high_watermark > offset
        return True

    def close(self, *, deleted: bool = False) -> None:
        """Wake every waiter; they see `closed` and end (with UNKNOWN_TOPIC if `deleted`:
        the topic was deleted, perhaps created again, and this replica is never used again)."""
        self._deleted = self._deleted or deleted
        self._closed = True
        self._notify()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def deleted(self) -> bool:
        return self._deleted

    def closed_error(self) -> ReplogError:
        """What a request on this replica gets once it is closed: UNKNOWN_TOPIC (NOT_FOUND) if
        its topic was deleted, SHUTTING_DOWN (retriable) if the node is stopping."""
        if self._deleted:
            return TopicNotFoundError(f"topic {self.topic!r} was deleted", topic=self.topic)
        return ShuttingDownError("the server is shutting down")
