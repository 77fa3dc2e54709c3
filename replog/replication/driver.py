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

Its parts: the inputs in `inbox.py`, the outputs performed in `performing.py`, failed log
operations and the offline state in `faults.py` (both bases of `ReplicaDriver`), the
node's one timer in `ticker.py`; this module is the owner task and the callers' side.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from replog import frames
from replog.errors import (
    AckTimeoutError,
    ReplogError,
    ShuttingDownError,
)
from replog.replication.batch_ends import BatchEnds
from replog.replication.coalesce import coalesce
from replog.replication.config import ReplicaConfig
from replog.replication.durable import (
    EPOCH_HISTORY_FILE,
    MEMBERSHIP_HISTORY_FILE,
    MEMBERSHIP_RECORD_PREFIX,
    QUORUM_STATE_FILE,
    decode_membership,
    encode_marker,
    encode_membership,
    encode_membership_history,
    encode_quorum_state,
    load_epoch_history,
    load_membership_history,
    load_quorum_state,
)
from replog.replication.inbox import (
    Append,
    Campaign,
    ChangeMembership,
    Deliver,
    Input,
    Repair,
    Retention,
    Start,
    Transfer,
    Waiting,
    observe,
)
from replog.replication.membership import Membership
from replog.replication.messages import FetchResponse, Message, Records
from replog.replication.outputs import (
    Acks,
    Output,
)
from replog.replication.performing import Transport
from replog.replication.producers import ProducerBatch
from replog.replication.replica import Role
from replog.replication.state import QuorumState
from replog.replication.ticker import Ticker, Wakeup
from replog.replication.timing import Timing
from replog.storage import FlushPolicy, PartitionLog
from replog.storage.space import DiskSpace

T = TypeVar("T")
_log = logging.getLogger("replog.replication")
# A producer whose newest batch on a partition is older than this is forgotten there (at
# the next retention pass): its next batch is accepted at any sequence (Kafka's
# transactional.id.expiration.ms is 7 days too).
PRODUCER_IDLE_MS = 7 * 24 * 3600 * 1000
# A clean close writes a producer-state snapshot when the next start would otherwise scan at
# least this many records past the newest one (a segment roll always writes one).
SNAPSHOT_CLOSE_RECORDS_MIN = 1000

Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


def _spawn_task(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    return asyncio.get_running_loop().create_task(coro, name=name)


class ReplicaDriver(Timing):
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
        snapshot_close_records_min: int = SNAPSHOT_CLOSE_RECORDS_MIN,
    ) -> None:
        """`essential`: the metadata log. Its writes are small and are what leaves a full
        disk (a topic deletion), so they are made while the disk is full (the node's reserve
        is for them) instead of being refused, and its followers keep writing what they
        fetch."""
        self.essential = essential
        self.snapshot_close_records_min = snapshot_close_records_min
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
        self._inbox: deque[Input] = deque()
        # The owner waits on this future (None while it runs); `_wake` resolves it.
        self._wakeup: asyncio.Future[None] | None = None
        # The next tick, on the node's one ticker (none while the core has no timer due).
        self._ticker: Ticker | None = None
        self._tick_wakeup = Wakeup(self._tick_fired)
        self._tick_due = False
        self._init_liveness(transport)
        self._acks: dict[int, Waiting] = {}
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
        # Disk faults (`_recover`): free space (`storage.space`: the node's view once it keeps
        # a reserve there; until then, and for a log outside a node, this replica's own), the
        # retry of a failed log operation, the offline state.
        self._data_dir = Path(os.path.abspath(log.directory.parent.parent))
        self._own_space = DiskSpace(self._data_dir)
        self._retry_at = 0.0  # on `clock`: when the core may be rebuilt again
        self._retry_s = 0.0  # the last retry delay (doubles while failures go on)
        self._files_short_until = 0.0  # on `clock`: writes refused (no descriptor left)
        self._hold_until = 0.0  # on `clock`: fetched records not written (a failed write)
        self._offline: ReplogError | None = None
        self._rng = rng or random.Random()
        self.replica = self._new_replica()
        self._init_counters()
        self._seen = (self.replica.role, self.replica.epoch)
        self._membership_seen = self.replica.membership

    def _init_counters(self) -> None:
        # Counters for metrics: elections started, leaderships won, truncations performed.
        self.elections = 0
        self.leaderships = 0
        self.truncations = 0
        self.rebuilds = 0  # the core was rebuilt from the log after a failed log operation
        self.repairs = 0  # the log was discarded and fetched again (corrupt data)
        self.log_writes = 0  # appends performed on the log (each one write, maybe an fsync)
        self.refused_writes = 0  # appends refused up front (full disk, no descriptors)
        self.held_fetches = 0  # fetched records not written (full disk), fetched again later
        self.snapshots_written = 0  # producer-state snapshots written (`_write_snapshot`)
        # Producer-state snapshots: the offset of the newest (or where the start's scan
        # began), the active segment's base offset when it was written (a roll makes the
        # next one due), and whether the table was loaded from the log at all.
        self._snapshot_offset = 0
        self._snapshot_base = -1
        self._producers_loaded = False

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the owner task and perform the core's start-up outputs (and, in a replica
        set of one, its first election)."""
        assert self._task is None, "started twice"
        await self._load_producers()
        name = f"replica-{self.log.topic}-{self.log.partition}"
        loop = asyncio.get_running_loop()

        def io_error_seen() -> None:
            loop.call_soon_threadsafe(self._io_error_seen)

        self.log.on_io_error = io_error_seen
        self._task = self._spawn(self._run(), name)
        await self._call(Start())

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
        if self._snapshot_at_close():
            await asyncio.shield(self._write_snapshot())

    @property
    def idle(self) -> bool:
        """No input waits and no output is being performed: the core's view of the log is
        exactly the log's (checked after every batch)."""
        return not (self._busy or self._inbox or self._handoff or self._failed)

    # -- inputs --------------------------------------------------------------------------

    def post(self, message: Message) -> asyncio.Future[None]:
        """Hand a message from another replica to the owner (the transport's call: no
        task, no coroutine per message). The future is done once the owner has handled it
        (backpressure for the sending stream), or at once, or when the owner stops, if the
        replica is stopping or stopped: the message is lost, as on a dead node. It fails
        only with the error of a replica taken offline. Cancelling the future cancels the
        wait, never the handling."""
        fut: asyncio.Future[None] = self._future()
        try:
            self._check_running()
        except ShuttingDownError:
            fut.set_result(None)
            return fut
        except ReplogError as exc:  # offline (`_offline_error`)
            fut.set_exception(exc)
            return fut
        item = Deliver(message)
        item.done = fut
        self._inbox.append(item)
        self._wake()
        return fut

    async def deliver(self, message: Message) -> None:
        """`post`, waited for: returns once the owner has handled the message (or lost it,
        stopping); a cancelled caller does not stop its handling."""
        await self.post(message)

    async def campaign(self) -> None:
        await self._call(Campaign())

    async def repair(self) -> bool:
        """Discard this replica's log (storage found a corrupt range in it) and fetch it all
        again from the leader, keeping the vote and epoch state. Followers only: returns
        False, changing nothing, while this replica leads (hand leadership over first).
        Like the loss of one replica's disk, which the quorum tolerates: the records this
        replica acknowledged are on a majority without it."""
        result: bool = await self._call(Repair())
        return result

    async def transfer_leadership(self, target: int) -> None:
        """Start handing leadership to voter `target` (see `Replica.transfer_leadership`);
        returns once the owner has taken the request, not when the target leads."""
        await self._call(Transfer(target))

    async def apply_retention(self, now_ms: int) -> int:
        """Retention for this replica's log (below its HW), performed by the owner so that
        no fetch answer is being read from a segment as it goes; the core learns the new log
        start (it sends followers that ask for less to it). Returns segments deleted."""
        result: int = await self._call(Retention(now_ms))
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
        self._acks[request_id] = Waiting(fut, deadline, acks, timeout_s)
        if self._sweep_timer is None or deadline < self._sweep_at:
            self._arm_sweep(loop, deadline)
        try:
            now_ms = time.time_ns() // 1_000_000 if producer is not None else 0
            item = Append(request_id, tuple(values), acks, producer, now_ms)
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
        self._acks[request_id] = Waiting(fut, deadline, Acks.ALL, timeout_s)
        if self._sweep_timer is None or deadline < self._sweep_at:
            self._arm_sweep(loop, deadline)
        try:
            self._submit(ChangeMembership(request_id, tuple(voters), tuple(observers)))
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
        fut.add_done_callback(observe)
        return fut

    def _check_running(self) -> None:
        if self._offline is not None:
            raise self._offline_error()
        if self._stopped_because is not None:
            raise ShuttingDownError(f"the replica stopped: {self._stopped_because}")
        if self._stopping:
            raise ShuttingDownError("the replica is shutting down")

    def _submit(self, item: Input) -> None:
        self._check_running()
        self._inbox.append(item)
        self._wake()

    async def _call(self, item: Input) -> Any:
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
                snapshot = self._snapshot_due()
                ready = self._inbox_ready()
                if not (ready or self._tick_due or self._handoff or retry or snapshot):
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
                    batch = self._take_inbox()
                    if batch:
                        await self._handle(batch)
                if self._snapshot_due():
                    await self._write_snapshot()
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
            self._watch_liveness(False)

    def _inbox_ready(self) -> bool:
        """Whether the inbox holds an input to handle now (`_take_inbox`)."""
        inbox = self._inbox
        if not inbox or not self._appends_held():
            return bool(inbox)
        return any(not isinstance(item, Append) for item in inbox)

    def _take_inbox(self) -> list[Input]:
        """Every input waiting, except client appends while the group flusher fsyncs this
        log (`_appends_held`): those stay in the inbox, in their order, for the pass after
        the fsync (the flusher's end wakes the owner), which writes them together."""
        inbox = self._inbox
        if not self._appends_held():
            batch = list(inbox)
            inbox.clear()
            return batch
        batch = [item for item in inbox if not isinstance(item, Append)]
        if batch:
            kept = [item for item in inbox if isinstance(item, Append)]
            inbox.clear()
            inbox.extend(kept)
        return batch

    def _io_error_seen(self) -> None:
        """The log met an I/O error (`PartitionLog.on_io_error`, maybe from a thread that
        read it for a client): the owner takes the replica offline at once."""
        if not self.stopped:
            self._tick_due = True
            self._wake()

    async def _tick(self) -> None:
        if self.log.io_error is not None:  # a read met an I/O error (`PartitionLog.io_error`)
            self._go_offline(self.log.io_error)
            return
        now = self._now_ms()
        outputs = self._flush_progress() + self._woken_outputs(now)
        self._within_campaign_budget(now)
        await self._perform(outputs + self.replica.tick(now))

    async def _handle(self, batch: list[Input]) -> None:
        """Compute the outputs of every input of `batch` in order, perform them as one
        group, then answer the callers. Retention performs its own I/O first: it is the
        only input whose core call depends on the result of an output."""
        outputs: list[Output] = []
        answers: list[tuple[Input, Any]] = []
        for item in batch:
            now = self._now_ms()
            if isinstance(item, Retention):
                await self._perform(outputs)
                outputs = []
                deleted = await self._io(partial(self.log.apply_retention, item.now_ms))
                self.replica.producers.expire(time.time_ns() // 1_000_000, PRODUCER_IDLE_MS)
                if deleted:
                    start = self.log.log_start_offset
                    outputs += self.replica.log_start_advanced(start, now)
                answers.append((item, deleted))
                continue
            if isinstance(item, Repair):
                await self._perform(outputs)
                outputs = []
                answers.append((item, await self._repair()))
                continue
            if isinstance(item, Deliver):
                outputs += self.replica.receive(self._writable(item.message), now)
            elif isinstance(item, Append):
                outputs += self._core_append(item, now)
            elif isinstance(item, Start):
                outputs += self._start_outputs(now)
            elif isinstance(item, Campaign):
                outputs += self.replica.campaign(now)
            elif isinstance(item, Transfer):
                outputs += self.replica.transfer_leadership(item.target, now)
            elif isinstance(item, ChangeMembership):
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
        await self._persist_quorum_state(floored)
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
        ms since its last fetch or -1; 0 for a fetch held quietly now), this replica
        included (lag 0, fetch age 0)."""
        if self.role is not Role.LEADER:
            return []
        now = self._now_ms()
        leo = self.log.log_end_offset
        out = [(self.config.replica_id, leo, 0, 0)]
        held = self.replica.held_quietly()  # a fetch held now is as fresh as can be
        for voter, (match, last) in sorted(self.replica.followers().items()):
            ago = 0 if voter in held else (-1 if last is None else now - last)
            out.append((voter, match, max(0, leo - match), ago))
        return sorted(out)

    # -- outputs (performed by the owner only) -------------------------------------------

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
            and self._writes_inline()
        )

    def _append_here(self, item: Append, loop: asyncio.AbstractEventLoop) -> None:
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
            if self._snapshot_due():
                self._wake()  # the owner writes it (it may await)
        finally:
            self._busy = False
        self._schedule_tick()

    def _core_append(self, item: Append, now: int) -> list[Output]:
        return self.replica.append(
            item.request_id, item.values, item.acks, now, item.producer, item.timestamp_ms
        )

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
