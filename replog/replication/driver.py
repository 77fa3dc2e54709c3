"""The asyncio driver of one partition replica: the replication core against real storage.

`ReplicaDriver` owns a `Replica` (pure core) and a `PartitionLog`, and performs the core's
outputs in order (see `outputs.py`): durable state files are written (fsync'd, in a thread)
before the next output, log appends and truncations go to the segment log, messages go to a
`Transport`, acks complete the futures of client appends. Inputs are serialised by one lock:
ticks (every `tick_ms`), messages delivered by the transport, client appends, and flush
progress (polled on each tick, reported at once after appends under flush=always).

Durable files in the partition directory, written atomically (`storage.checkpoint`):

    quorum-state    JSON {"epoch": int, "voted_for": int|null, "leader_id": int|null}
    epoch-history   JSON [[epoch, start_offset], ...]

The control record a new leader appends holds a `replog.v1.LeaderEpochMarker` protobuf.
This module does no network I/O: the gRPC transport lives in `replog.server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Protocol, TypeVar

from replog import frames
from replog.errors import AckTimeoutError, NotLeaderError, ReplogError, ShuttingDownError
from replog.replication.config import ReplicaConfig
from replog.replication.epochs import EpochStart
from replog.replication.messages import FetchResponse, Message, Records
from replog.replication.outputs import (
    AckCompleted,
    AckFailed,
    AckFailure,
    Acks,
    AppendControl,
    AppendFrames,
    AppendRecords,
    Output,
    PersistEpochHistory,
    PersistQuorumState,
    ResetLog,
    Send,
    SetHighWatermark,
    TruncateTo,
)
from replog.replication.replica import Replica, Role
from replog.replication.state import QuorumState
from replog.storage import FlushPolicy, PartitionLog, checkpoint

T = TypeVar("T")
QUORUM_STATE_FILE = "quorum-state"
EPOCH_HISTORY_FILE = "epoch-history"


class Transport(Protocol):
    def send(self, to: int, message: Message) -> None:
        """Best effort, never blocks: a lost message is the protocol's business."""


def load_quorum_state(directory: Path) -> QuorumState:
    raw = checkpoint.read_file(directory / QUORUM_STATE_FILE)
    if raw is None:
        return QuorumState()
    data = json.loads(raw)
    return QuorumState(int(data["epoch"]), data["voted_for"], data["leader_id"])


def load_epoch_history(directory: Path) -> list[EpochStart]:
    raw = checkpoint.read_file(directory / EPOCH_HISTORY_FILE)
    return [] if raw is None else [EpochStart(int(e), int(s)) for e, s in json.loads(raw)]


def encode_marker(epoch: int, leader_id: int, voters: Sequence[int]) -> bytes:
    from replog.v1 import replication_pb2

    marker = replication_pb2.LeaderEpochMarker(epoch=epoch, leader_id=leader_id, voters=voters)
    return bytes(marker.SerializeToString())


class ReplicaDriver:
    def __init__(
        self,
        log: PartitionLog,
        config: ReplicaConfig,
        transport: Transport,
        *,
        rng: random.Random | None = None,
        tick_ms: int = 50,
        fetch_bytes_max: int = 1024 * 1024,
        on_high_watermark: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log
        self.config = config
        self.transport = transport
        self.tick_ms = tick_ms
        self.fetch_bytes_max = fetch_bytes_max
        self._clock = clock
        self._on_hw = on_high_watermark
        self._lock = asyncio.Lock()
        self._acks: dict[int, asyncio.Future[tuple[int, int]]] = {}
        self._request_ids = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._rng = rng or random.Random()
        self.replica = self._new_replica()
        # Counters for metrics: elections started, leaderships won, truncations performed.
        self.elections = 0
        self.leaderships = 0
        self.truncations = 0
        self._seen = (self.replica.role, self.replica.epoch)

    # -- lifecycle -----------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def start(self) -> None:
        async with self._lock:
            await self._perform(self.replica.start())
            if self.config.voters == (self.config.replica_id,):  # nobody to wait for
                await self._perform(self.replica.campaign(self._now_ms()))
        self._task = asyncio.create_task(self._tick_loop(), name=f"replica-{self.log.topic}")

    async def close(self) -> None:
        """Stop ticking; fail waiting appends (the log itself is closed by its owner)."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for fut in self._acks.values():
            if not fut.done():
                fut.set_exception(ShuttingDownError("the replica is shutting down"))
        self._acks.clear()

    async def _tick_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.tick_ms / 1000)
            async with self._lock:
                outputs = self._flush_progress()
                outputs += self.replica.tick(self._now_ms())
                await self._perform(outputs)

    # -- inputs --------------------------------------------------------------------------

    async def deliver(self, message: Message) -> None:
        """A message from another replica (called by the transport)."""
        if self._closed:
            return
        async with self._lock:
            await self._perform(self.replica.receive(message, self._now_ms()))

    async def apply_retention(self, now_ms: int) -> int:
        """Retention for this replica's log (below its HW), under the replica's lock so that
        no fetch answer is being read from a segment as it goes; the core learns the new log
        start (it sends followers that ask for less to it). Returns segments deleted."""
        async with self._lock:
            deleted = await asyncio.to_thread(self.log.apply_retention, now_ms)
            if deleted:
                start = self.log.log_start_offset
                await self._perform(self.replica.log_start_advanced(start, self._now_ms()))
            return deleted

    async def campaign(self) -> None:
        async with self._lock:
            await self._perform(self.replica.campaign(self._now_ms()))

    async def append(
        self, values: Sequence[bytes], acks: Acks, timeout_s: float
    ) -> tuple[int, int]:
        """Append as leader; returns (base_offset, last_offset) once `acks` is satisfied."""
        if self._closed:
            raise ShuttingDownError("the replica is shutting down")
        request_id = next(self._request_ids)
        fut: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        self._acks[request_id] = fut
        async with self._lock:
            await self._perform(self.replica.append(request_id, values, acks, self._now_ms()))
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            raise AckTimeoutError(
                f"acks={acks.value} not reached within {timeout_s:.3f}s: the batch may still commit"
            ) from None
        finally:
            self._acks.pop(request_id, None)

    # -- state ---------------------------------------------------------------------------

    @property
    def role(self) -> Role:
        return self.replica.role

    @property
    def epoch(self) -> int:
        return self.replica.epoch

    @property
    def leader_id(self) -> int | None:
        return self.replica.leader_id

    def replica_status(self) -> list[tuple[int, int, int, int]]:
        """Leader only (else empty): (replica id, its LEO as acknowledged, lag in records,
        ms since its last fetch or -1), this replica included (lag 0, fetch age 0)."""
        if self.replica.role is not Role.LEADER:
            return []
        now = self._now_ms()
        leo = self.log.log_end_offset
        out = [(self.config.replica_id, leo, 0, 0)]
        for voter, (match, last) in sorted(self.replica.followers().items()):
            out.append((voter, match, max(0, leo - match), -1 if last is None else now - last))
        return sorted(out)

    # -- outputs -------------------------------------------------------------------------

    def _flush_progress(self) -> list[Output]:
        flushed = self.log.flushed_offset
        if flushed > self.replica.flushed_offset:
            return self.replica.flushed(flushed, self._now_ms())
        return []

    async def _perform(self, outputs: list[Output]) -> None:
        try:
            await self._perform_all(outputs)
        except ReplogError as exc:
            # A log operation failed (e.g. a full disk): the core's view of the log is now
            # wrong, so fail every waiting append and rebuild the core from what is on disk.
            for fut in self._acks.values():
                if not fut.done():
                    fut.set_exception(exc)
            self.replica = self._new_replica()
            await self._perform_all(self.replica.start())
        # The core changed role while computing `outputs`: compare with what was seen after
        # the previous batch (the role now is already the new one). A candidate that tries
        # again in a new epoch starts a new election.
        seen = (self.replica.role, self.replica.epoch)
        if seen != self._seen:
            changed_role = seen[0] is not self._seen[0]
            self._seen = seen
            if seen[0] is Role.CANDIDATE:
                self.elections += 1
            elif seen[0] is Role.LEADER and changed_role:
                self.leaderships += 1

    def _new_replica(self) -> Replica:
        directory = self.log.directory
        return Replica(
            self.config,
            self._rng,
            self._now_ms(),
            state=load_quorum_state(directory),
            history=load_epoch_history(directory),
            log_end_offset=self.log.log_end_offset,
            high_watermark=self.log.high_watermark,
            log_start_offset=self.log.log_start_offset,
        )

    async def _perform_all(self, outputs: list[Output]) -> None:
        queue = list(outputs)
        i = 0
        while i < len(queue):
            out = queue[i]
            i += 1
            if isinstance(out, Send):
                self.transport.send(out.to, self._fill(out.message))
            elif isinstance(out, PersistQuorumState):
                s = out.state
                data = {"epoch": s.epoch, "voted_for": s.voted_for, "leader_id": s.leader_id}
                await asyncio.to_thread(
                    checkpoint.write_atomic,
                    self.log.directory / QUORUM_STATE_FILE,
                    json.dumps(data).encode(),
                )
            elif isinstance(out, PersistEpochHistory):
                data_h = [[e.epoch, e.start_offset] for e in out.entries]
                await asyncio.to_thread(
                    checkpoint.write_atomic,
                    self.log.directory / EPOCH_HISTORY_FILE,
                    json.dumps(data_h).encode(),
                )
            elif isinstance(out, AppendRecords):
                result = await self._blocking(partial(self.log.append, out.values))
                assert result.base_offset == out.base_offset, (result, out.base_offset)
                queue += self._flush_progress()
            elif isinstance(out, AppendControl):
                m = out.marker
                value = encode_marker(m.epoch, m.leader_id, m.voters)
                result = await self._blocking(partial(self.log.append, [value], control=True))
                assert result.base_offset == out.offset, (result, out.offset)
                queue += self._flush_progress()
            elif isinstance(out, AppendFrames):
                await self._blocking(partial(self.log.append_frames, out.records.frames))
                queue += self._flush_progress()
            elif isinstance(out, TruncateTo):
                self.truncations += 1
                await asyncio.to_thread(self.log.truncate_to, out.offset)
            elif isinstance(out, ResetLog):
                await asyncio.to_thread(self.log.reset_to, out.offset)
            elif isinstance(out, SetHighWatermark):
                self.log.set_high_watermark(out.offset)
                if self._on_hw is not None:
                    self._on_hw(out.offset)
            elif isinstance(out, AckCompleted):
                self._resolve(out.request_id, (out.base_offset, out.last_offset), None)
            elif isinstance(out, AckFailed):
                self._resolve(out.request_id, None, self._failure(out))

    async def _blocking(self, fn: Callable[[], T]) -> T:
        """Run a log write: inline when it only reaches the page cache (cheaper than a
        thread hop), in a thread when it may fsync (flush=always)."""
        if self.log.config.flush is FlushPolicy.ALWAYS:
            return await asyncio.to_thread(fn)
        return fn()

    def _fill(self, message: Message) -> Message:
        """Put the raw frames of `[start, end)` (as much as fits) into a Records answer."""
        if not isinstance(message, FetchResponse) or not isinstance(message.result, Records):
            return message
        rec = message.result
        if rec.start_offset >= rec.end_offset:
            return message
        data = self.log.read_uncommitted(
            rec.start_offset, self.fetch_bytes_max, end_offset=rec.end_offset
        )
        end = frames.next_offset(data, rec.start_offset)
        return FetchResponse(
            message.epoch,
            message.leader_id,
            message.fetch_offset,
            message.last_fetched_epoch,
            rec.clipped(end, data),
        )

    def _failure(self, out: AckFailed) -> Exception:
        if out.failure is AckFailure.NOT_LEADER:
            return NotLeaderError(
                f"replica {self.config.replica_id} does not lead {self.log.topic}/"
                f"{self.log.partition}",
                leader_id=out.leader_id,
            )
        return AckTimeoutError(
            "leadership was lost before the batch committed: the outcome is unknown"
        )

    def _resolve(
        self, request_id: int, value: tuple[int, int] | None, error: Exception | None
    ) -> None:
        fut = self._acks.get(request_id)
        if fut is None or fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            assert value is not None
            fut.set_result(value)
