"""The outputs side of a replica's driver: performing the core's outputs on the log, the
durable files and the transport (the owner task only; see `driver.py`).

`Performer` is the base of `ReplicaDriver`: the state it uses is the driver's (declared
here, set by `ReplicaDriver.__init__`). Appends are written inline when they only reach
the page cache and in a thread when they may fsync (flush=always); fetch answers are
filled with the log's frames here (`_fill`), cut at batch ends above the HW.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache, partial
from pathlib import Path
from typing import Protocol, TypeVar

from replog import frames
from replog.errors import (
    AckTimeoutError,
    CorruptDataError,
    DuplicateSequenceError,
    MembershipChangeBusyError,
    MembershipChangeRefusedError,
    NotLeaderError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    StorageError,
    TooManyOpenFilesError,
)
from replog.replication.batch_ends import BatchEnds, whole_batches_end
from replog.replication.config import ReplicaConfig
from replog.replication.durable import (
    EPOCH_HISTORY_FILE,
    MEMBERSHIP_HISTORY_FILE,
    QUORUM_STATE_FILE,
    _write_state_file,
    durable_quorum_state,
    encode_marker,
    encode_membership,
    encode_membership_history,
    encode_quorum_state,
)
from replog.replication.inbox import Waiting
from replog.replication.membership import Membership
from replog.replication.messages import FetchRequest, FetchResponse, Message, Records
from replog.replication.outputs import (
    AckCompleted,
    AckFailed,
    AckFailure,
    AppendControl,
    AppendFrames,
    AppendPieces,
    AppendRecords,
    MembershipChange,
    Output,
    PersistEpochHistory,
    PersistMembershipHistory,
    PersistQuorumState,
    ResetLog,
    Send,
    SetHighWatermark,
    TruncateTo,
)
from replog.replication.producers import headers_in
from replog.replication.replica import Replica
from replog.replication.state import QuorumState
from replog.storage import AppendResult, FlushPolicy, PartitionLog
from replog.storage.space import DiskSpace

T = TypeVar("T")
_log = logging.getLogger("replog.replication")

# A follower that cannot write what it fetches (a full disk) fetches again this much later:
# well inside the election timeout, so its leader stays its leader and nobody campaigns.
FETCH_HOLD_S = 0.25

_MEMBERSHIP_BUSY = (
    AckFailure.EPOCH_NOT_COMMITTED,
    AckFailure.MEMBERSHIP_CHANGE_IN_PROGRESS,
    AckFailure.NOT_CAUGHT_UP,
)
_MEMBERSHIP_REFUSED = (
    AckFailure.INVALID_MEMBERSHIP,
    AckFailure.TOO_MANY_VOTER_CHANGES,
    AckFailure.LEADER_REMOVAL,
)


class Transport(Protocol):
    def send(self, to: int, message: Message) -> None:
        """Best effort, never blocks: a lost message is the protocol's business."""


class GroupFlush(Protocol):
    """A node's group flusher under flush=always (`server/partitions/flusher.py`)."""

    def request(self, log: PartitionLog, on_flushed: Callable[[], None]) -> None:
        """fsync `log` in the next pass (with every other log asking meanwhile), then call
        `on_flushed` on the event loop (when that fsync ended, whatever its outcome)."""

    def flushing(self, log: PartitionLog) -> bool:
        """Whether an fsync of `log` is under way."""


@cache
def _essential_pool() -> ThreadPoolExecutor:
    """The threads of the metadata log's blocking I/O (one per process, made on first use)."""
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="replog-meta-io")


class Performer:
    """Performs a replica's outputs (the owner task's I/O)."""

    # Under flush=always, the node's group flusher (None: each write fsyncs its own log).
    # With one, a write only reaches the page cache (`PartitionLog.flush_deferred`) and
    # asks the flusher; when its pass has fsynced the log, the owner's next pass tells the
    # core the flushed offset (`_flush_progress`), and only that moves HW and acks.
    group_flush: GroupFlush | None = None

    essential: bool
    log: PartitionLog
    config: ReplicaConfig
    transport: Transport
    replica: Replica
    fetch_bytes_max: int
    answer_bytes_max: int
    log_writes: int
    truncations: int
    _batch_ends: BatchEnds
    _clock: Callable[[], float]
    _on_hw: Callable[[int], None] | None
    _on_membership: Callable[[Membership], None] | None
    _acks: dict[int, Waiting]
    _stopping: bool
    _stopped_because: str | None
    _data_dir: Path
    _own_space: DiskSpace
    _retry_s: float
    _hold_until: float
    _rng: random.Random
    _tick_due: bool
    _wakeup: asyncio.Future[None] | None
    # The quorum state this driver last wrote (None: unknown, the next one is written).
    _quorum_written: QuorumState | None = None

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    @property
    def stopped(self) -> bool:
        return self._stopping or self._stopped_because is not None

    @property
    def space(self) -> DiskSpace:
        return DiskSpace.kept(self._data_dir) or self._own_space

    def _writes_held(self) -> bool:
        """Whether a follower should not write what it fetches now: within the retry delay
        of a failed write (so a disk that stays full costs a fetch per delay, not a busy
        loop), or while the disk is full (except the metadata log: `essential`)."""
        if self._clock() < self._hold_until:
            return True
        return not self.essential and self.space.full

    def _flush_progress(self) -> list[Output]:
        flushed = self.log.flushed_offset
        if flushed > self.replica.flushed_offset:
            return self.replica.flushed(flushed, self._now_ms())
        return []

    def _perform_now(self, out: Output, queue: list[Output]) -> bool:
        """Perform `out` if that needs no await (True; outputs it leads to are added to
        `queue`), else nothing (False): the outputs of an append, first, then the rest."""
        if isinstance(out, AppendRecords | AppendPieces):
            if not self._writes_inline():
                return False  # may fsync or wait for one: in a thread
            self.log_writes += 1
            self._appended(out, self._log_write(out)(), queue)
            self._ask_flush()
        elif isinstance(out, SetHighWatermark):
            self._batch_ends.committed(out.offset)
            self.log.set_high_watermark(out.offset)
            if self._on_hw is not None:
                self._on_hw(out.offset)
        elif isinstance(out, AckCompleted):
            self._resolve(out.request_id, (out.base_offset, out.last_offset), None)
        elif isinstance(out, Send):
            message = self._fill(out.message)
            if message is None:
                pass
            elif isinstance(message, FetchRequest) and self._writes_held():
                loop = asyncio.get_running_loop()  # fetch again later (a full disk)
                loop.call_later(FETCH_HOLD_S, self._send_late, out.to, message)
            else:
                self.transport.send(out.to, message)
        elif isinstance(out, AckFailed):
            self._resolve(out.request_id, None, self._failure(out))
        else:
            return False
        return True

    def _send_late(self, to: int, message: Message) -> None:
        if not self.stopped:
            self.transport.send(to, message)

    def _log_write(self, out: AppendRecords | AppendPieces) -> Callable[[], AppendResult]:
        """The log write of an append output (a batch, or batches with producer headers)."""
        if isinstance(out, AppendRecords) and out.header is None:
            return partial(self.log.append, out.values)
        batches = out.pieces if isinstance(out, AppendPieces) else (out,)
        pieces = [(None if b.header is None else b.header.encode(), b.values) for b in batches]
        return partial(self.log.append_pieces, pieces)

    def _appended(
        self, out: AppendRecords | AppendPieces, result: AppendResult, queue: list[Output]
    ) -> None:
        assert result.base_offset == out.base_offset, (result, out.base_offset)
        self._retry_s = 0.0  # writes work again
        end = out.base_offset
        for b in out.pieces if isinstance(out, AppendPieces) else (out,):
            end += b.frame_count
            self._batch_ends.appended(end)
        queue += self._flush_progress()

    async def _perform_all(self, outputs: list[Output]) -> None:
        queue = list(outputs)
        i = 0
        while i < len(queue):
            out = queue[i]
            i += 1
            if self._perform_now(out, queue):
                continue
            if isinstance(out, AppendRecords | AppendPieces):  # flush=always
                self._appended(out, await self._write(self._log_write(out)), queue)
            elif isinstance(out, PersistQuorumState):
                if i < len(queue) and isinstance(queue[i], PersistQuorumState):
                    continue  # the next one supersedes it, and nothing comes in between
                await self._persist_quorum_state(out.state)
            elif isinstance(out, PersistEpochHistory):
                data_h = [[e.epoch, e.start_offset] for e in out.entries]
                await self._durable(EPOCH_HISTORY_FILE, json.dumps(data_h).encode())
            elif isinstance(out, PersistMembershipHistory):
                data_m = encode_membership_history(out.entries)
                await self._durable(MEMBERSHIP_HISTORY_FILE, data_m)
            elif isinstance(out, AppendControl):
                m = out.marker
                if isinstance(m, MembershipChange):
                    value = encode_membership(m.voters, m.observers)
                else:
                    value = encode_marker(m.epoch, m.leader_id, m.voters)
                result = await self._write(partial(self.log.append, [value], control=True))
                assert result.base_offset == out.offset, (result, out.offset)
                self._batch_ends.appended(out.offset + 1)
                queue += self._flush_progress()
            elif isinstance(out, AppendFrames):
                rec = out.records  # (offset gaps allowed: a range its leader compacted)
                await self._write(
                    partial(self.log.append_frames, rec.frames, end_offset=rec.end_offset)
                )
                queue += self._flush_progress()
            elif isinstance(out, TruncateTo):
                self.truncations += 1
                self._batch_ends.truncated(out.offset)
                await self._io(partial(self.log.truncate_to, out.offset))
            elif isinstance(out, ResetLog):
                self._batch_ends.clear()
                await self._io(partial(self.log.reset_to, out.offset))

    async def _persist_quorum_state(self, state: QuorumState) -> None:
        """Write `quorum-state` unless its durable form is what was last written here
        (`durable_quorum_state`)."""
        form = durable_quorum_state(state, self.config.replica_id)
        if form == self._quorum_written:
            return
        self._quorum_written = None  # unknown until the write succeeded
        await self._durable(QUORUM_STATE_FILE, encode_quorum_state(form))
        self._quorum_written = form

    async def _durable(self, name: str, data: bytes) -> None:
        path = self.log.directory / name
        await self._io(partial(_write_state_file, self.space, path, data))

    async def _write(self, fn: Callable[[], T]) -> T:
        """A log append: inline when it only reaches the page cache (cheaper than a thread
        hop), in a thread when it may fsync or wait for one (`_writes_inline`); with the
        group flusher, the log's fsync is asked for."""
        self.log_writes += 1
        if self._writes_inline():
            result = fn()
        else:
            result = await self._io(fn)
        self._ask_flush()
        return result

    def _writes_inline(self) -> bool:
        """Whether a log write may be made in the event loop: it never fsyncs (flush is
        not `always`), or the group flusher fsyncs the log and is not fsyncing it now (the
        flusher starts one only from the event loop, so none starts before this write is
        done; a write during an fsync goes to a thread: the fsync no longer holds the
        log's lock, but the write may wait on a page it is writing back)."""
        if self.log.config.flush is not FlushPolicy.ALWAYS:
            return True
        flusher = self.group_flush
        return flusher is not None and not flusher.flushing(self.log)

    def _appends_held(self) -> bool:
        """Whether client appends wait in the inbox now: the group flusher fsyncs this log
        (outside the log's lock). The appends that come meanwhile are written together
        after it, as they would be behind an fsync the owner made itself, instead of one
        by one in threads during it (each write then a thread hop, and each may wait on
        the page the fsync is writing back); the next fsync covers them all anyway."""
        flusher = self.group_flush
        return flusher is not None and flusher.flushing(self.log)

    def _ask_flush(self) -> None:
        if self.group_flush is not None and self.log.config.flush is FlushPolicy.ALWAYS:
            self.group_flush.request(self.log, self._flushed_by_group)

    def _flushed_by_group(self) -> None:
        """The group flusher's fsync of this log ended (done, or failed: it is asked for
        again, or the log went offline): the owner's next pass reports the flushed offset
        to the core (`_tick` starts with `_flush_progress`) and handles the appends held
        meanwhile (`_appends_held`)."""
        if not self.stopped:
            self._tick_due = True
            self._wake()

    def _wake(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    async def _io(self, fn: Callable[[], T]) -> T:
        """Every blocking log or file operation of the owner goes through here (a thread,
        so that the event loop keeps serving). Tests hook it to cancel callers at each
        await of the perform path. The metadata log's (`essential`) run on threads of their
        own: in an election storm hundreds of data partitions' quorum-state fsyncs fill the
        loop's default executor, and the metadata log's votes must not wait behind them."""
        if self.essential:
            context = contextvars.copy_context()  # (as `asyncio.to_thread` does)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(_essential_pool(), partial(context.run, fn))
        return await asyncio.to_thread(fn)

    def _fill(self, message: Message) -> Message | None:
        """Put the raw frames of `[start, end)` (as much as fits) into a Records answer.
        None (send nothing) when storage refuses the range as corrupt: the follower asks
        again after its fetch retry, and the node's repair loop
        (`server/partitions/repair.py`), which sees the range in `log.corrupt_ranges()`, hands
        leadership to a healthy voter. Not a failed log operation: the core's view of the log
        is still the log's."""
        if not isinstance(message, FetchResponse) or not isinstance(message.result, Records):
            return message
        rec = message.result
        if rec.start_offset >= rec.end_offset:
            return message
        try:
            data = self._read_batches(rec.start_offset, rec.end_offset)
        except (TooManyOpenFilesError, StorageError, CorruptDataError) as exc:
            # Not answered: the follower asks again; an I/O error takes this replica
            # offline at the next tick (`PartitionLog.io_error`), corrupt data is repaired.
            _log.log(
                logging.ERROR if isinstance(exc, CorruptDataError) else logging.WARNING,
                "replica %s/%s: not answering a fetch from %d: %s",
                self.log.topic,
                self.log.partition,
                rec.start_offset,
                exc,
            )
            return None
        end = self.log.reached(data, rec.start_offset, rec.end_offset)  # (past a gap)
        return FetchResponse(
            message.epoch,
            message.leader_id,
            message.fetch_offset,
            message.last_fetched_epoch,
            rec.clipped(end, data),
        )

    def _read_batches(self, start: int, end: int) -> bytes:
        """Frames from `start`, about `fetch_bytes_max` of them, ending above the HW only at
        a batch boundary (`batch_ends`): back to the last one the read reached, or on to the
        end of a batch larger than the read (up to `answer_bytes_max`; past that the batch is
        sent in parts, as before)."""
        data = self.log.read_uncommitted(start, self.fetch_bytes_max, end_offset=end)
        reached = frames.next_offset(data, start)
        cut = self._batch_ends.cut(start, reached, end, self.log.high_watermark)
        if cut != reached:
            data = self._read_to(start, cut, data)
        got = frames.next_offset(data, start)
        if got < end and got > self.log.high_watermark and not self._batch_ends.known(got):
            # no boundary known here (an inherited tail): end between idempotent batches
            found = ((o, h.record_count) for o, h in headers_in(data))
            data = self._read_to(start, whole_batches_end(found, start, got), data)
        return data

    def _read_to(self, start: int, end: int, data: bytes) -> bytes:
        """The frames of `[start, end)`: `data` (from `start`) cut short, or read on up to
        `answer_bytes_max` (`data` itself when that does not reach `end`)."""
        if end < frames.next_offset(data, start):
            return self.log.read_uncommitted(start, self.fetch_bytes_max, end_offset=end)
        whole = self.log.read_uncommitted(start, self.answer_bytes_max, end_offset=end)
        return whole if frames.next_offset(whole, start) == end else data

    def _failure(self, out: AckFailed) -> Exception:
        where = f"{self.log.topic}/{self.log.partition}"
        if out.failure is AckFailure.PRODUCER_FENCED:
            return ProducerFencedError(
                f"a newer epoch ({out.detail}) of this producer writes to {where}",
                producer_epoch=out.detail,
            )
        if out.failure is AckFailure.OUT_OF_ORDER_SEQUENCE:
            return OutOfOrderSequenceError(
                f"{where} expects sequence {out.detail} next from this producer",
                expected_sequence=out.detail,
            )
        if out.failure is AckFailure.DUPLICATE_SEQUENCE:
            return DuplicateSequenceError(
                f"{where} already holds this batch (too old for its offsets to be known)"
            )
        if out.failure in _MEMBERSHIP_BUSY:
            return MembershipChangeBusyError(
                f"{where}: membership change refused: {out.failure.value}",
                refusal=out.failure.value,
            )
        if out.failure in _MEMBERSHIP_REFUSED:
            return MembershipChangeRefusedError(
                f"{where}: membership change refused: {out.failure.value}",
                refusal=out.failure.value,
            )
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
        waiting = self._acks.get(request_id)
        if waiting is None or waiting.fut.done():
            return
        fut = waiting.fut
        if error is not None:
            fut.set_exception(error)
        else:
            assert value is not None
            fut.set_result(value)
