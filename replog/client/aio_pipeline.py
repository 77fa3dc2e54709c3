"""Pipelined idempotent appends for the asyncio client: `pipeline_rules.PipelineRules` (the
rules `append_stream.Pipeline` drives with threads) driven by one event loop.

The rules (per-partition sequence order, at most `partition_in_flight_max` batches in
flight, one at a time until the partition knows the producer, pause / reroute / resend in
order with generations, renumbering only when a failed batch certainly wrote nothing, the
in-flight byte cap over all partitions) are the core's; this module performs its actions:
one sender task (started on first use) writes the batches the core says may go, in order
(`send`: over the node's AppendStream, or a unary Append), asks for the producer's identity
and reroutes a partition that failed (each reroute in a task of its own: a metadata refresh
holds no other partition); each write's answer is awaited in a task that hands it to the
core.

`enqueue` returns once its batch has been written (or has failed): a caller has at most one
batch waiting, and a partition's batches enqueued one after another are appended in that
order. `close()` fails every batch still unanswered with SHUTTING_DOWN (outcome unknown).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Unpack

from replog.client.pipeline_rules import (
    Batch,
    Failures,
    Limits,
    PipelineLimits,
    PipelineRules,
    Reroute,
)
from replog.client.pipeline_rules import Send as RuleSend
from replog.client.results import AppendResult
from replog.client.retry import Attempts, RetryPolicy
from replog.client.sequences import Identity, Sequences
from replog.errors import ReplogError, ShuttingDownError
from replog.v1 import log_pb2

log = logging.getLogger("replog.client.pipeline")

Answered = Callable[[], Awaitable[AppendResult]]
Send = Callable[[log_pb2.AppendRequest], Awaitable[Answered]]


class _Item:
    """A batch's driver side: its request, its answer's future, and `left` (done once the
    batch was first written, or failed: `enqueue` waits for it)."""

    __slots__ = ("future", "left", "request")

    def __init__(self, request: log_pb2.AppendRequest, loop: asyncio.AbstractEventLoop) -> None:
        self.request = request
        self.future: asyncio.Future[AppendResult] = loop.create_future()
        self.left: asyncio.Future[None] = loop.create_future()

    def leave(self) -> None:
        if not self.left.done():
            self.left.set_result(None)


class AsyncPipeline(Limits):
    """Idempotent batches pipelined per partition (see the module doc)."""

    def __init__(
        self,
        send: Send,
        reroute: Callable[[ReplogError, str, int], Awaitable[bool]],
        identity: Callable[[], Awaitable[Identity]],
        sequences: Sequences,
        retry: RetryPolicy,
        **limits: Unpack[PipelineLimits],
    ) -> None:
        super().__init__(sequences, functools.partial(Attempts, retry), identity, reroute, **limits)
        self._rules: PipelineRules[_Item]
        self._identity: Callable[[], Awaitable[Identity]]
        self._reroute: Callable[[ReplogError, str, int], Awaitable[bool]]
        self._send_request = send
        self._wake = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    async def append(self, request: log_pb2.AppendRequest) -> AppendResult:
        """Send `request` (its producer fields are set here) after the partition's earlier
        batches; its offsets once answered. A caller that is cancelled stops waiting only."""
        return await asyncio.shield(await self.enqueue(request))

    async def enqueue(self, request: log_pb2.AppendRequest) -> asyncio.Future[AppendResult]:
        """Queue `request` after the partition's earlier batches and wait until it is written
        (room in its partition's window and under the byte cap, numbered); the future of its
        answer. Batches of one partition enqueued one after another are appended in that
        order. Cancelled before it returns, the batch was not written (it is taken back:
        nothing sent) or it was (its answer then goes to no one); the caller cannot tell
        which: outcome unknown."""
        if self._closed:
            raise ShuttingDownError("the client is closed")
        item = _Item(request, asyncio.get_running_loop())
        batch = self._rules.submit(
            request.topic, request.partition, item, len(request.values), request.ByteSize()
        )
        if self._sender is None:
            self._sender = asyncio.ensure_future(self._run())
            self._sender.add_done_callback(self._sender_ended)
        self._wake.set()
        try:
            await asyncio.shield(item.left)
        except BaseException:
            if self._rules.withdraw(batch):
                item.future.cancel()
            raise
        return item.future

    # -- the sender task ----------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            self._wake.clear()
            sends, need, wait_s = self._rules.next(loop.time())
            for send in sends:
                if self._rules.current(send):  # not taken back while an earlier one was written
                    await self._write(send)
            if isinstance(need, Reroute):
                self._spawn(self._rerouting(need))
            elif need is not None:
                await self._number()
            if sends or need is not None:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_s)

    def _sender_ended(self, task: asyncio.Task[None]) -> None:
        """The sender ends only with `close`; a bug that ends it fails every batch loudly."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        self._closed = True
        log.error("the append pipeline's sender failed", exc_info=exc)
        for batch in self._rules.abandon():
            batch.payload.leave()
            if not batch.payload.future.done():
                batch.payload.future.set_exception(
                    ShuttingDownError(f"the pipeline failed: {exc!r}")
                )

    async def _write(self, send: RuleSend[_Item]) -> None:
        batch, item = send.batch, send.batch.payload
        batch.identity.stamp(item.request, batch.base_sequence)
        try:
            answered = await self._send_request(item.request)
        except ReplogError as err:
            answered = _raising(err)
        item.leave()
        self._spawn(self._await(batch, send.generation, answered))

    async def _number(self) -> None:
        try:
            await self._identity()
        except ReplogError as err:
            self._settle(self._rules.identity_failed(err))

    async def _rerouting(self, reroute: Reroute[_Item]) -> None:
        topic, partition = reroute.partition.key
        moved = False
        try:
            moved = await self._reroute(reroute.error, topic, partition)
        finally:  # whatever happened, the partition is not held
            self._rules.rerouted(reroute, moved, asyncio.get_running_loop().time())
            self._wake.set()

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _await(self, batch: Batch[_Item], generation: int, answered: Answered) -> None:
        try:
            result = await answered()
        except ReplogError as err:
            self._settle(self._rules.failed(batch, generation, err))
        else:
            if self._rules.acked(batch):
                batch.payload.leave()
                if not batch.payload.future.done():
                    batch.payload.future.set_result(result)
        self._wake.set()

    def _settle(self, failures: Failures[_Item]) -> None:
        for batch, err in failures:
            batch.payload.leave()
            if not batch.payload.future.done():
                batch.payload.future.set_exception(err)

    async def close(self) -> None:
        """Fail every batch still unanswered (SHUTTING_DOWN, outcome unknown)."""
        self._closed = True
        err = ShuttingDownError("the client closed before the batch was answered")
        for batch in self._rules.abandon():
            batch.payload.leave()
            if not batch.payload.future.done():
                batch.payload.future.set_exception(err)
        tasks = list(self._tasks)
        if self._sender is not None:
            tasks.append(self._sender)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _raising(err: ReplogError) -> Answered:
    async def fail() -> AppendResult:
        raise err

    return fail
