"""Pipelined idempotent appends for the asyncio client: `append_stream.Pipeline`'s rules in
asyncio (one event loop, no threads).

Each partition (`_Part`) keeps its unanswered batches in sequence order, at most
`partition_in_flight_max` (5, Kafka's `max.in.flight.requests.per.connection`: the leader
recognises a resend of any of the last 5 batches it appended). `AsyncPipeline.append`
numbers a batch (`sequences.Sequences`) and queues it; `_pump` writes the partition's
batches not yet sent in this generation, in order, under the partition's lock, so that
they reach the leader in sequence order. Until a partition has acknowledged a batch of the
client's current producer id, one batch at a time goes out (its first one, or the first
resent): a leader that does not know the producer yet accepts any first sequence, so a
later batch must not reach it before the first one (seen with a fresh topic: the first
batch refused with LEADER_UNKNOWN while the leader's epoch committed, the next accepted a
moment later, and the first one's resend then refused as too old).

When a batch fails with a retriable error (NOT_LEADER, LEADER_UNKNOWN, OUT_OF_ORDER_SEQUENCE,
a broken stream, ACK_TIMEOUT, ...), the partition is paused (no new batch is sent), routing
is updated (`reroute`: a NOT_LEADER hint, a node passed over), and after the batch's backoff
(`retry.Attempts`) every unanswered batch of the partition is resent, in order, with its
numbers: the partition's generation changes, and answers to the older sends are ignored
unless they acknowledge a batch (a resend of it is then answered as a duplicate with the
same offsets). Resending one batch alone could let a later one land first on a leader
that does not know the producer yet (it accepts any first sequence): the order is kept.

A batch that fails for good (an error that is not retriable, or its `RetryPolicy` spent)
fails its caller and drops the client's identity (the next batches number from 0 under a
new producer id). The partition's other unanswered batches are then renumbered and resent
when the failed one certainly wrote nothing (INVALID_ARGUMENT, NOT_FOUND, ...), else they
fail with the same error (their outcome is as unknown as its). A node without AppendStream
(UNIMPLEMENTED: nothing was appended) gets the partition resent at once, as unary Appends
(the client's `send` remembers the node).

`close()` fails every batch still unanswered with SHUTTING_DOWN (outcome unknown).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from replog.client.append_stream import NOTHING_WRITTEN, unimplemented
from replog.client.results import AppendResult
from replog.client.retry import Attempts, RetryPolicy
from replog.client.sequences import Identity, Sequences
from replog.errors import DuplicateSequenceError, ReplogError, ShuttingDownError
from replog.v1 import log_pb2

Answered = Callable[[], Awaitable[AppendResult]]
Send = Callable[[log_pb2.AppendRequest], Awaitable[Answered]]


class _Batch:
    __slots__ = ("attempts", "future", "identity", "request", "sent_in")

    def __init__(self, request: log_pb2.AppendRequest, future: asyncio.Future[AppendResult]):
        self.request = request
        self.future = future
        self.identity: Identity | None = None  # None: to be numbered
        self.attempts = Attempts(RetryPolicy())  # replaced by the pipeline's policy
        self.sent_in = -1  # the generation it was last sent in


class _Part:
    def __init__(self) -> None:
        self.order = asyncio.Lock()  # held while batches are numbered and written
        self.room = asyncio.Condition()  # notified when `batches` shrinks
        self.batches: deque[_Batch] = deque()  # unanswered, in sequence order
        self.generation = 0  # bumped each time the partition is to be resent
        self.paused = False  # a resend is due (after its backoff): nothing goes out
        self.confirmed: Identity | None = None  # the identity of the last acknowledged batch


class AsyncPipeline:
    """Idempotent batches pipelined per partition (see the module doc)."""

    def __init__(
        self,
        send: Send,
        reroute: Callable[[ReplogError, str, int], Awaitable[bool]],
        identity: Callable[[], Awaitable[Identity]],
        sequences: Sequences,
        retry: RetryPolicy,
        *,
        partition_in_flight_max: int = 5,
        in_flight_bytes_max: int = 64 * 1024 * 1024,
    ) -> None:
        self._send_request = send
        self._reroute = reroute
        self._identity = identity
        self._sequences = sequences
        self._retry = retry
        self.partition_in_flight_max = partition_in_flight_max
        # Bytes of requests taken and not answered yet, all partitions together: a caller
        # waits while another batch would pass the cap (one batch alone always passes).
        self.in_flight_bytes_max = in_flight_bytes_max
        self.in_flight_bytes = 0
        self._bytes_freed = asyncio.Event()
        self._parts: dict[tuple[str, int], _Part] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    async def append(self, request: log_pb2.AppendRequest) -> AppendResult:
        """Send `request` (its producer fields are set here) after the partition's earlier
        batches; its offsets once answered. A caller that is cancelled stops waiting only."""
        return await asyncio.shield(await self.enqueue(request))

    async def enqueue(self, request: log_pb2.AppendRequest) -> asyncio.Future[AppendResult]:
        """Number `request` and queue it after the partition's earlier batches (waiting for
        room in its window and under the byte cap); the future of its answer. Batches of
        one partition enqueued one after another are appended in that order. Cancelled
        before it returns, the batch was not queued (nothing sent) or is in flight (its
        answer then goes to no one); the caller cannot tell which: outcome unknown."""
        if self._closed:
            raise ShuttingDownError("the client is closed")
        key = (request.topic, request.partition)
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = _Part()
        batch = _Batch(request, asyncio.get_running_loop().create_future())
        batch.attempts = Attempts(self._retry)
        size = request.ByteSize()
        await self._take_bytes(size)
        # Given back once the batch is answered (a caller cancelled meanwhile leaves it in
        # flight: its bytes stay counted), or at once if it never joins the partition.
        batch.future.add_done_callback(lambda _f: self._give_bytes(size))
        try:
            while True:
                async with part.room:
                    await part.room.wait_for(
                        lambda: len(part.batches) < self.partition_in_flight_max
                    )
                async with part.order:
                    if len(part.batches) >= self.partition_in_flight_max:
                        continue  # taken meanwhile
                    await self._number(batch)
                    part.batches.append(batch)
                    await self._pump(part)
                    break
        except BaseException:
            if batch not in part.batches and not batch.future.done():
                batch.future.cancel()  # never sent: its bytes go back (the callback)
            raise
        return batch.future

    async def _take_bytes(self, size: int) -> None:
        while self.in_flight_bytes and self.in_flight_bytes + size > self.in_flight_bytes_max:
            self._bytes_freed.clear()
            await self._bytes_freed.wait()
        self.in_flight_bytes += size

    def _give_bytes(self, size: int) -> None:
        self.in_flight_bytes -= size
        self._bytes_freed.set()

    def _window(self, part: _Part) -> int:
        """How many batches may be in flight: one until the leader knows this producer."""
        identity = self._sequences.identity
        known = identity is not None and part.confirmed == identity
        return self.partition_in_flight_max if known else 1

    async def _number(self, batch: _Batch) -> None:
        request = batch.request
        while True:
            identity = await self._identity()
            seq = self._sequences.reserve(
                identity, request.topic, request.partition, len(request.values)
            )
            if seq is not None:
                identity.stamp(request, seq)
                batch.identity = identity
                return

    async def _pump(self, part: _Part) -> None:
        """Send the batches not sent in this generation, in order, within the window (the
        partition's lock held)."""
        if part.paused or self._closed:
            return
        generation = part.generation
        window = self._window(part)
        in_flight = sum(b.sent_in == generation for b in part.batches)
        for batch in list(part.batches):
            if batch.sent_in == generation:
                continue
            if in_flight >= window or batch.future.done():
                return
            if batch.identity is None:  # its old numbers left a gap: new ones
                await self._number(batch)
            batch.sent_in = generation
            in_flight += 1
            try:
                answered = await self._send_request(batch.request)
            except ReplogError as err:
                answered = _raising(err)
            self._spawn(self._await(part, batch, generation, answered))

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _await(self, part: _Part, batch: _Batch, generation: int, answered: Answered) -> None:
        try:
            result = await answered()
        except ReplogError as err:
            await self._failed(part, batch, generation, err)
            return
        async with part.room:
            if not batch.future.done():
                batch.future.set_result(result)
            part.confirmed = batch.identity
            _remove(part.batches, batch)
            part.room.notify_all()
        async with part.order:
            await self._pump(part)  # room in the window (maybe a wider one)

    async def _failed(self, part: _Part, batch: _Batch, generation: int, err: ReplogError) -> None:
        if batch.future.done() or generation != part.generation or self._closed:
            return  # acknowledged by another send, or an older send: its resend answers
        if unimplemented(err):  # nothing appended; the node gets unary Appends from now on
            self._resend_later(part, err, 0.0, batch)
            return
        backoff_s = batch.attempts.budget_left(err)
        if backoff_s is None:
            await self._give_up(part, batch, err)
            return
        self._resend_later(part, err, backoff_s, batch)

    def _resend_later(self, part: _Part, err: ReplogError, backoff_s: float, head: _Batch) -> None:
        part.generation += 1
        part.paused = True
        self._spawn(self._resend(part, err, backoff_s, head))

    async def _resend(self, part: _Part, err: ReplogError, backoff_s: float, head: _Batch) -> None:
        """Reroute, back off, then send the partition's unanswered batches again, in order."""
        request = head.request
        rerouted = await self._reroute(err, request.topic, request.partition)
        pause_s = head.attempts.pause_s(backoff_s, rerouted) if backoff_s else 0.0
        if pause_s:
            await asyncio.sleep(pause_s)
        async with part.order:
            part.paused = False
            await self._pump(part)

    async def _give_up(self, part: _Part, batch: _Batch, err: ReplogError) -> None:
        async with part.room:
            _remove(part.batches, batch)
            batch.future.set_exception(err)
            part.room.notify_all()
        if isinstance(err, DuplicateSequenceError):
            return  # written before (a resumed writer's resend): the numbering holds
        assert batch.identity is not None
        self._sequences.abandon(batch.identity)
        others = [b for b in part.batches if b.identity == batch.identity]
        if not isinstance(err, NOTHING_WRITTEN):
            async with part.room:
                for b in others:
                    _remove(part.batches, b)
                    if not b.future.done():
                        b.future.set_exception(err)
                part.room.notify_all()
            return
        for b in others:  # the gap it leaves means none of them was appended: renumbered
            b.identity = None
        if part.batches:
            self._resend_later(part, err, 0.0, part.batches[0])

    async def close(self) -> None:
        """Fail every batch still unanswered (SHUTTING_DOWN, outcome unknown)."""
        self._closed = True
        err = ShuttingDownError("the client closed before the batch was answered")
        for part in self._parts.values():
            for batch in part.batches:
                if not batch.future.done():
                    batch.future.set_exception(err)
            part.batches.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _remove(batches: deque[_Batch], batch: _Batch) -> None:
    if batch in batches:
        batches.remove(batch)


def _raising(err: ReplogError) -> Answered:
    async def fail() -> AppendResult:
        raise err

    return fail
