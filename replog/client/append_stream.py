"""Pipelined appends over AppendStream (sync client): several batches in flight per partition.

`AppendStreams` keeps one AppendStream call per node (`_Stream`): requests are written in
order and each answer arrives in the same order, so the stream matches answers to requests
by position. A stream that breaks (the node went away, a deadline passed, the server
ended it) fails every request it had not answered; the next request opens a new stream.

`Pipeline` sends an idempotent producer's batches (`sequences.Sequences`) by the rules of
`pipeline_rules.PipelineRules` (the sans-I/O core it shares with the asyncio client's
`aio_pipeline.AsyncPipeline`): up to `partition_in_flight_max` batches in flight per
partition (Kafka's `max.in.flight.requests.per.connection`, 5), `in_flight_bytes_max`
bytes in flight in all (a lone batch is always sent), one at a time until the partition
knows the producer; a retriable failure sends the partition again from its first
unacknowledged batch, in order with the same numbers, after a reroute (`Routing` and the
client's `_reroute`, as unary appends do) or a backoff (`retry.Attempts`); a batch that
fails for good drops the producer's identity and renumbers the partition's later batches
only when it certainly wrote nothing (see the core's doc). This module performs the
core's actions with threads (below) and gives each batch's future its outcome.

A node that answers AppendStream with UNIMPLEMENTED (a server from before it) is
remembered (`AppendStreams.unary_only`): the partition's batches in flight there (none of
which was appended) are resent at once, and from then on every batch for that node goes as
a unary Append (one call each, still several in flight per partition, ordered by their
sequence numbers like the stream's).

`Pipeline.close(wait_s)` waits for the batches still queued or in flight at most `wait_s`
(`Client.close` passes the client's `timeout_s`: a pipeline to a node that is down does not
hold `close` for the whole retry deadline); those left then fail with SHUTTING_DOWN, their
outcome unknown (as that of an append that raised).

Threads: the pipeline's sender thread sends and resends (it is the only one that calls
InitProducer or refreshes metadata); each stream's reader thread takes answers and hands
them to the pipeline; a watchdog thread ends a stream whose oldest request has waited
longer than `timeout_s` (the client's attempt deadline: its requests then fail as a
timed-out call's do, and are resent, with the same sequence numbers, to the leader the
metadata names now).
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, Unpack

import grpc

from replog.client.pipeline_rules import (
    NOTHING_WRITTEN,
    Batch,
    Failures,
    Limits,
    Need,
    PipelineLimits,
    PipelineRules,
    Reroute,
    Send,
    unimplemented,
)
from replog.client.results import AppendResult
from replog.client.retry import Attempts, RetryPolicy
from replog.client.routing import Routing
from replog.client.sequences import Identity, Sequences
from replog.errors import (
    DeadlineExceededError,
    ReplogError,
    ShuttingDownError,
    TransportError,
    UnavailableError,
    error_from_reason,
)
from replog.rpc_errors import from_rpc_error
from replog.v1 import log_pb2

__all__ = ["NOTHING_WRITTEN", "AppendStreams", "Pipeline", "unimplemented"]

WATCHDOG_INTERVAL_S = 0.1
UNARY_THREADS = 2  # threads that take the answers of unary Appends (nodes without a stream)

Answer = Callable[[log_pb2.AppendStreamResponse | None, ReplogError | None], None]


class LogStub(Protocol):
    AppendStream: Any
    Append: Any


class _Stream:
    """One AppendStream call: requests in order, answers matched by position."""

    def __init__(
        self,
        address: str,
        stub: LogStub,
        routing: Routing,
        on_unimplemented: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.address = address
        self._routing = routing
        self._on_unimplemented = on_unimplemented
        self._lock = threading.Lock()
        self._requests: queue.SimpleQueue[log_pb2.AppendRequest | None] = queue.SimpleQueue()
        self._pending: deque[tuple[float, Answer]] = deque()  # (sent at, answer), in order
        self.broken = False
        self._expired = False
        self._call = stub.AppendStream(self._outgoing())
        self._reader = threading.Thread(
            target=self._read, name=f"replog-append-stream-{address}", daemon=True
        )
        self._reader.start()

    def _outgoing(self) -> Iterator[log_pb2.AppendRequest]:
        while True:
            request = self._requests.get()
            if request is None:
                return
            yield request

    def send(self, request: log_pb2.AppendRequest, answer: Answer) -> bool:
        """Write `request`; `answer` gets its response or error. False: the stream broke."""
        with self._lock:
            if self.broken:
                return False
            self._pending.append((time.monotonic(), answer))
            self._requests.put(request)
            return True

    def oldest_s(self, now: float) -> float:
        """How long the oldest unanswered request has waited (0: none)."""
        with self._lock:
            return now - self._pending[0][0] if self._pending else 0.0

    def expire(self) -> None:
        """No answer in time: end the stream (its requests fail as timed out)."""
        self._expired = True
        self._call.cancel()

    def close(self) -> None:
        """Half-close: the server answers what it has, then ends the stream."""
        with self._lock:
            self.broken = True
        self._requests.put(None)

    def cancel(self) -> None:
        self.close()
        self._call.cancel()

    def _read(self) -> None:
        err: ReplogError | None = None
        try:
            for response in self._call:
                with self._lock:
                    _, answer = self._pending.popleft()
                self._routing.answered(self.address)
                answer(response, None)
            err = UnavailableError("the append stream ended", address=self.address)
        except grpc.RpcError as exc:
            if self._expired:
                err = DeadlineExceededError("no answer on the append stream before the deadline")
            else:
                err = from_rpc_error(exc)
                if unimplemented(err):
                    self._on_unimplemented(self.address)
                elif isinstance(err, TransportError):  # grpc's own failure: as in aio
                    err = UnavailableError(f"the append stream failed: {err.message}")
        finally:
            with self._lock:
                self.broken = True
                left = list(self._pending)
                self._pending.clear()
            self._requests.put(None)  # ends the request iterator
        if left:
            assert err is not None
            failed = self._routing.failed(err, self.address, idempotent=True)
            for _, answer in left:
                answer(None, failed)


class AppendStreams:
    """One AppendStream per node address, opened on first use, replaced once broken."""

    def __init__(self, stub: Callable[[str], LogStub], routing: Routing, timeout_s: float) -> None:
        self._stub = stub
        self._routing = routing
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._streams: dict[str, _Stream] = {}
        self._closed = threading.Event()
        self._watchdog: threading.Thread | None = None
        self.unary_only: set[str] = set()  # nodes that answered UNIMPLEMENTED
        self._unary: ThreadPoolExecutor | None = None

    def get(self, address: str) -> _Stream:
        with self._lock:
            stream = self._streams.get(address)
            if stream is None or stream.broken:
                stub = self._stub(address)
                stream = self._streams[address] = _Stream(
                    address, stub, self._routing, self.unary_only.add
                )
            if self._watchdog is None:
                self._watchdog = threading.Thread(
                    target=self._watch, name="replog-append-watchdog", daemon=True
                )
                self._watchdog.start()
            return stream

    def _watch(self) -> None:
        while not self._closed.wait(WATCHDOG_INTERVAL_S):
            now = time.monotonic()
            with self._lock:
                streams = list(self._streams.values())
            for stream in streams:
                if stream.oldest_s(now) > self.timeout_s:
                    stream.expire()

    def send_unary(self, address: str, request: log_pb2.AppendRequest, answer: Answer) -> None:
        """`request` as a unary Append to `address` (a node without AppendStream), sent now
        (the sender thread sends a partition's batches in order; the node takes them in
        that order, as it does a stream's); `answer` gets its offsets (as a stream's answer)
        or its error, in a worker thread (never in the caller's: it holds the pipeline)."""
        with self._lock:
            if self._unary is None:
                self._unary = ThreadPoolExecutor(UNARY_THREADS, "replog-append-unary")
            pool = self._unary
        try:
            call = self._stub(address).Append.future(request, timeout=self.timeout_s)
        except ValueError as exc:  # the client's channel was closed under the call
            pool.submit(answer, None, ShuttingDownError(f"the client is closed: {exc}"))
            return

        def done(call: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the pool is shut down: client closed
                pool.submit(self._unary_answer, address, call, answer)

        call.add_done_callback(done)

    def _unary_answer(self, address: str, call: Any, answer: Answer) -> None:
        try:
            resp = call.result()
        except grpc.RpcError as exc:
            answer(None, self._routing.failed(from_rpc_error(exc), address, idempotent=True))
            return
        answer(
            log_pb2.AppendStreamResponse(
                base_offset=resp.base_offset,
                last_offset=resp.last_offset,
                high_watermark=resp.high_watermark,
            ),
            None,
        )

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            streams = list(self._streams.values())
            self._streams.clear()
            pool, self._unary = self._unary, None
        for stream in streams:
            stream.cancel()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


class _Item:
    """A batch's driver side: its values, acks and future (the rules hold the rest)."""

    __slots__ = ("acks", "future", "values")

    def __init__(self, values: list[bytes], acks: int, future: Future[AppendResult]) -> None:
        self.values = values
        self.acks = acks
        self.future = future


class Pipeline(Limits):
    """Idempotent batches pipelined over AppendStreams (see the module doc): a thread-driven
    `pipeline_rules.PipelineRules`."""

    def __init__(
        self,
        streams: AppendStreams,
        routing: Routing,
        sequences: Sequences,
        identity: Callable[[], Identity],
        reroute: Callable[[ReplogError, str, int], bool],
        retry: RetryPolicy,
        **limits: Unpack[PipelineLimits],
    ) -> None:
        super().__init__(sequences, functools.partial(Attempts, retry), identity, reroute, **limits)
        self._rules: PipelineRules[_Item]
        self._identity: Callable[[], Identity]
        self._reroute: Callable[[ReplogError, str, int], bool]
        self._streams = streams
        self._routing = routing
        self._cond = threading.Condition()
        self._closing = False
        self._sender = threading.Thread(target=self._run, name="replog-pipeline", daemon=True)
        self._sender.start()

    def _busy(self) -> bool:
        """Batches queued or in flight (a test's probe)."""
        with self._cond:
            return self._rules.busy()

    # -- API --------------------------------------------------------------------------------

    def submit(
        self,
        topic: str,
        partition: int,
        values: list[bytes],
        acks: int,
        future: Future[AppendResult] | None = None,
    ) -> Future[AppendResult]:
        """Queue one batch (after the partition's earlier ones); its future gets the offsets."""
        fut: Future[AppendResult] = future if future is not None else Future()
        with self._cond:
            if self._closing:
                raise ShuttingDownError("the pipeline is closed")
            item = _Item(values, acks, fut)
            self._rules.submit(topic, partition, item, len(values), sum(map(len, values)))
            self._cond.notify_all()
        return fut

    def close(self, wait_s: float | None = None) -> None:
        """Stop once every queued batch is answered (or failed), or after `wait_s` (None:
        no limit), when the batches left fail with SHUTTING_DOWN (outcome unknown). The
        streams stay open: they belong to the client (`Client.close` ends them)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._sender.join(wait_s)
        if not self._sender.is_alive():
            return
        with self._cond:
            left = self._rules.abandon()  # answers arriving from now on are ignored
            self._cond.notify_all()  # the sender sees nothing left and returns
        err = ShuttingDownError(
            f"the client closed after waiting {wait_s} s for this batch: its outcome is unknown"
        )
        for batch in left:
            if not batch.payload.future.done():
                batch.payload.future.set_exception(err)

    # -- sending (the sender thread) ----------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closing and not self._rules.busy():
                    return
                sends, need, wait_s = self._rules.next(time.monotonic())
                for send in sends:
                    self._send(send)
                if need is None:
                    self._cond.wait(wait_s)
                    continue
            self._outside_lock(need)

    def _outside_lock(self, need: Need[_Item]) -> None:
        """Calls that may block on the network, made without the lock: the producer's
        identity (InitProducer), or a reroute (maybe a metadata refresh)."""
        if isinstance(need, Reroute):
            topic, partition = need.partition.key
            moved = self._reroute(need.error, topic, partition)
            with self._cond:
                self._rules.rerouted(need, moved, time.monotonic())
                self._cond.notify_all()
            return
        try:
            self._identity()
        except ReplogError as exc:
            with self._cond:
                failures = self._rules.identity_failed(exc)
                self._cond.notify_all()
            _settle(failures)

    def _send(self, send: Send[_Item]) -> None:
        batch, item = send.batch, send.batch.payload
        assert batch.identity is not None
        topic, partition = batch.key
        request = log_pb2.AppendRequest(
            topic=topic,
            partition=partition,
            values=item.values,
            acks=item.acks,  # type: ignore[arg-type]  # the enum's wire number
            producer_id=batch.identity.producer_id,
            producer_epoch=batch.identity.producer_epoch,
            base_sequence=batch.base_sequence,
        )
        generation = send.generation

        def answer(response: log_pb2.AppendStreamResponse | None, err: ReplogError | None) -> None:
            self._answered(batch, generation, response, err)

        address = self._routing.address(topic, partition)
        while address not in self._streams.unary_only:
            if self._streams.get(address).send(request, answer):
                return
            # broken between get and send: the next get opens a new stream, unless the node
            # said it has no AppendStream (noted before the stream counts as broken)
        self._streams.send_unary(address, request, answer)

    # -- answers (stream reader threads) ------------------------------------------------------

    def _answered(
        self,
        batch: Batch[_Item],
        generation: int,
        response: log_pb2.AppendStreamResponse | None,
        err: ReplogError | None,
    ) -> None:
        if err is None and response is not None and response.HasField("error"):
            e = response.error
            err = error_from_reason(e.reason, e.message, dict(e.metadata))
        with self._cond:
            if err is None:
                acked = self._rules.acked(batch)
                failures: Failures[_Item] = []
            else:
                acked = False
                failures = self._rules.failed(batch, generation, err)
            self._cond.notify_all()
        if acked:
            assert response is not None
            result = AppendResult(
                response.base_offset, response.last_offset, response.high_watermark
            )
            if not batch.payload.future.done():
                batch.payload.future.set_result(result)
        _settle(failures)


def _settle(failures: Failures[_Item]) -> None:
    for batch, err in failures:
        if not batch.payload.future.done():
            batch.payload.future.set_exception(err)
