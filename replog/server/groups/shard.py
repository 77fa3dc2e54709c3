"""One partition of `__consumer_offsets` that this node leads: its groups, rebuilt from the log.

A shard exists while this node's replica of the partition serves as leader, for one epoch
(a new epoch is a new shard). It owns a `state.Groups` and one task (`run`), which applies
the partition's committed records in offset order: first everything the log holds (the
load: until then requests get COORDINATOR_LOADING), then each record as it commits. So the
committed offsets in memory are always those of the log's committed prefix, whichever
request wrote them, even one whose caller was cancelled after its append was handed to the
replica (the append goes on; its record is applied when it commits).

`write(record)` appends one record with acks=all and returns once it is committed and
applied here: a CommitOffsets is answered when its offsets are durable and visible to the
next FetchCommittedOffsets. If the shard ends meanwhile (leadership moved), a committed
record is still durable: the next coordinator applies it when it loads.

Snapshots bound the load: once `snapshot_records` records followed the latest snapshot,
`snapshot()` restates every live offset (one `commit` record per group, then a
`snapshot_end`), with writes held back meanwhile so that nothing lands between its
records. Every record names the latest complete snapshot (`records`), and a load starts
at the one the log's last record names: it reads what was written since the snapshot
before last, not the whole log. (The log itself still grows: only node retention, with
the coordinator's refreshes, removes old segments; there is no compaction.)

Membership calls change `groups` directly (synchronous, in the event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from replog import frames
from replog.errors import CoordinatorLoadingError, OffsetOutOfRangeError, ReplogError
from replog.replication import Acks
from replog.server.groups import records
from replog.server.groups.state import Groups
from replog.server.logs import log
from replog.server.partitions.replicated import ReplicatedPartition

_log = logging.getLogger("replog.server.groups")

READ_BYTES_MAX = 1 << 20
LOOK_BACK_RECORDS = 64  # control records (epoch markers, batch headers) before the last one
SNAPSHOT_CHUNK_RECORDS = 256  # commit records per append while writing a snapshot


class Shard:
    def __init__(
        self,
        part: ReplicatedPartition,
        groups: Groups,
        *,
        timeout_s: float,
        wall_ms: Callable[[], int],
    ) -> None:
        self.part = part
        self.partition = part.partition
        self.epoch = part.driver.epoch
        self.groups = groups
        self.timeout_s = timeout_s
        self._wall_ms = wall_ms
        self.applied_offset = part.log.log_start_offset
        self.load_target = part.high_watermark  # everything an earlier leader committed
        self.skipped = 0  # records that did not decode (logged)
        self.closed = False
        self.snapshot_at = self.applied_offset  # the begin of the latest complete snapshot
        self.since_snapshot = 0  # records applied after it
        self.loaded_records = 0  # records the load applied (logged once loaded)
        # Set once a retention pass has rewritten every stale group's offsets since the load:
        # only then may the node's log retention delete this partition's old segments.
        self.refreshed = False
        self._load_logged = False
        self._applied_changed = asyncio.Event()
        self._gate: asyncio.Event | None = None  # set while a snapshot holds writes back
        self._writing = 0
        self._no_writers = asyncio.Event()
        self._no_writers.set()

    @property
    def loaded(self) -> bool:
        return self.applied_offset >= self.load_target

    def current(self) -> bool:
        """Whether this shard still speaks for its partition: the replica leads and serves
        in the epoch the shard was loaded for."""
        return (
            not self.closed
            and not self.part.closed
            and self.part.is_leader
            and self.part.driver.epoch == self.epoch
        )

    def close(self) -> None:
        self.closed = True
        self._notify()

    # -- applying ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Apply committed records as the HW moves, until the shard or its replica closes."""
        try:
            start = await asyncio.to_thread(_load_start, self.part, self.load_target)
            self.applied_offset = self.snapshot_at = start
            while not self.closed:
                event = self.part.hw_changed()
                await self._apply_committed()
                if self.part.closed:
                    return
                if self.applied_offset >= self.part.high_watermark:
                    await event.wait()
        except ReplogError as exc:  # the log went away under the read (deleted, closed)
            log(_log, "groups.shard_stopped", partition=self.partition, error=repr(exc))
        finally:
            self.close()

    async def _apply_committed(self) -> None:
        while not self.closed and self.applied_offset < self.part.high_watermark:
            try:
                # Read and decode off the event loop: a load may cover a long log, and the
                # loop also runs every replica of this node.
                batch = await asyncio.to_thread(_read_records, self.part, self.applied_offset)
            except OffsetOutOfRangeError:  # retention removed the start: skip to the log start
                self.applied_offset = max(self.applied_offset, self.part.log.log_start_offset)
                continue
            if not batch:
                return
            wall_ms = self._wall_ms()
            for offset, record in batch:
                if isinstance(record, records.UnknownRecordError):
                    self.skipped += 1
                    log(
                        _log,
                        "groups.record_skipped",
                        logging.WARNING,
                        partition=self.partition,
                        offset=offset,
                        error=str(record)[:200],
                    )
                elif record is not None:
                    self.groups.apply(record, wall_ms)
                    self.since_snapshot += 1
                    if isinstance(record, records.SnapshotEnd):
                        self.snapshot_at, self.since_snapshot = record.begin, 0
                if not self.loaded:
                    self.loaded_records += 1
                self.applied_offset = offset + 1
            self._notify()
            if self.loaded and not self._load_logged:
                self._load_logged = True
                log(
                    _log,
                    "groups.shard_loaded",
                    partition=self.partition,
                    records=self.loaded_records,
                    start=self.snapshot_at,
                    groups=len(self.groups.groups),
                )
            await asyncio.sleep(0)  # let other tasks run between chunks of a long load

    def _notify(self) -> None:
        event, self._applied_changed = self._applied_changed, asyncio.Event()
        event.set()

    # -- writing -----------------------------------------------------------------------------

    async def write(self, record: records.Record) -> None:
        """Append `record` (acks=all) and wait until it is applied here (or the shard ends:
        the record is committed all the same)."""
        while self._gate is not None:  # a snapshot is being written
            await self._gate.wait()
        self._writing += 1
        self._no_writers.clear()
        try:
            value = records.encode(record, self.snapshot_at)
            result = await self.part.append([value], Acks.ALL, self.timeout_s)
        finally:
            self._writing -= 1
            if not self._writing:
                self._no_writers.set()
        assert result is not None  # acks=all answers with offsets
        await self._wait_applied(result.last_offset)

    async def _wait_applied(self, last: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while self.applied_offset <= last and not self.closed:
            event = self._applied_changed
            remaining = deadline - loop.time()
            if remaining <= 0:
                return  # committed (acks=all) but not applied yet: durable, answer anyway
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)

    async def snapshot(self, topic_ids: Callable[[str], int]) -> None:
        """Restate every live offset (see the module docstring); writes wait meanwhile."""
        gate = self._gate = asyncio.Event()
        try:
            await asyncio.wait_for(self._no_writers.wait(), self.timeout_s)
            await self._wait_applied(self.part.log.log_end_offset - 1)
            if self.applied_offset < self.part.log.log_end_offset:
                # A record whose append timed out may still commit: a snapshot taken now
                # could miss it. Later.
                raise CoordinatorLoadingError("records still uncommitted: snapshot later")
            wall = self._wall_ms()
            values = [
                records.encode(records.Commit(name, wall, offsets), self.snapshot_at)
                for name in sorted(self.groups.groups)
                if (offsets := self.groups.live_offsets(name, topic_ids))
            ]
            begin = self.part.log.log_end_offset  # nothing else is appended meanwhile
            for i in range(0, len(values), SNAPSHOT_CHUNK_RECORDS):
                chunk = values[i : i + SNAPSHOT_CHUNK_RECORDS]
                result = await self.part.append(chunk, Acks.ALL, self.timeout_s)
                assert result is not None
                if i == 0:
                    begin = result.base_offset
            end = records.encode(records.SnapshotEnd(begin, wall), self.snapshot_at)
            result = await self.part.append([end], Acks.ALL, self.timeout_s)
            assert result is not None
            await self._wait_applied(result.last_offset)
            log(_log, "groups.snapshot", partition=self.partition, begin=begin, groups=len(values))
        finally:
            self._gate = None
            gate.set()


Decoded = records.Record | records.UnknownRecordError | None  # None: a control record


def _read_records(part: ReplicatedPartition, offset: int) -> list[tuple[int, Decoded]]:
    """Committed records from `offset` (up to READ_BYTES_MAX of frames), decoded."""
    data = part.log.read(offset, READ_BYTES_MAX)
    decoded = frames.decode(data)
    control = decoded.control or [False] * len(decoded)
    out: list[tuple[int, Decoded]] = []
    for o, value, is_control in zip(decoded.offsets, decoded.values, control, strict=True):
        if is_control:
            out.append((o, None))
            continue
        try:
            out.append((o, records.decode(value)))
        except records.UnknownRecordError as exc:
            out.append((o, exc))
    return out


def _load_start(part: ReplicatedPartition, end: int) -> int:
    """Where a load starts: the latest complete snapshot the log's last record names (its
    last data record below `end`, looking back past a few control records), else the log
    start."""
    log = part.log
    start = log.log_start_offset
    for offset in range(end - 1, max(start, end - LOOK_BACK_RECORDS) - 1, -1):
        decoded = frames.decode(log.read(offset, 1))
        if not len(decoded) or decoded.offsets[0] != offset:
            continue
        if decoded.control and decoded.control[0]:
            continue
        pointer = records.load_pointer(decoded.values[0])
        return pointer if pointer is not None and start <= pointer <= offset else start
    return start
