"""The asyncio producer: `producer.Producer`'s semantics on one event loop, no threads.

`AsyncClient.producer(topic, ...)` makes one; `async with` (or `await start()`, or the
first `send`) learns the topic's partition count and format. `await send(value, key=,
partition=, headers=, timestamp_ms=, on_delivery=)` queues one record and returns an
`asyncio.Future[RecordMetadata]` (aiokafka's shape; `send_and_wait` awaits it too). The
rules are `produce_rules`' (shared with the threaded producer): record checks, partition
choice (murmur2 keys by default), batching (`batch_bytes_max`, `batch_records_max`,
`linger_ms`), tombstones on envelope topics, `RecordMetadata`, `on_delivery(err,
metadata)` called once per record on the event loop (what it raises is logged).

Sending: each partition's sealed batches leave in order from one task per partition
(`_drain`). With an idempotent client and acks other than "none" a batch is queued on the
client's `AsyncPipeline` (`enqueue`: numbered, up to `partition_in_flight_max` in flight per
partition, the client's in-flight byte cap, resends in order) and the task goes on to the
next batch; otherwise each batch is one unary Append, one at a time per partition.

Cancellation: `send` does its only await (the start) before touching any batch, and queues
the record without awaiting: a cancelled `send` queued nothing or the whole record.
`flush` and the record futures' awaiters wait through `asyncio.wait` / `shield`: cancelling
them stops the waiting only, never a batch. The per-partition tasks belong to the producer;
`close()` cancels them only after its flush (and its timeout), and every batch still
unanswered then fails with SHUTTING_DOWN (outcome unknown for one already handed on): no
future stays pending.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from typing import Protocol, Unpack

from replog.client import formats
from replog.client import produce_rules as rules
from replog.client.partitioner import DEFAULT_PARTITIONER
from replog.client.results import AppendResult
from replog.errors import ShuttingDownError, TopicNotFoundError
from replog.v1 import log_pb2


class AsyncProducerClient(Protocol):
    """What an `AsyncProducer` needs from its client; `AsyncClient` is one."""

    idempotent: bool

    async def list_topics(self) -> dict[str, int]: ...

    async def topic_format(self, topic: str) -> str: ...

    async def _append(
        self, topic: str, partition: int, values: Sequence[bytes], acks: str
    ) -> AppendResult: ...

    async def _enqueue(self, req: log_pb2.AppendRequest) -> asyncio.Future[AppendResult]: ...


class _Batch(rules.OpenBatch):
    __slots__ = ("future", "records", "timer")

    def __init__(self, partition: int, future: asyncio.Future[AppendResult]) -> None:
        super().__init__(partition)
        self.future = future
        # (index, the record, its future) of each record sent with `send`
        self.records: list[tuple[int, rules.Prepared, asyncio.Future[rules.RecordMetadata]]] = []
        self.timer: asyncio.TimerHandle | None = None


class AsyncProducer(rules.ProducerSettings):
    """Batches records per partition and sends them on the event loop (module doc)."""

    def __init__(
        self, client: AsyncProducerClient, topic: str, **options: Unpack[rules.AsyncProducerOptions]
    ) -> None:
        """`options`: `produce_rules.AsyncProducerOptions` (defaults: `Producer`'s). In-flight
        limits are the client's pipeline's (`AsyncClient(in_flight_bytes_max=)`, 5 batches
        per partition), shared by everything the client appends."""
        rules.check_keywords(options, rules.AsyncProducerOptions.__optional_keys__, "producer")
        given: rules.AsyncProducerOptions = {**rules.ASYNC_PRODUCER_DEFAULTS, **options}
        acks, linger_ms = given["acks"], given["linger_ms"]
        batching = (given["batch_bytes_max"], given["batch_records_max"])
        partitioner = given.get("partitioner", DEFAULT_PARTITIONER)
        self.configure(topic, acks, linger_ms, *batching, partitioner)
        self.client = client
        self.partitions = given["partitions"]
        self.envelope = False
        self._pipelined = client.idempotent and acks != "none"
        self._chooser: rules.Chooser | None = None
        self._starting = asyncio.Lock()
        self._open: dict[int, _Batch] = {}
        self._ready: dict[int, deque[_Batch]] = {}
        self._drains: dict[int, asyncio.Task[None]] = {}
        self._unanswered: set[asyncio.Future[AppendResult]] = set()
        self._closing = False

    # -- API --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Learn the topic's partition count and format (once; `send` calls it)."""
        async with self._starting:
            if self._chooser is not None:
                return
            if self.partitions is None:
                topics = await self.client.list_topics()
                if self.topic not in topics:
                    raise TopicNotFoundError(
                        f"topic {self.topic!r} does not exist", topic=self.topic
                    )
                self.partitions = topics[self.topic]
            self.envelope = await self.client.topic_format(self.topic) == formats.ENVELOPE
            self._chooser = rules.Chooser(self.partitions, self.partitioner)

    async def send(
        self, value: bytes | None, **options: Unpack[rules.SendOptions]
    ) -> asyncio.Future[rules.RecordMetadata]:
        """Queue one record (`value=None`: a tombstone on an envelope topic); the future of
        its `RecordMetadata`. `on_delivery(err, metadata)` is called once on the loop when
        the record's batch is answered."""
        if self._chooser is None:
            await self.start()  # the only await: nothing is queued before it
        assert self._chooser is not None
        if self._closing:
            raise ShuttingDownError("the producer is closed")
        rules.check_keywords(options, rules.SEND_OPTIONS, "send")
        key, headers = options.get("key"), options.get("headers", ())
        timestamp_ms = options.get("timestamp_ms")
        record = rules.prepare(self.topic, self.envelope, value, key, headers, timestamp_ms)
        p = self._chooser.choose(key, options.get("partition"))
        loop = asyncio.get_running_loop()
        batch = self._open.get(p)
        if batch is None:
            batch = self._open[p] = self._new_batch(p, loop)
        index = batch.add(record, options.get("on_delivery"))
        fut: asyncio.Future[rules.RecordMetadata] = loop.create_future()
        batch.records.append((index, record, fut))
        if batch.full(self.batch_bytes_max, self.batch_records_max):
            self._seal(p)
        return fut

    async def send_and_wait(
        self, value: bytes | None, **options: Unpack[rules.SendOptions]
    ) -> rules.RecordMetadata:
        """`send` and wait for the record's metadata (cancelling stops the wait only)."""
        fut = await self.send(value, **options)
        return await asyncio.shield(fut)

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything queued; wait until every batch is answered and its callbacks ran
        (at most `timeout` seconds). Cancelling it stops the wait, not the batches."""
        for p in list(self._open):
            self._seal(p)
        pending = set(self._unanswered)
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    async def close(self, timeout: float | None = None) -> None:
        """Flush (at most `timeout` seconds), then stop: a batch still unanswered fails with
        SHUTTING_DOWN (not sent, or sent and its outcome unknown). The client stays open."""
        if not self._closing:
            with contextlib.suppress(TimeoutError):
                await self.flush(timeout)
        self._closing = True
        for p in list(self._open):
            self._seal(p)
        drains = list(self._drains.values())
        for task in drains:
            task.cancel()
        await asyncio.gather(*drains, return_exceptions=True)
        err = ShuttingDownError("the producer closed before this batch was answered")
        for queue in self._ready.values():
            for batch in queue:
                if not batch.future.done():
                    batch.future.set_exception(err)
            queue.clear()
        for fut in list(self._unanswered):  # handed on: answered by the pipeline, or not
            if not fut.done():
                fut.set_exception(err)
        await asyncio.sleep(0)  # the batches' done callbacks (futures, on_delivery) run

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals --------------------------------------------------------------------------

    def _new_batch(self, p: int, loop: asyncio.AbstractEventLoop) -> _Batch:
        batch = _Batch(p, loop.create_future())
        self._unanswered.add(batch.future)
        batch.future.add_done_callback(lambda _f: self._answered(batch))
        batch.timer = loop.call_later(self.linger_s, self._linger_over, batch)
        return batch

    def _linger_over(self, batch: _Batch) -> None:
        if self._open.get(batch.partition) is batch:
            self._seal(batch.partition)

    def _seal(self, p: int) -> None:
        """Move partition p's open batch to its ready queue; its sender task runs."""
        batch = self._open.pop(p, None)
        if batch is None:
            return
        if self._chooser is not None:
            self._chooser.sealed(p)  # keyless records move on to the next partition
        if batch.timer is not None:
            batch.timer.cancel()
        self._ready.setdefault(p, deque()).append(batch)
        drain = self._drains.get(p)
        if drain is None or drain.done():
            self._drains[p] = asyncio.get_running_loop().create_task(
                self._drain(p), name=f"replog-producer-{self.topic}-{p}"
            )

    async def _drain(self, p: int) -> None:
        """Send partition p's ready batches in order (one task per partition at a time)."""
        queue = self._ready[p]
        while queue:
            batch = queue[0]
            try:
                if self._pipelined:
                    answer = await self.client._enqueue(self._request(batch))
                    queue.popleft()
                    _chain(answer, batch.future)
                else:
                    result = await self.client._append(
                        self.topic, p, batch.wire_values(self.topic, self.envelope), self.acks
                    )
                    queue.popleft()
                    if not batch.future.done():
                        batch.future.set_result(result)
            except asyncio.CancelledError:
                if queue and queue[0] is batch and not batch.future.done():
                    queue.popleft()  # handed on or not, its outcome is unknown
                    batch.future.set_exception(
                        ShuttingDownError("the producer closed while this batch was sent")
                    )
                raise
            except Exception as exc:  # the batch's error is its callers'
                if queue and queue[0] is batch:
                    queue.popleft()
                if not batch.future.done():
                    batch.future.set_exception(exc)

    def _request(self, batch: _Batch) -> log_pb2.AppendRequest:
        return log_pb2.AppendRequest(
            topic=self.topic,
            partition=batch.partition,
            values=batch.wire_values(self.topic, self.envelope),
            acks=rules.ACKS_WIRE[self.acks],
        )

    def _answered(self, batch: _Batch) -> None:
        """`batch` is answered: its records' futures and callbacks, once each."""
        self._unanswered.discard(batch.future)
        fut = batch.future
        if fut.cancelled():
            error: BaseException | None = ShuttingDownError("the batch was cancelled")
        else:
            error = fut.exception()
        result = None if error is not None else fut.result()
        for index, record, record_future in batch.records:
            if record_future.done():  # its awaiter cancelled it: the record went on
                continue
            if result is None:
                assert error is not None
                record_future.set_exception(error)
            else:
                p = batch.partition
                record_future.set_result(
                    rules.metadata(self.topic, p, result, index, record, self.envelope)
                )
        rules.deliver(self.topic, batch, result, error, self.envelope)


def _chain(source: asyncio.Future[AppendResult], target: asyncio.Future[AppendResult]) -> None:
    """`target` gets `source`'s outcome (a cancelled source: SHUTTING_DOWN, unknown)."""

    def copy(_: asyncio.Future[AppendResult]) -> None:
        if source.cancelled():
            exc: BaseException | None = ShuttingDownError("the batch was cancelled")
        else:
            exc = source.exception()  # retrieved even when `target` is settled already
        if target.done():
            return
        if exc is not None:
            target.set_exception(exc)
        else:
            target.set_result(source.result())

    source.add_done_callback(copy)
