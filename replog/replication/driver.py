"""The asyncio driver of one partition replica: the replication core against real storage.

`ReplicaDriver` owns a `Replica` (pure core) and a `PartitionLog`.

**One owner.** A single task per replica (the *owner*, started through the injected
`spawn`) is the only code that calls the core and the only code that performs its outputs
(see `outputs.py`). Everything else submits an *input* to the owner's inbox and waits for
its result: ticks (when the core's next timer is due, `Replica.next_tick_ms`, at most
every `tick_ms`: the node's one `Ticker` wakes it), messages delivered by the transport,
client appends,
campaigns, retention, flush progress. gRPC asyncio cancels an RPC handler's task when its
client goes away or its deadline passes; a cancelled handler only stops *waiting*: its
input, once submitted, is processed and its outputs are performed exactly once, in order.
The owner's awaits (log writes and durable-state files in a thread under flush=always) are
therefore never cancellation points for the state machine: the owner is never cancelled,
`close()` asks it to stop between two inputs. An append's caller waits until its deadline,
which one timer per driver keeps for all callers (`_sweep`): past it the caller gets
`AckTimeoutError` and the append goes on.

**Group commit.** The owner takes every input waiting in its inbox at once, computes their
outputs and, under flush=always, performs them through `coalesce`: the appends of concurrent
client calls become one write and one fsync. Under the other flush policies each append is
its own write (in the same pass): with no fsync to save, one write of many batches costs
more per record than the writes it saves.

**When the log and the core disagree.** A `ReplogError` from a log operation (a full disk,
an I/O error) means the core's view of the log may be ahead of the disk: the remaining
outputs are dropped, every waiting append fails with that error, and the core is rebuilt
from what is on disk (`quorum-state`, `epoch-history`, the log's LEO and HW). Any other
exception (a broken invariant) ends the owner task with the exception: the process
supervisor turns that into a non-zero exit; callers waiting on the replica get
`ShuttingDownError`.

Durable files in the partition directory, written atomically (`storage.checkpoint`):

    quorum-state    JSON {"epoch": int, "voted_for": int|null, "leader_id": int|null}
    epoch-history   JSON [[epoch, start_offset], ...]
    membership-history  JSON [[offset, [voter, ...], [observer, ...]], ...] (missing: no
                    change in the log, the starting `ReplicaConfig` membership is in force;
                    files of versions before membership changes never have one)

The control record a new leader appends holds a `replog.v1.LeaderEpochMarker` protobuf.
A membership record (`Replica.change_membership`) holds 0x00 0x02, a big-endian u16
version (1), then a `replog.v1.MembershipChange` protobuf (`encode_membership`): the
leading 0x00 tells it from an epoch marker, 0x02 from a producer batch header (0x01).

**Membership.** `change_membership` goes through the owner like an append and returns the
offset of the committed membership record. The replicas this driver sends to are the
core's (`Replica.membership`): the transport must reach any replica id it is given (the
server's peer links reach every node of the cluster). `on_membership` is called by the
owner, after the outputs that changed it are performed, each time the current membership
changes (a record appended or fetched, or truncated away): the hook for a server that
hosts replicas of a partition on the nodes of its current membership.
This module does no network I/O: the gRPC transport lives in `replog.server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import random
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

from replog import frames
from replog.errors import (
    AckTimeoutError,
    CorruptDataError,
    DuplicateSequenceError,
    MembershipChangeBusyError,
    MembershipChangeRefusedError,
    NotLeaderError,
    OutOfOrderSequenceError,
    PartitionOfflineError,
    ProducerFencedError,
    ReplogError,
    ShuttingDownError,
    StorageError,
    StorageFullError,
    TooManyOpenFilesError,
)
from replog.replication.batch_ends import BatchEnds
from replog.replication.coalesce import coalesce
from replog.replication.config import ReplicaConfig
from replog.replication.durable import (
    EPOCH_HISTORY_FILE,
    MEMBERSHIP_HISTORY_FILE,
    MEMBERSHIP_RECORD_PREFIX,
    QUORUM_STATE_FILE,
    _write_state_file,
    decode_membership,
    encode_marker,
    encode_membership,
    encode_membership_history,
    encode_quorum_state,
    load_epoch_history,
    load_membership_history,
    load_quorum_state,
)
from replog.replication.membership import Membership
from replog.replication.messages import FetchRequest, FetchResponse, Message, Records
from replog.replication.outputs import (
    AckCompleted,
    AckFailed,
    AckFailure,
    Acks,
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
from replog.replication.producers import ProducerBatch, ProducerTable
from replog.replication.replica import Replica, Role
from replog.replication.state import QuorumState
from replog.replication.ticker import Ticker, Wakeup
from replog.storage import AppendResult, FlushPolicy, PartitionLog
from replog.storage.segment_log import storage_error
from replog.storage.space import DiskSpace

T = TypeVar("T")
_log = logging.getLogger("replog.replication")
# A producer whose newest batch on a partition is older than this is forgotten there (at
# the next retention pass): its next batch is accepted at any sequence (Kafka's
# transactional.id.expiration.ms is 7 days too).
PRODUCER_IDLE_MS = 7 * 24 * 3600 * 1000

# After a failed log operation (a full disk, no descriptor left): the first retry waits
# this long, each next one twice as long, up to the maximum (reset by a write that works).
RETRY_S_MIN = 0.1
RETRY_S_MAX = 5.0
# A follower that cannot write what it fetches (a full disk) fetches again this much later:
# well inside the election timeout, so its leader stays its leader and nobody campaigns.
FETCH_HOLD_S = 0.25

Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


class Transport(Protocol):
    def send(self, to: int, message: Message) -> None:
        """Best effort, never blocks: a lost message is the protocol's business."""


def _spawn_task(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    return asyncio.get_running_loop().create_task(coro, name=name)


def _observe(fut: asyncio.Future[Any]) -> None:
    """Done callback: an exception nobody awaits any more is not 'never retrieved'."""
    if not fut.cancelled():
        fut.exception()


# -- inputs (what callers submit to the owner) --------------------------------------------


@dataclass(slots=True)
class _Input:
    done: asyncio.Future[Any] | None = field(default=None, kw_only=True)


@dataclass(slots=True)
class _Waiting:
    """The caller of an append, waiting for its acks until `deadline` (loop time)."""

    fut: asyncio.Future[tuple[int, int]]
    deadline: float
    acks: Acks
    timeout_s: float


@dataclass(slots=True)
class _Start(_Input):
    pass


@dataclass(slots=True)
class _Deliver(_Input):
    message: Message


@dataclass(slots=True)
class _Append(_Input):
    request_id: int
    values: tuple[bytes, ...]
    acks: Acks
    producer: ProducerBatch | None = None
    timestamp_ms: int = 0


@dataclass(slots=True)
class _Campaign(_Input):
    pass


@dataclass(slots=True)
class _Retention(_Input):
    now_ms: int


@dataclass(slots=True)
class _Transfer(_Input):
    target: int


@dataclass(slots=True)
class _Repair(_Input):
    pass


@dataclass(slots=True)
class _ChangeMembership(_Input):
    request_id: int
    voters: tuple[int, ...]
    observers: tuple[int, ...]


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
        answer_bytes_max: int = 4 * 1024 * 1024 - 64 * 1024,
        on_high_watermark: Callable[[int], None] | None = None,
        on_membership: Callable[[Membership], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        spawn: Spawn | None = None,
        essential: bool = False,
    ) -> None:
        """`essential`: the metadata log. Its writes are small and are what leaves a full
        disk (a topic deletion), so they are made while the disk is full (the node's reserve
        is for them) instead of being refused, and its followers keep writing what they
        fetch."""
        self.essential = essential
        self.log = log
        self.config = config
        self.transport = transport
        self.tick_ms = tick_ms
        self.fetch_bytes_max = fetch_bytes_max
        # A fetch answer may exceed fetch_bytes_max up to this to carry one batch whole
        # (under the peers' gRPC message limit).
        self.answer_bytes_max = max(answer_bytes_max, fetch_bytes_max)
        self._batch_ends = BatchEnds()  # uncommitted batches' ends: where answers may end
        self._clock = clock
        self._on_hw = on_high_watermark
        self._on_membership = on_membership
        self._spawn = spawn or _spawn_task
        self._inbox: deque[_Input] = deque()
        # The owner waits on this future (None while it runs); `_wake` resolves it.
        self._wakeup: asyncio.Future[None] | None = None
        # The next tick, on the node's one ticker (none while the core has no timer due).
        self._ticker: Ticker | None = None
        self._tick_wakeup = Wakeup(self._tick_fired)
        self._tick_due = False
        self._acks: dict[int, _Waiting] = {}
        # One timer for every waiting append's deadline (the earliest), not one per append.
        self._sweep_timer: asyncio.TimerHandle | None = None
        self._sweep_at = 0.0
        self._request_ids = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._busy = False  # the owner is performing outputs (the core may be ahead)
        # Left by an append that took the owner's turn (`_append_here`) for the owner: the
        # outputs it could not perform without an await, or the failure of a log operation.
        self._handoff: list[Output] = []
        self._failed: ReplogError | None = None
        self._stopped_because: str | None = None
        # Environment faults of the disk (see `_recover`): the data directory's free space
        # (`storage.space`), the retry of a failed log operation, the offline state.
        # The node's view of its data directory once it keeps a reserve there (the node
        # enables it as it starts); until then, and for a log outside a node, this
        # replica's own.
        self._data_dir = Path(os.path.abspath(log.directory.parent.parent))
        self._own_space = DiskSpace(self._data_dir)
        self._retry_at = 0.0  # on `clock`: when the core may be rebuilt again
        self._retry_s = 0.0  # the last retry delay (doubles while failures go on)
        self._files_short_until = 0.0  # on `clock`: writes refused (no descriptor left)
        self._hold_until = 0.0  # on `clock`: fetched records not written (a failed write)
        self._offline: ReplogError | None = None
        self._rng = rng or random.Random()
        self.replica = self._new_replica()
        # Counters for metrics: elections started, leaderships won, truncations performed.
        self.elections = 0
        self.leaderships = 0
        self.truncations = 0
        self.rebuilds = 0  # the core was rebuilt from the log after a failed log operation
        self.repairs = 0  # the log was discarded and fetched again (corrupt data)
        self.log_writes = 0  # appends performed on the log (each one write, maybe an fsync)
        self.refused_writes = 0  # appends refused up front (full disk, no descriptors)
        self.held_fetches = 0  # fetched records not written (full disk), fetched again later
        self._seen = (self.replica.role, self.replica.epoch)
        self._membership_seen = self.replica.membership

    # -- lifecycle -----------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def start(self) -> None:
        """Start the owner task and perform the core's start-up outputs (and, in a replica
        set of one, its first election)."""
        assert self._task is None, "started twice"
        self.replica.producers = await self._io(self._scan_producers)
        name = f"replica-{self.log.topic}-{self.log.partition}"
        loop = asyncio.get_running_loop()

        def io_error_seen() -> None:
            loop.call_soon_threadsafe(self._io_error_seen)

        self.log.on_io_error = io_error_seen
        self._task = self._spawn(self._run(), name)
        await self._call(_Start())

    async def close(self) -> None:
        """Stop the owner between two inputs (never in the middle of performing one), then
        fail what is still waiting. The log itself is closed by its owner afterwards."""
        self._stopping = True
        self._wake()
        task = self._task
        if task is not None and not task.done():
            # Waiting for the task must not be cut short by a cancellation of the closer:
            # the log may only be closed once no output is being performed on it.
            await asyncio.shield(asyncio.wait([task]))
        self._fail_waiting(ShuttingDownError("the replica is shutting down"))

    @property
    def idle(self) -> bool:
        """No input waits and no output is being performed: the core's view of the log is
        exactly the log's (checked after every batch)."""
        return not (self._busy or self._inbox or self._handoff or self._failed)

    @property
    def stopped(self) -> bool:
        return self._stopping or self._stopped_because is not None

    # -- inputs --------------------------------------------------------------------------

    async def deliver(self, message: Message) -> None:
        """A message from another replica (called by the transport). Returns once the
        owner has handled it (backpressure for the sending stream); a cancelled caller
        does not stop its handling."""
        if self.stopped:
            return
        with contextlib.suppress(ShuttingDownError):  # lost, as on a dead node
            await self._call(_Deliver(message))

    async def campaign(self) -> None:
        await self._call(_Campaign())

    async def repair(self) -> bool:
        """Discard this replica's log (storage found a corrupt range in it) and fetch it all
        again from the leader, keeping the vote and epoch state. Followers only: returns
        False, changing nothing, while this replica leads (hand leadership over first).
        Like the loss of one replica's disk, which the quorum tolerates: the records this
        replica acknowledged are on a majority without it."""
        result: bool = await self._call(_Repair())
        return result

    async def transfer_leadership(self, target: int) -> None:
        """Start handing leadership to voter `target` (see `Replica.transfer_leadership`);
        returns once the owner has taken the request, not when the target leads."""
        await self._call(_Transfer(target))

    async def apply_retention(self, now_ms: int) -> int:
        """Retention for this replica's log (below its HW), performed by the owner so that
        no fetch answer is being read from a segment as it goes; the core learns the new log
        start (it sends followers that ask for less to it). Returns segments deleted."""
        result: int = await self._call(_Retention(now_ms))
        return result

    async def append(
        self,
        values: Sequence[bytes],
        acks: Acks,
        timeout_s: float,
        producer: ProducerBatch | None = None,
    ) -> tuple[int, int]:
        """Append as leader; returns (base_offset, last_offset) once `acks` is satisfied.
        A caller that is cancelled or times out leaves the append to the owner: it is
        performed (and may commit) all the same. With `producer`, a batch the log already
        holds is answered with its offsets instead of being appended again."""
        self._check_running()
        self._check_writable(sum(map(len, values)) + frames.HEADER_BYTES * len(values))
        request_id = next(self._request_ids)
        # The caller's own future, not the owner's: cancelling the caller cancels it, and
        # the owner, which answers only futures not done yet, goes on with the append all
        # the same. Its deadline is kept by the driver's one sweep timer (`_sweep`), which
        # fails it with AckTimeoutError: no shield, wait_for or timeout per append, each of
        # which costs an event-loop timer or hop.
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[int, int]] = loop.create_future()
        deadline = loop.time() + timeout_s
        self._acks[request_id] = _Waiting(fut, deadline, acks, timeout_s)
        if self._sweep_timer is None or deadline < self._sweep_at:
            self._arm_sweep(loop, deadline)
        try:
            now_ms = time.time_ns() // 1_000_000 if producer is not None else 0
            item = _Append(request_id, tuple(values), acks, producer, now_ms)
            if self._owner_parked():
                self._append_here(item, loop)
            else:
                self._submit(item)
            return await fut
        finally:
            self._acks.pop(request_id, None)
            if fut.done() and not fut.cancelled():
                fut.exception()  # answered as the caller left: not 'never retrieved'

    async def change_membership(
        self, voters: Sequence[int], observers: Sequence[int], timeout_s: float
    ) -> int:
        """As leader, make `voters` / `observers` the partition's membership (one voter
        added or removed at a time: see `Replica.change_membership`); returns the offset of
        the membership record once it is committed (-1: the starting membership already is
        this one). Refusals raise `MembershipChangeBusyError` (retry later) or
        `MembershipChangeRefusedError` (the request is wrong), with the core's reason;
        NOT_LEADER raises `NotLeaderError`. Like an append, a caller that is cancelled or
        times out (`AckTimeoutError`) leaves the change to the owner: it is appended all
        the same and may commit; retrying the same membership then waits for that record
        instead of appending another."""
        self._check_running()
        self._check_writable(frames.HEADER_BYTES + 256)
        request_id = next(self._request_ids)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[int, int]] = loop.create_future()
        deadline = loop.time() + timeout_s
        self._acks[request_id] = _Waiting(fut, deadline, Acks.ALL, timeout_s)
        if self._sweep_timer is None or deadline < self._sweep_at:
            self._arm_sweep(loop, deadline)
        try:
            self._submit(_ChangeMembership(request_id, tuple(voters), tuple(observers)))
            offset, _ = await fut
            return offset
        finally:
            self._acks.pop(request_id, None)
            if fut.done() and not fut.cancelled():
                fut.exception()

    def _arm_sweep(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
        self._sweep_at = deadline
        self._sweep_timer = loop.call_at(deadline, self._sweep)

    def _sweep(self) -> None:
        """Fail the waiting appends whose deadline has passed (the append itself goes on),
        then wait for the earliest deadline left. Touches only the callers' futures."""
        self._sweep_timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        earliest: float | None = None
        for waiting in self._acks.values():
            if waiting.fut.done():
                continue
            if waiting.deadline <= now:
                waiting.fut.set_exception(
                    AckTimeoutError(
                        f"acks={waiting.acks.value} not reached within "
                        f"{waiting.timeout_s:.3f}s: the batch may still commit"
                    )
                )
            elif earliest is None or waiting.deadline < earliest:
                earliest = waiting.deadline
        if earliest is not None:
            self._arm_sweep(loop, earliest)

    def _future(self) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_observe)
        return fut

    def _check_running(self) -> None:
        if self._offline is not None:
            raise self._offline_error()
        if self._stopped_because is not None:
            raise ShuttingDownError(f"the replica stopped: {self._stopped_because}")
        if self._stopping:
            raise ShuttingDownError("the replica is shutting down")

    def _offline_error(self) -> PartitionOfflineError:
        return PartitionOfflineError(
            f"the replica of {self.log.topic}/{self.log.partition} on this node is offline: "
            f"{self._offline}",
            topic=self.log.topic,
            partition=self.log.partition,
        )

    @property
    def space(self) -> DiskSpace:
        return DiskSpace.kept(self._data_dir) or self._own_space

    @property
    def offline(self) -> ReplogError | None:
        """The I/O error that took this replica offline (None: online)."""
        return self._offline

    def _writes_held(self) -> bool:
        """Whether a follower should not write what it fetches now: within the retry delay
        of a failed write (so a disk that stays full costs a fetch per delay, not a busy
        loop), or while the disk is full (except the metadata log: `essential`)."""
        if self._clock() < self._hold_until:
            return True
        return not self.essential and self.space.full

    def _check_writable(self, nbytes: int) -> None:
        """Refuse a write up front while it cannot be made (a full disk; no descriptor left,
        or the log's files cannot be opened): the core never sees it, so no leader loses
        its leadership to a rebuild over a write that was bound to fail."""
        where = f"{self.log.topic}/{self.log.partition}"
        if not self.essential and not self.space.room_for(nbytes):
            self.refused_writes += 1
            raise StorageFullError(
                f"{where}: the disk of {self.space.data_dir} is full; retry once space is freed",
                data_dir=self.space.data_dir,
            )
        if self._clock() < self._files_short_until:
            self.refused_writes += 1
            raise TooManyOpenFilesError(
                f"{where}: the node ran out of file descriptors; retry later", limit="open_files"
            )
        if self.log.parked:
            try:
                self.log.reopen()
            except TooManyOpenFilesError:
                self.refused_writes += 1
                raise

    def _submit(self, item: _Input) -> None:
        self._check_running()
        self._inbox.append(item)
        self._wake()

    def _wake(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    async def _call(self, item: _Input) -> Any:
        """Submit `item` and wait for the owner to handle it. Cancelling the caller
        cancels only the wait (the shield), never the handling."""
        item.done = self._future()
        self._submit(item)
        return await asyncio.shield(item.done)

    # -- the owner -----------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        self._ticker = Ticker.of(loop)
        self._schedule_tick()
        try:
            while not self._stopping and self._offline is None:
                retry = self._failed is not None and self._clock() >= self._retry_at
                if not (self._inbox or self._tick_due or self._handoff or retry):
                    self._wakeup = loop.create_future()
                    try:
                        await self._wakeup
                    finally:
                        self._wakeup = None
                    continue
                self._busy = True
                if self._failed is not None:
                    if retry:
                        failed, self._failed = self._failed, None
                        await self._retry_rebuild(failed)
                    if self._failed is not None or self._offline is not None:
                        self._wait_out_failure()  # the core is not the log's: no input
                        self._busy = False
                        self._schedule_tick()
                        continue
                if self._handoff:
                    handoff, self._handoff = self._handoff, []
                    await self._perform(handoff)
                if self._tick_due:
                    self._tick_due = False
                    await self._tick()
                if self._inbox and not self._stopping:
                    batch = list(self._inbox)
                    self._inbox.clear()
                    await self._handle(batch)
                self._busy = False
                self._schedule_tick()
        except BaseException as exc:
            reason = f"{type(exc).__name__}: {exc}"
            self._stopped_because = reason
            self._fail_waiting(ShuttingDownError(f"the replica stopped: {reason}"))
            if not isinstance(exc, asyncio.CancelledError):
                _log.critical(
                    "replica %s/%s owner task died: %s",
                    self.log.topic,
                    self.log.partition,
                    reason,
                    exc_info=exc,
                )
            raise
        finally:
            if self._ticker is not None:
                self._ticker.cancel(self._tick_wakeup)

    def _due_ms(self) -> int | None:
        """When the owner next has a tick to run (None: not until an input comes): the
        core's next timer, or the retry of a failed log operation."""
        if self._offline is not None or self._stopping:
            return None
        if self._failed is not None:
            return int(self._retry_at * 1000)
        return self.replica.next_tick_ms()

    def _schedule_tick(self) -> None:
        """After each pass of the owner: be woken when the next tick is due, no sooner
        than `tick_ms` from now (the most often a replica ever ticks)."""
        ticker = self._ticker
        if ticker is None:
            return
        due = self._due_ms()
        if due is None:
            ticker.cancel(self._tick_wakeup)
            return
        now = self._now_ms()
        delay_ms = max(due - now, self.tick_ms)
        ticker.schedule(self._tick_wakeup, ticker.loop.time() + delay_ms / 1000)

    def _tick_fired(self) -> None:
        """The ticker's call: tick if the core's timer is due (it may have moved later
        since this wake-up was armed: then be woken at the new time instead)."""
        due = self._due_ms()
        if due is None or self._ticker is None:
            return
        ahead_ms = due - self._now_ms()
        if ahead_ms > 0:
            self._ticker.schedule(self._tick_wakeup, self._ticker.loop.time() + ahead_ms / 1000)
            return
        self._tick_due = True
        self._wake()

    def _io_error_seen(self) -> None:
        """The log met an I/O error (`PartitionLog.on_io_error`, maybe from a thread that
        read it for a client): the owner takes the replica offline at once."""
        if not self.stopped:
            self._tick_due = True
            self._wake()

    def _wait_out_failure(self) -> None:
        """While the core cannot be rebuilt (a failed log operation, retried later), inputs
        are not given to it: messages are lost (as on a dead node), requests fail with the
        error, ticks only keep the retry going."""
        exc = self._failed if self._offline is None else self._offline_error()
        for item in self._inbox:
            if item.done is not None and not item.done.done():
                if isinstance(item, _Deliver):
                    item.done.set_result(None)
                else:
                    item.done.set_exception(exc or ShuttingDownError("the replica stopped"))
        self._inbox.clear()
        self._tick_due = False

    async def _tick(self) -> None:
        if self.log.io_error is not None:  # a read met an I/O error (`PartitionLog.io_error`)
            self._go_offline(self.log.io_error)
            return
        now = self._now_ms()
        await self._perform(self._flush_progress() + self.replica.tick(now))

    async def _handle(self, batch: list[_Input]) -> None:
        """Compute the outputs of every input of `batch` in order, perform them as one
        group, then answer the callers. Retention performs its own I/O first: it is the
        only input whose core call depends on the result of an output."""
        outputs: list[Output] = []
        answers: list[tuple[_Input, Any]] = []
        for item in batch:
            now = self._now_ms()
            if isinstance(item, _Retention):
                await self._perform(outputs)
                outputs = []
                deleted = await self._io(partial(self.log.apply_retention, item.now_ms))
                self.replica.producers.expire(time.time_ns() // 1_000_000, PRODUCER_IDLE_MS)
                if deleted:
                    start = self.log.log_start_offset
                    outputs += self.replica.log_start_advanced(start, now)
                answers.append((item, deleted))
                continue
            if isinstance(item, _Repair):
                await self._perform(outputs)
                outputs = []
                answers.append((item, await self._repair()))
                continue
            if isinstance(item, _Deliver):
                outputs += self.replica.receive(self._writable(item.message), now)
            elif isinstance(item, _Append):
                outputs += self._core_append(item, now)
            elif isinstance(item, _Start):
                outputs += self._start_outputs(now)
            elif isinstance(item, _Campaign):
                outputs += self.replica.campaign(now)
            elif isinstance(item, _Transfer):
                outputs += self.replica.transfer_leadership(item.target, now)
            elif isinstance(item, _ChangeMembership):
                outputs += self.replica.change_membership(
                    item.request_id, item.voters, item.observers, now
                )
            answers.append((item, None))
        await self._perform(outputs)
        for item, value in answers:
            if item.done is not None and not item.done.done():
                item.done.set_result(value)

    def _writable(self, message: Message) -> Message:
        """`message` as the core may take it: while this replica cannot write (a full disk,
        no descriptors), records fetched are cut off (the answer still counts as word from
        the leader, so nobody campaigns), and the next fetch waits (`FETCH_HOLD_S`)."""
        if not (isinstance(message, FetchResponse) and isinstance(message.result, Records)):
            return message
        rec = message.result
        if rec.end_offset == rec.start_offset or not self._writes_held():
            return message
        self.held_fetches += 1
        return FetchResponse(
            message.epoch,
            message.leader_id,
            message.fetch_offset,
            message.last_fetched_epoch,
            rec.clipped(rec.start_offset, b""),
        )

    async def _repair(self) -> bool:
        if self.replica.role is Role.LEADER:
            return False
        _log.warning(
            "replica %s/%s: discarding its log from %d to refetch it (corrupt data)",
            self.log.topic,
            self.log.partition,
            self.log.log_start_offset,
        )
        # First, durably: it must not vote until it holds again what it may have acknowledged
        # (QuorumState.vote_floor), or a vote from it could elect a leader without them.
        s, core = self.replica.quorum_state, self.replica
        former = (core.last_epoch, self.log.log_end_offset)
        floor_epoch, floor = max((s.vote_floor_epoch, s.vote_floor), former)
        floored = QuorumState(s.epoch, s.voted_for, s.leader_id, floor, floor_epoch)
        await self._durable(QUORUM_STATE_FILE, encode_quorum_state(floored))
        await self._io(partial(self.log.reset_to, self.log.log_start_offset))
        self.repairs += 1
        self.replica = self._new_replica()
        await self._perform(self.replica.start())
        return True

    def _start_outputs(self, now: int) -> list[Output]:
        outputs = self.replica.start()
        if self.replica.membership.voters == (self.config.replica_id,):  # nobody to wait for
            outputs += self.replica.campaign(now)
        return outputs

    def _fail_waiting(self, exc: Exception) -> None:
        for item in self._inbox:
            if item.done is not None and not item.done.done():
                item.done.set_exception(exc)
        self._inbox.clear()
        for waiting in self._acks.values():
            if not waiting.fut.done():
                waiting.fut.set_exception(exc)
        self._acks.clear()
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None

    # -- state ---------------------------------------------------------------------------

    @property
    def role(self) -> Role:
        """The core's role; an offline replica (`offline`) leads nothing any more."""
        return Role.FOLLOWER if self._offline is not None else self.replica.role

    @property
    def epoch(self) -> int:
        return self.replica.epoch

    @property
    def leader_id(self) -> int | None:
        return None if self._offline is not None else self.replica.leader_id

    @property
    def caught_up(self) -> bool:
        return self.replica.caught_up(self._now_ms())

    @property
    def serving(self) -> bool:
        """Leader with its own epoch committed and no transfer under way: see
        `Replica.serving`."""
        return self._offline is None and self.replica.serving

    @property
    def transferring_to(self) -> int | None:
        return self.replica.transferring_to

    @property
    def membership(self) -> Membership:
        """The current membership (the latest of the log, committed or not)."""
        return self.replica.membership

    @property
    def voted_for(self) -> int | None:
        """The candidate this replica voted for in the current epoch (None: no vote)."""
        return self.replica.quorum_state.voted_for

    @property
    def leader_serving(self) -> bool:
        """Follower whose leader's epoch is committed: see `Replica.leader_serving`."""
        return self.replica.leader_serving

    def replica_status(self) -> list[tuple[int, int, int, int]]:
        """Leader only (else empty): (replica id, its LEO as acknowledged, lag in records,
        ms since its last fetch or -1), this replica included (lag 0, fetch age 0)."""
        if self.role is not Role.LEADER:
            return []
        now = self._now_ms()
        leo = self.log.log_end_offset
        out = [(self.config.replica_id, leo, 0, 0)]
        for voter, (match, last) in sorted(self.replica.followers().items()):
            out.append((voter, match, max(0, leo - match), -1 if last is None else now - last))
        return sorted(out)

    # -- outputs (performed by the owner only) -------------------------------------------

    def _flush_progress(self) -> list[Output]:
        flushed = self.log.flushed_offset
        if flushed > self.replica.flushed_offset:
            return self.replica.flushed(flushed, self._now_ms())
        return []

    async def _perform(self, outputs: list[Output]) -> None:
        self._count_role_change()
        if not outputs:
            return
        try:
            # Merged writes only where they save fsyncs: elsewhere a write of many batches
            # costs more per record than the writes it saves (a buffer of hundreds of KB
            # is fresh memory each time: page faults; 2x per record in process with 4
            # concurrent appenders of 1000 x 100 B). Performing the outputs one by one has
            # the same effect (see `coalesce`).
            grouped = self.log.config.flush is FlushPolicy.ALWAYS
            await self._perform_all(coalesce(outputs) if grouped else outputs)
        except ReplogError as exc:
            # A log operation failed (e.g. a full disk): the core's view of the log may now
            # be ahead of the disk. Drop the remaining outputs, fail every waiting append
            # and rebuild the core from what is on disk (`_recover`).
            self._fail_acks(exc)
            await self._recover(exc)
            return
        self._check_in_step()
        self._report_membership()

    def _note_failure(self, exc: ReplogError) -> None:
        """What a failed log operation says about the environment. A full disk: the data
        directory is full (`DiskSpace`), writes are refused up front until it has room.
        No descriptor left: writes are refused up front for the retry delay. Another I/O
        error (EIO, ...): the replica goes offline. Each one is retried later, with a
        delay that doubles while they go on."""
        if isinstance(exc, StorageFullError):
            self.space.mark_full()
            # While the disk is full only the writes that keep replication safe are tried
            # (appends are refused up front): they get the reserve (`storage.space`).
            self.space.release_reserve()
        elif type(exc) is StorageError or self.log.io_error is not None:
            self._go_offline(exc)
            return
        self._retry_s = min(RETRY_S_MAX, max(RETRY_S_MIN, self._retry_s * 2))
        self._retry_at = self._hold_until = self._clock() + self._retry_s
        if isinstance(exc, TooManyOpenFilesError):
            self._files_short_until = self._retry_at

    def _go_offline(self, exc: ReplogError) -> None:
        """An I/O error on this replica's files: it stops (the node and its other partitions
        go on), every caller gets PARTITION_OFFLINE; the other replicas elect a leader."""
        if self._offline is not None:
            return
        self._offline = exc
        self._stopped_because = f"offline: {exc}"
        _log.error(
            "replica %s/%s is offline: an I/O error on its files: %s",
            self.log.topic,
            self.log.partition,
            exc,
        )
        self._fail_waiting(self._offline_error())
        self._wake()

    async def _recover(self, exc: ReplogError) -> None:
        self._note_failure(exc)
        if self._offline is None:
            await self._retry_rebuild(exc)

    async def _retry_rebuild(self, exc: ReplogError) -> None:
        """Rebuild the core from the log; if the disk refuses that too (the start-up repairs
        write), the owner tries again after the retry delay (`_failed`)."""
        try:
            await self._rebuild(exc)
        except ReplogError as again:
            _log.warning(
                "replica %s/%s: rebuilding its state failed (%s); retrying in %.1fs",
                self.log.topic,
                self.log.partition,
                again,
                self._retry_s,
            )
            self._note_failure(again)
            self._failed = again

    def _fail_acks(self, exc: ReplogError) -> None:
        _log.error(
            "replica %s/%s: a log operation failed: %s", self.log.topic, self.log.partition, exc
        )
        for waiting in self._acks.values():
            if not waiting.fut.done():
                waiting.fut.set_exception(exc)

    async def _rebuild(self, exc: ReplogError) -> None:
        """After a failed log operation (`_fail_acks` already ran): a new core from the log."""
        _log.warning(
            "replica %s/%s: rebuilding its state from the log (%s)",
            self.log.topic,
            self.log.partition,
            exc,
        )
        self.rebuilds += 1
        try:
            self.replica = self._new_replica()
        except OSError as err:  # reading the durable files (EMFILE, EIO)
            raise storage_error(err, f"read {self.log.directory}") from err
        self.replica.producers = await self._io(self._scan_producers)
        # No campaign here even in a replica set of one: its election timer starts one
        # later. Should the start-up repairs fail too, `_retry_rebuild` tries again later.
        await self._perform_all(self.replica.start())
        self._check_in_step()
        self._report_membership()

    # -- an append in the caller's task ----------------------------------------------------

    def _owner_parked(self) -> bool:
        """The owner waits with nothing to do, and an append's outputs need no await (no
        fsync: flush=always appends go through a thread, and merge). Then the caller may
        take the owner's turn for its append (`_append_here`)."""
        wakeup = self._wakeup
        return (
            wakeup is not None
            and not wakeup.done()
            and not self._inbox
            and not self._tick_due
            and not self._handoff
            and self._failed is None
            and self.log.config.flush is not FlushPolicy.ALWAYS
        )

    def _append_here(self, item: _Append, loop: asyncio.AbstractEventLoop) -> None:
        """The owner's turn for one append, taken by the caller while the owner is parked:
        the core's step and the log write happen here, with no await in between (so no
        cancellation can come between them, exactly as in the owner), which saves the two
        event-loop passes of a hand-over to the owner and back. What needs an await (none
        on this path today, but a core may ask for a durable write) and a failed log
        operation are left to the owner, which performs them before anything else."""
        self._busy = True
        try:
            outputs = self._core_append(item, self._now_ms())
            self._count_role_change()
            queue = list(outputs)
            i = 0
            try:
                while i < len(queue) and self._perform_now(queue[i], queue):
                    i += 1
            except ReplogError as exc:
                self._fail_acks(exc)
                self._note_failure(exc)
                self._retry_at = self._clock()  # the owner rebuilds at once
                self._failed = exc
                self._wake()
                return
            if i < len(queue):
                self._handoff = queue[i:]
                self._wake()
                return
            self._check_in_step()
            self._report_membership()
        finally:
            self._busy = False
        self._schedule_tick()

    def _core_append(self, item: _Append, now: int) -> list[Output]:
        return self.replica.append(
            item.request_id, item.values, item.acks, now, item.producer, item.timestamp_ms
        )

    def _report_membership(self) -> None:
        membership = self.replica.membership
        if membership != self._membership_seen:
            self._membership_seen = membership
            if self._on_membership is not None:
                self._on_membership(membership)

    def _count_role_change(self) -> None:
        """The core changed role while computing the outputs about to be performed: compare
        with what was seen before (the role now is already the new one). A candidate that
        tries again in a new epoch starts a new election."""
        seen = (self.replica.role, self.replica.epoch)
        if seen != self._seen:
            changed_role = seen[0] is not self._seen[0]
            self._seen = seen
            if seen[0] is Role.CANDIDATE:
                self.elections += 1
            elif seen[0] is Role.LEADER and changed_role:
                self.leaderships += 1

    def _check_in_step(self) -> None:
        """After every performed batch the core's view is exactly the log's."""
        core, log = self.replica, self.log
        assert core.log_end_offset == log.log_end_offset, (
            "core LEO ahead of or behind the log",
            core.log_end_offset,
            log.log_end_offset,
        )
        assert core.high_watermark == log.high_watermark, (
            "core HW differs from the log's",
            core.high_watermark,
            log.high_watermark,
        )

    def _scan_producers(self) -> ProducerTable:
        """The producer table of the log as it is on disk: every batch header from the log
        start to the LEO, read in `fetch_bytes_max` chunks (a thread: blocking I/O)."""
        table = ProducerTable()
        offset, end = self.log.log_start_offset, self.log.log_end_offset
        while offset < end:
            try:
                data = self.log.read_uncommitted(offset, self.fetch_bytes_max, end_offset=end)
            except CorruptDataError as exc:
                # The replica starts all the same: the repair loop refetches its log (the
                # table is rebuilt as it does); until then it knows the batches before here.
                _log.warning(
                    "replica %s/%s: producer state scan stops at %d: %s",
                    self.log.topic,
                    self.log.partition,
                    offset,
                    exc,
                )
                break
            if not data:
                break
            offset = frames.next_offset(data, offset)
            table.apply_frames(data, offset)
        return table

    def _new_replica(self) -> Replica:
        directory = self.log.directory
        return Replica(
            self.config,
            self._rng,
            self._now_ms(),
            state=load_quorum_state(directory),
            history=load_epoch_history(directory),
            memberships=load_membership_history(directory),
            log_end_offset=self.log.log_end_offset,
            high_watermark=self.log.high_watermark,
            log_start_offset=self.log.log_start_offset,
        )

    def _perform_now(self, out: Output, queue: list[Output]) -> bool:
        """Perform `out` if that needs no await (True; outputs it leads to are added to
        `queue`), else nothing (False): the outputs of an append, first, then the rest."""
        if isinstance(out, AppendRecords | AppendPieces):
            if self.log.config.flush is FlushPolicy.ALWAYS:
                return False  # may fsync: in a thread
            self.log_writes += 1
            self._appended(out, self._log_write(out)(), queue)
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
                await self._durable(QUORUM_STATE_FILE, encode_quorum_state(out.state))
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
                await self._write(partial(self.log.append_frames, out.records.frames))
                queue += self._flush_progress()
            elif isinstance(out, TruncateTo):
                self.truncations += 1
                self._batch_ends.truncated(out.offset)
                await self._io(partial(self.log.truncate_to, out.offset))
            elif isinstance(out, ResetLog):
                self._batch_ends.clear()
                await self._io(partial(self.log.reset_to, out.offset))

    async def _durable(self, name: str, data: bytes) -> None:
        path = self.log.directory / name
        await self._io(partial(_write_state_file, self.space, path, data))

    async def _write(self, fn: Callable[[], T]) -> T:
        """A log append: inline when it only reaches the page cache (cheaper than a thread
        hop), in a thread when it may fsync (flush=always)."""
        self.log_writes += 1
        if self.log.config.flush is FlushPolicy.ALWAYS:
            return await self._io(fn)
        return fn()

    async def _io(self, fn: Callable[[], T]) -> T:
        """Every blocking log or file operation of the owner goes through here (a thread,
        so that the event loop keeps serving). Tests hook it to cancel callers at each
        await of the perform path."""
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
        except (TooManyOpenFilesError, StorageError) as exc:
            # Not answered: the follower asks again; an I/O error takes this replica
            # offline at the next tick (`PartitionLog.io_error`).
            _log.warning(
                "replica %s/%s: not answering a fetch from %d: %s",
                self.log.topic,
                self.log.partition,
                rec.start_offset,
                exc,
            )
            return None
        except CorruptDataError as exc:
            _log.error(
                "replica %s/%s: not answering a fetch from %d: %s",
                self.log.topic,
                self.log.partition,
                rec.start_offset,
                exc,
            )
            return None
        end = frames.next_offset(data, rec.start_offset)
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
        if cut < reached:
            return self.log.read_uncommitted(start, self.fetch_bytes_max, end_offset=cut)
        if cut > reached:
            whole = self.log.read_uncommitted(start, self.answer_bytes_max, end_offset=cut)
            if frames.next_offset(whole, start) == cut:
                return whole
        return data

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


__all__ = [  # the durable files' names and codecs, from `durable`, for existing importers
    "EPOCH_HISTORY_FILE",
    "MEMBERSHIP_HISTORY_FILE",
    "MEMBERSHIP_RECORD_PREFIX",
    "QUORUM_STATE_FILE",
    "ReplicaDriver",
    "Spawn",
    "Transport",
    "decode_membership",
    "encode_marker",
    "encode_membership",
    "encode_membership_history",
    "encode_quorum_state",
    "load_epoch_history",
    "load_membership_history",
    "load_quorum_state",
]
