"""A batching producer: records accumulate per partition and leave as one Append per batch.

`send(value, key=None, partition=None, headers=(), timestamp_ms=None)` returns an
`OffsetFuture`; a batch is sent when it reaches `batch_bytes_max` / `batch_records_max`, or
`linger_ms` after its first record. On an envelope topic the record keeps its key and
headers, and its timestamp is `timestamp_ms` or the time of the `send` call; a raw topic
holds the value only (the key just picks the partition; headers or a timestamp are
refused).
`send_batch(values, partition)` sends a ready-made batch (no per-record work) and returns a
`concurrent.futures.Future[AppendResult]`.

Partitioning: an explicit `partition`; else the key's partition by `partitioner`: Kafka's
murmur2 by default (a key lands where Kafka's clients put it), or `"crc32"` (replog's choice
before murmur2, for topics whose keyed data was written so; `replog.client.partitioner`);
else round-robin per batch.
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
import itertools
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from replog import records
from replog.client import formats
from replog.client.append_stream import Pipeline
from replog.client.partitioner import (
    DEFAULT_PARTITIONER,
    Partitioner,
    check_partitioner,
    partition_for_key,
)
from replog.client.results import AppendResult
from replog.errors import InvalidArgumentError, ReplogError, ShuttingDownError
from replog.records import Header, Record
from replog.v1 import log_pb2

ACKS_WIRE = {"none": log_pb2.ACKS_NONE, "leader": log_pb2.ACKS_LEADER, "all": log_pb2.ACKS_ALL}


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


class OffsetFuture:
    """The offset of one record sent with `Producer.send`, once its batch is acknowledged."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: Future[AppendResult], index: int) -> None:
        self._batch = batch
        self._index = index

    def result(self, timeout: float | None = None) -> int:
        res = self._batch.result(timeout)
        return res.base_offset + self._index if res.base_offset >= 0 else -1

    def done(self) -> bool:
        return self._batch.done()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._batch.exception(timeout)


class _Batch:
    __slots__ = ("bytes", "created", "future", "partition", "times", "values")

    def __init__(self, partition: int, values: list[bytes | Record] | None = None) -> None:
        self.partition = partition
        self.values: list[bytes | Record] = values if values is not None else []
        # Envelope topics, `send`: each record's send time (plain values stay bytes, no
        # Record object per record; `records.encode_batch(..., times=)`).
        self.times: list[int] | None = None if values is not None else []
        self.bytes = 0
        self.created = time.monotonic()
        self.future: Future[AppendResult] = Future()


class Producer:
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
        try:
            self.partitioner = check_partitioner(partitioner)
        except ValueError as err:
            raise InvalidArgumentError(str(err)) from None
        if linger_ms < 0 or batch_bytes_max < 1 or batch_records_max < 1 or in_flight_max < 1:
            raise InvalidArgumentError("linger_ms >= 0; batch and in-flight limits >= 1")
        if partition_in_flight_max < 1 or in_flight_bytes_max < 1:
            raise InvalidArgumentError("in-flight limits >= 1")
        self.client = client
        self.topic = topic
        self.acks = acks
        self.linger_s = linger_ms / 1000
        self.batch_bytes_max = batch_bytes_max
        self.batch_records_max = batch_records_max
        self.partitions = partitions if partitions is not None else client.partition_count(topic)
        self.envelope = client.topic_format(topic) == formats.ENVELOPE
        self._round_robin = itertools.cycle(range(self.partitions))
        self._cond = threading.Condition()
        self._open: dict[int, _Batch] = {}  # accumulating, per partition
        self._ready: dict[int, deque[_Batch]] = {}  # full or lingered, per partition, in order
        self._busy: set[int] = set()  # partitions with a batch in flight
        self._closing = False
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

    def send(
        self,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Sequence[Header] = (),
        timestamp_ms: int | None = None,
    ) -> OffsetFuture:
        """Queue one record; `value=None` is a null value (a tombstone) on an envelope
        topic. Every check happens here, before anything is queued: a bad record must never
        reach the sender thread (it would end it, and every later send's future with it)."""
        if value is not None and not isinstance(value, bytes | bytearray | memoryview):
            raise InvalidArgumentError(
                f"a record's value is bytes or None, not {type(value).__name__}",
                topic=self.topic,
            )
        p = self._choose(key, partition)
        item: bytes | Record
        ts = 0
        if self.envelope:
            ts = formats.now_ms() if timestamp_ms is None else timestamp_ms
            if key is not None or headers or value is None:
                item = Record(None if value is None else bytes(value), key, headers, ts)
            else:
                item = bytes(value)
        elif value is None:
            raise InvalidArgumentError(
                f"topic {self.topic!r} is raw: its records have no null values (tombstones "
                "need an envelope topic)",
                topic=self.topic,
            )
        elif headers or timestamp_ms is not None:
            raise InvalidArgumentError(
                f"topic {self.topic!r} is raw: its records hold no headers or timestamps",
                topic=self.topic,
            )
        else:
            item = bytes(value)
        with self._cond:
            if self._closing:
                raise ShuttingDownError("the producer is closed")
            batch = self._open.get(p)
            if batch is None:
                batch = self._open[p] = _Batch(p)
                self._cond.notify()  # the sender starts this batch's linger clock
            index = len(batch.values)
            batch.values.append(item)
            if batch.times is not None:
                batch.times.append(ts)
            batch.bytes += 0 if value is None else len(value)
            if batch.bytes >= self.batch_bytes_max or index + 1 >= self.batch_records_max:
                self._seal(p)
            return OffsetFuture(batch.future, index)

    def send_batch(
        self, values: formats.Values, partition: int | None = None
    ) -> Future[AppendResult]:
        """Send `values` as one Append (after anything already queued for the partition)."""
        p = self._choose(None, partition)
        batch = _Batch(p, list(values))
        with self._cond:
            if self._closing:
                raise ShuttingDownError("the producer is closed")
            self._seal(p)
            self._ready.setdefault(p, deque()).append(batch)
            self._cond.notify()
        return batch.future

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued and wait until every batch is acknowledged (or failed)."""
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
            while self._busy or self._handed or any(self._ready.values()):
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

    def _choose(self, key: bytes | None, partition: int | None) -> int:
        if partition is not None:
            if not 0 <= partition < self.partitions:
                raise InvalidArgumentError(
                    f"partition {partition} outside [0, {self.partitions})", partition=partition
                )
            return partition
        if key is not None:
            return partition_for_key(key, self.partitions, self.partitioner)
        return next(self._round_robin)

    def _seal(self, p: int) -> None:
        """Move partition p's open batch to its ready queue (caller holds the lock)."""
        batch = self._open.pop(p, None)
        if batch is not None and batch.values:
            self._ready.setdefault(p, deque()).append(batch)
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                wait_s: float | None = None
                for p, batch in list(self._open.items()):
                    due = batch.created + self.linger_s
                    if due <= now:
                        self._seal(p)
                    else:
                        wait_s = due - now if wait_s is None else min(wait_s, due - now)
                for p, queue in self._ready.items():
                    while queue and self._pipeline is not None:
                        self._hand(self._pipeline, queue.popleft())
                    if queue and p not in self._busy:
                        self._busy.add(p)
                        self._pool.submit(self._send, queue.popleft())
                idle = not self._busy and not self._handed
                if self._closing and idle and not any(self._ready.values()):
                    return
                self._cond.wait(wait_s)

    def _hand(self, pipeline: Pipeline, batch: _Batch) -> None:
        """Give `batch` to the pipeline (caller holds the lock): sent in order after the
        partition's earlier batches, several in flight."""
        try:
            values = list(self._wire_values(batch))
            acks = ACKS_WIRE[self.acks]
            pipeline.submit(self.topic, batch.partition, values, acks, batch.future)
        except ReplogError as exc:
            batch.future.set_exception(exc)
            return
        self._handed.add(batch.future)
        batch.future.add_done_callback(self._answered)

    def _wire_values(self, batch: _Batch) -> Sequence[bytes]:
        """What the Append carries: on an envelope topic, records sent one by one keep
        each its send time."""
        if self.envelope and batch.times:
            return records.encode_batch(batch.values, formats.now_ms(), batch.times)
        return formats.to_values(self.topic, batch.values, self.envelope)

    def _records(self, batch: _Batch) -> list[bytes | Record]:
        """`batch` for `Client.append` (unary): plain values as Records with their send
        times on an envelope topic."""
        if not (self.envelope and batch.times):
            return batch.values
        return [
            Record(v, timestamp_ms=t) if isinstance(v, bytes) else v
            for v, t in zip(batch.values, batch.times, strict=True)
        ]

    def _answered(self, future: Future[AppendResult]) -> None:
        with self._cond:
            self._handed.discard(future)
            self._cond.notify_all()

    def _send(self, batch: _Batch) -> None:
        try:
            result = self.client.append(
                self.topic, batch.partition, self._records(batch), acks=self.acks
            )
        except BaseException as exc:
            batch.future.set_exception(exc)
        else:
            batch.future.set_result(result)
        finally:
            with self._cond:
                self._busy.discard(batch.partition)
                self._cond.notify_all()
