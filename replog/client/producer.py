"""A batching producer: records accumulate per partition and leave as one Append per batch.

`send(value, key=None, partition=None, headers=(), timestamp_ms=None, on_delivery=None)`
returns a `RecordFuture` whose `result(timeout)` (or kafka-python's `get(timeout)`) is the
record's `RecordMetadata` (topic, partition, offset, timestamp_ms, serialized sizes);
`on_delivery(err, metadata)` is called once per record, on the producer's sender thread,
when its batch is answered (`flush` returns after the callbacks ran). A batch is sent when
it reaches `batch_bytes_max` / `batch_records_max`, or `linger_ms` after its first record.
On an envelope topic the record keeps its key and headers, and its timestamp is
`timestamp_ms` or the time of the `send` call; a raw topic holds the value only (the key
just picks the partition; headers or a timestamp are refused).
`send_batch(values, partition)` sends a ready-made batch (no per-record work) and returns a
`concurrent.futures.Future[AppendResult]`.

Partitioning: an explicit `partition`; else the key's partition by `partitioner`: Kafka's
murmur2 by default (a key lands where Kafka's clients put it), or `"crc32"` (replog's choice
before murmur2, for topics whose keyed data was written so; `replog.client.partitioner`);
else sticky (Kafka's sticky partitioner: keyless records fill one partition's batch, the
next batch goes to the next partition); `send_batch` without a partition: round-robin.
Sending: with an idempotent client (the default) the batches travel over AppendStream
(`append_stream.Pipeline`): up to `partition_in_flight_max` batches (5) per partition in
flight, `in_flight_bytes_max` bytes in all, a partition's records landing in the order they
were sent, retries included, by their sequence numbers. Otherwise (`streaming=False`, a
client with `idempotent=False` or `streaming=False`, acks="none") each batch is one unary
Append, at most one per partition in flight (a retry could otherwise reorder them), and
different partitions in parallel (up to `in_flight_max` batches).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from time import time_ns
from typing import Protocol, Unpack

from replog.client import formats
from replog.client.append_stream import Pipeline
from replog.client.partitioner import DEFAULT_PARTITIONER, Partitioner
from replog.client.produce_rules import (
    ACKS_WIRE,
    SEND_OPTIONS,
    Chooser,
    OpenBatch,
    Prepared,
    ProducerSettings,
    RecordMetadata,
    SendOptions,
    check_keywords,
    deliver,
    metadata,
    prepare,
)
from replog.client.results import AppendResult
from replog.errors import InvalidArgumentError, ReplogError, ShuttingDownError
from replog.records import Record


class ProducerClient(Protocol):
    """What a `Producer` needs from its client; `replog.client.Client` is one.

    Declared here, not imported from `client.py`, because `Client.producer()` builds
    producers: `client.py` imports this module, never the other way round.
    """

    def partition_count(self, topic: str) -> int: ...

    def topic_format(self, topic: str) -> str: ...

    def append(
        self, topic: str, partition: int, values: formats.Values, *, acks: str = "all"
    ) -> AppendResult: ...

    def pipeline(
        self, acks: str, *, partition_in_flight_max: int = 5, in_flight_bytes_max: int = 64 << 20
    ) -> Pipeline | None: ...


class _Batch(OpenBatch):
    __slots__ = ("envelope", "future", "special", "topic")

    def __init__(
        self,
        partition: int,
        topic: str,
        envelope: bool,
        values: list[bytes | Record] | None = None,
    ) -> None:
        super().__init__(partition, values)
        self.topic = topic
        self.envelope = envelope
        self.future: Future[AppendResult] = Future()
        # The `Prepared` of records sent with a key, headers, a timestamp or a null value
        # (by index); the usual record's is rebuilt from `values` and `times` (`prepared`).
        self.special: dict[int, Prepared] = {}

    def prepared(self, index: int) -> Prepared:
        """Record `index`'s `Prepared` (for its metadata)."""
        record = self.special.get(index)
        if record is not None:
            return record
        value = self.values[index]
        assert isinstance(value, bytes) and self.times is not None
        return value, self.times[index], -1, len(value)


class RecordFuture(tuple[_Batch, int]):
    """One record sent with `Producer.send`: its `RecordMetadata` once its batch is
    acknowledged (`result(timeout)`, or `get(timeout)` as kafka-python calls it); the
    batch's error otherwise.

    A `(batch, index)` pair: `send` makes one per record, and a tuple subclass is one
    C-level allocation (no Python `__init__`); what the metadata needs (the record's time
    and sizes) is read from the batch when `result` is asked for, not kept per record."""

    __slots__ = ()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        batch, index = self
        res = batch.future.result(timeout)
        return metadata(
            batch.topic, batch.partition, res, index, batch.prepared(index), batch.envelope
        )

    get = result

    def done(self) -> bool:
        return self[0].future.done()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self[0].future.exception(timeout)


def _plain(value: object, options: SendOptions) -> bool:
    """A record `send` takes the usual way: bytes, every option given at its default (as
    the Spark sink passes them: `key=None, partition=None, headers=None`)."""
    return (
        type(value) is bytes
        and options.keys() <= SEND_OPTIONS
        and options.get("key") is None
        and options.get("partition") is None
        and options.get("timestamp_ms") is None
        and options.get("on_delivery") is None
        and not options.get("headers")
    )


class Producer(ProducerSettings):
    """Batches records per partition and sends them (see the module doc); made by
    `Client.producer(topic, ...)`, whose keyword options are this class's."""

    def __init__(
        self,
        client: ProducerClient,
        topic: str,
        *,
        acks: str = "all",
        linger_ms: int = 5,
        batch_bytes_max: int = 1024 * 1024,
        batch_records_max: int = 10_000,
        in_flight_max: int = 4,
        partitions: int | None = None,
        streaming: bool = True,
        partition_in_flight_max: int = 5,
        in_flight_bytes_max: int = 64 * 1024 * 1024,
        partitioner: Partitioner = DEFAULT_PARTITIONER,
    ) -> None:
        self.configure(
            topic,
            acks,
            linger_ms,
            batch_bytes_max,
            batch_records_max,
            partitioner,
            partition_in_flight_max,
            in_flight_bytes_max,
        )
        if in_flight_max < 1:
            raise InvalidArgumentError("in_flight_max >= 1")
        self.client = client
        self.partitions = partitions if partitions is not None else client.partition_count(topic)
        self.envelope = client.topic_format(topic) == formats.ENVELOPE
        self._chooser = Chooser(self.partitions, self.partitioner)
        # One re-entrant lock (a future failed while it is held calls back into the
        # producer); `send` takes it bare (`with self._lock`: no Python-level wrapper).
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._open: dict[int, _Batch] = {}  # accumulating, per partition
        # `_open[_chooser.sticky]` once `send` looked it up; None after any `_seal`
        self._sticky_batch: _Batch | None = None
        self._index_last = batch_records_max - 1  # a batch is full with this index
        self._ready: dict[int, deque[_Batch]] = {}  # full or lingered, per partition, in order
        self._busy: set[int] = set()  # partitions with a batch in flight
        # answered batches with on_delivery callbacks, for the sender thread to call
        self._answered_batches: deque[_Batch] = deque()
        self._stopped = False  # the sender thread has returned: callbacks run where answered
        self._closing = False
        self._closer: int | None = None  # the thread running `close`
        self._pipeline = (
            client.pipeline(
                acks,
                partition_in_flight_max=partition_in_flight_max,
                in_flight_bytes_max=in_flight_bytes_max,
            )
            if streaming
            else None
        )
        self._handed: set[Future[AppendResult]] = set()  # given to the pipeline, unanswered
        self._pool = ThreadPoolExecutor(in_flight_max, thread_name_prefix="replog-producer")
        self._sender = threading.Thread(target=self._run, name="replog-producer", daemon=True)
        self._sender.start()

    # -- API --------------------------------------------------------------------------------

    def send(self, value: bytes | None, **options: Unpack[SendOptions]) -> RecordFuture:
        """Queue one record; `value=None` is a null value (a tombstone) on an envelope
        topic. The keyword options (`produce_rules.SendOptions`): `key`, `partition`,
        `headers`, `timestamp_ms`, and `on_delivery(err, metadata)`, called once, from the
        producer's sender thread, when the record's batch is answered: `(None,
        RecordMetadata)` or `(error, None)`; what it raises is logged. Every check happens
        here, before anything is queued: a bad record must never reach the sender thread.
        (Options as `**options`, not keyword parameters with defaults: the usual record,
        bytes and no option, then costs one test, and no default is filled per call.)"""
        if (options or type(value) is not bytes) and not _plain(value, options):
            return self._send_prepared(value, options)
        # the usual record (bytes, no option set): the least work per record
        ts = time_ns() // 1_000_000 if self.envelope else 0
        lock = self._lock
        lock.acquire()  # (acquire/release: cheaper than `with` once per record)
        try:
            if self._closing:
                raise ShuttingDownError("the producer is closed")
            batch = self._sticky_batch
            if batch is None:
                p = self._chooser.sticky
                batch = self._sticky_batch = self._open.get(p) or self._start(p)
            values = batch.values
            index = len(values)
            values.append(value)  # type: ignore[arg-type]  # bytes (checked above)
            batch.times.append(ts)  # type: ignore[union-attr]  # `send`'s batches have times
            batch.bytes += len(value)  # type: ignore[arg-type]
            if batch.bytes >= self.batch_bytes_max or index >= self._index_last:
                self._seal(batch.partition)
        finally:
            lock.release()
        return RecordFuture((batch, index))

    def _send_prepared(self, value: bytes | None, options: SendOptions) -> RecordFuture:
        """`send` of a record with options (or not bytes): checked and kept as `Prepared`."""
        check_keywords(options, SEND_OPTIONS, "send")
        key = options.get("key")
        on_delivery = options.get("on_delivery")
        record = prepare(
            self.topic,
            self.envelope,
            value,
            key,
            options.get("headers", ()),
            options.get("timestamp_ms"),
        )
        with self._lock:
            if self._closing:
                raise ShuttingDownError("the producer is closed")
            p = self._chooser.choose(key, options.get("partition"))
            batch = self._open.get(p)
            if batch is None:
                batch = self._start(p)
            index = batch.add(record, on_delivery)
            batch.special[index] = record
            if batch.bytes >= self.batch_bytes_max or index >= self._index_last:
                self._seal(p)  # (`OpenBatch.full`, inlined: once per record)
            return RecordFuture((batch, index))

    def send_batch(
        self, values: formats.Values, partition: int | None = None
    ) -> Future[AppendResult]:
        """Send `values` as one Append (after anything already queued for the partition)."""
        p = self._chooser.next_batch(partition)
        batch = _Batch(p, self.topic, self.envelope, list(values))
        with self._cond:
            if self._closing:
                raise ShuttingDownError("the producer is closed")
            self._seal(p)
            self._ready.setdefault(p, deque()).append(batch)
            self._cond.notify()
        return batch.future

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued and wait until every batch is acknowledged (or failed)
        and its `on_delivery` callbacks have been called."""
        with self._cond:
            for p in list(self._open):
                self._seal(p)
            pending = [b.future for q in self._ready.values() for b in q]
            pending.extend(self._handed)
            self._cond.notify()
        deadline = None if timeout is None else time.monotonic() + timeout
        for fut in pending:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            fut.exception(remaining)
        with self._cond:
            while self._busy or self._handed or self._answered_batches or any(self._ready.values()):
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._cond.wait(remaining)

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued, wait until it is answered, stop. With `timeout` (seconds)
        return after about that long at most (Kafka's `close(Duration)`): a batch not sent
        by then fails with SHUTTING_DOWN (not appended), one sent and unanswered fails with
        SHUTTING_DOWN too, its outcome unknown (it may be appended), and a unary Append
        under way finishes in the background within the client's retry deadline. Without
        `timeout`, every batch is answered first (each within that deadline)."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        with contextlib.suppress(TimeoutError):  # flush's wait ran out: what is left fails
            self.flush(timeout)
        with self._cond:
            self._closing = True
            self._closer = threading.get_ident()  # callbacks of what close fails run here
            unsent = [batch for queue in self._ready.values() for batch in queue]
            for queue in self._ready.values():
                queue.clear()
            self._cond.notify_all()
        for batch in unsent:
            if not batch.future.done():
                batch.future.set_exception(
                    ShuttingDownError("the producer closed before this batch was sent")
                )
        if self._pipeline is not None:
            self._pipeline.close(left())  # fails what it still holds once `left()` is out
        self._sender.join(left())
        self._pool.shutdown(wait=deadline is None, cancel_futures=True)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------

    def _start(self, p: int) -> _Batch:
        """A new open batch for partition p (caller holds the lock)."""
        batch = self._open[p] = _Batch(p, self.topic, self.envelope)
        self._cond.notify()  # the sender starts this batch's linger clock
        return batch

    def _seal(self, p: int) -> None:
        """Move partition p's open batch to its ready queue (caller holds the lock)."""
        batch = self._open.pop(p, None)
        self._sticky_batch = None  # (the sticky partition may move on)
        if batch is not None:
            self._chooser.sealed(p)  # keyless records move on to the next partition
        if batch is not None and batch.values:
            if batch.callbacks:
                batch.future.add_done_callback(functools.partial(self._to_deliver, batch))
            self._ready.setdefault(p, deque()).append(batch)
            self._cond.notify()

    def _to_deliver(self, batch: _Batch, _future: object = None) -> None:
        """`batch` is answered: its callbacks run on the sender thread; here when `close`
        fails it (before `close` returns) or once the sender thread has returned (a unary
        Append that outlived `close(timeout)`)."""
        with self._cond:
            if not self._stopped and threading.get_ident() != self._closer:
                self._answered_batches.append(batch)
                self._cond.notify_all()
                return
        self._deliver(batch)

    def _deliver(self, batch: _Batch) -> None:
        fut = batch.future
        err = fut.exception() if not fut.cancelled() else ShuttingDownError("cancelled")
        deliver(self.topic, batch, None if err else fut.result(), err, self.envelope)

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            with self._cond:
                self._stopped = True
                left = list(self._answered_batches)
                self._answered_batches.clear()
                self._cond.notify_all()
            for batch in left:
                self._deliver(batch)

    def _loop(self) -> None:
        with self._cond:
            while True:
                while self._answered_batches:
                    batch = self._answered_batches[0]
                    self._cond.release()  # callbacks run without the lock
                    try:
                        self._deliver(batch)
                    finally:
                        self._cond.acquire()
                    self._answered_batches.popleft()
                    self._cond.notify_all()
                now = time.monotonic()
                wait_s: float | None = None
                for p, batch in list(self._open.items()):
                    due = batch.due_s(self.linger_s)
                    if due <= now:
                        self._seal(p)
                    else:
                        wait_s = due - now if wait_s is None else min(wait_s, due - now)
                handing: list[_Batch] = []  # to the pipeline, in order, outside the lock
                for p, queue in self._ready.items():
                    while queue and self._pipeline is not None:
                        batch = queue.popleft()
                        self._handed.add(batch.future)  # (`flush` waits for it from here)
                        handing.append(batch)
                    if queue and p not in self._busy:
                        self._busy.add(p)
                        self._submit(queue.popleft())
                if handing:
                    assert self._pipeline is not None
                    self._cond.release()  # encoding a batch must not hold up `send`
                    try:
                        for batch in handing:
                            self._hand(self._pipeline, batch)
                    finally:
                        self._cond.acquire()
                    continue  # what changed meanwhile (new batches, answers) first
                idle = not self._busy and not self._handed and not self._answered_batches
                if self._closing and idle and not any(self._ready.values()):
                    return
                self._cond.wait(wait_s)

    def _hand(self, pipeline: Pipeline, batch: _Batch) -> None:
        """Give `batch` to the pipeline (only the sender thread, without the lock, in the
        order the batches were sealed): sent in order after the partition's earlier
        batches, several in flight. Its future is in `_handed` already."""
        try:
            values = batch.wire_values(self.topic, self.envelope)
            if not isinstance(values, list):
                values = list(values)
            acks = ACKS_WIRE[self.acks]
            pipeline.submit(self.topic, batch.partition, values, acks, batch.future)
        except ReplogError as exc:
            batch.future.set_exception(exc)
        batch.future.add_done_callback(self._answered)

    def _answered(self, future: Future[AppendResult]) -> None:
        with self._cond:
            self._handed.discard(future)
            self._cond.notify_all()

    def _submit(self, batch: _Batch) -> None:
        """Send `batch` as a unary Append on the pool (caller holds the lock); one that
        `close(timeout)` cancels before it started fails, never stays pending."""

        def cancelled(task: Future[None]) -> None:
            if not task.cancelled():
                return
            with self._cond:
                self._busy.discard(batch.partition)
                self._cond.notify_all()
            if not batch.future.done():
                batch.future.set_exception(
                    ShuttingDownError("the producer closed before this batch was sent")
                )

        self._pool.submit(self._send, batch).add_done_callback(cancelled)

    def _send(self, batch: _Batch) -> None:
        try:
            result = self.client.append(
                self.topic, batch.partition, batch.unary_values(self.envelope), acks=self.acks
            )
        except BaseException as exc:
            batch.future.set_exception(exc)
        else:
            batch.future.set_result(result)
        finally:
            with self._cond:
                self._busy.discard(batch.partition)
                self._cond.notify_all()
