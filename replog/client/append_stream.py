"""Pipelined appends over AppendStream (sync client): several batches in flight per partition.

`AppendStreams` keeps one AppendStream call per node (`_Stream`): requests are written in
order and each answer arrives in the same order, so the stream matches answers to requests
by position. A stream that breaks (the node went away, a deadline passed, the server
ended it) fails every request it had not answered; the next request opens a new stream.

`Pipeline` sends an idempotent producer's batches (`sequences.Sequences`) with up to
`partition_in_flight_max` batches in flight per partition (Kafka's
`max.in.flight.requests.per.connection`, 5) and `in_flight_bytes_max` bytes in flight in
all (a lone batch is always sent); one at a time until the partition has acknowledged a
batch of the current producer id (a leader that does not know the producer accepts any
first sequence, so a later batch must not reach it before the first). Ordering rests on the
sequence numbers: a batch keeps its numbers for all its attempts, and the leader appends a
partition's batches only in sequence order, each once. When a batch fails with a retriable
error (NOT_LEADER, OUT_OF_ORDER_SEQUENCE, a broken stream, ACK_TIMEOUT, ...), every batch
of its partition in flight goes back to the front of the partition's queue, in order, and
the partition is resent from its first unacknowledged batch after a reroute (`Routing` and
the client's `_reroute`, as unary appends do) or a backoff (`retry.Attempts`); answers to
the older sends are ignored unless they acknowledge a batch (a resend of it is then
answered as a duplicate). A batch that fails for good (its error is not retriable, or its
`RetryPolicy` is spent) fails its future, and the client's identity is dropped (the next
batch numbers from 0 under a new producer id). The partition's later batches are then
renumbered under the new identity when the failed one certainly wrote nothing (the request
was refused: INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED, UNAUTHENTICATED), else they
fail too with the same error (their outcome is as unknown as that of a unary append that
raised). A partition never has batches of two identities in flight at once.

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
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import grpc

from replog.client.results import AppendResult
from replog.client.retry import Attempts, RetryPolicy
from replog.client.routing import Routing
from replog.client.sequences import Identity, Sequences
from replog.errors import (
    DeadlineExceededError,
    DuplicateSequenceError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ReplogError,
    ShuttingDownError,
    TransportError,
    UnauthenticatedError,
    UnavailableError,
    error_from_reason,
)
from replog.rpc_errors import from_rpc_error
from replog.v1 import log_pb2

# Errors that say the request was refused before anything was appended.
NOTHING_WRITTEN = (InvalidArgumentError, NotFoundError, PermissionDeniedError, UnauthenticatedError)


def unimplemented(err: ReplogError) -> bool:
    """The node does not know the method (a server from before AppendStream): nothing was
    appended; the client sends that node unary Appends instead."""
    return isinstance(err, TransportError) and err.metadata.get("grpc_code") == "UNIMPLEMENTED"


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


class _Batch:
    __slots__ = (
        "acks",
        "attempts",
        "base_sequence",
        "future",
        "identity",
        "part",
        "size_bytes",
        "values",
    )

    def __init__(
        self,
        part: _Partition,
        values: list[bytes],
        acks: int,
        future: Future[AppendResult],
    ) -> None:
        self.part = part
        self.values = values
        self.acks = acks
        self.future = future
        self.size_bytes = sum(map(len, values))
        self.identity: Identity | None = None
        self.base_sequence = -1  # -1: not numbered yet
        self.attempts: Attempts | None = None


class _Partition:
    __slots__ = (
        "confirmed",
        "generation",
        "in_flight",
        "key",
        "paused_until",
        "queue",
        "retry_error",
    )

    def __init__(self, key: tuple[str, int]) -> None:
        self.key = key
        self.queue: deque[_Batch] = deque()  # to send, in order
        self.in_flight: deque[_Batch] = deque()  # sent in this generation, in order
        self.generation = 0  # bumped when the partition is resent from its first batch
        self.paused_until = 0.0
        self.retry_error: tuple[ReplogError, float] | None = None  # to reroute before resending
        self.confirmed: Identity | None = None  # the identity of the last acknowledged batch


class Pipeline:
    """Idempotent batches pipelined over AppendStreams (see the module doc)."""

    def __init__(
        self,
        streams: AppendStreams,
        routing: Routing,
        sequences: Sequences,
        identity: Callable[[], Identity],
        reroute: Callable[[ReplogError, str, int], bool],
        retry: RetryPolicy,
        *,
        partition_in_flight_max: int = 5,
        in_flight_bytes_max: int = 64 * 1024 * 1024,
    ) -> None:
        if partition_in_flight_max < 1 or in_flight_bytes_max < 1:
            raise InvalidArgumentError("in-flight limits must be >= 1")
        self._streams = streams
        self._routing = routing
        self._sequences = sequences
        self._identity = identity
        self._reroute = reroute
        self._retry = retry
        self.partition_in_flight_max = partition_in_flight_max
        self.in_flight_bytes_max = in_flight_bytes_max
        self._cond = threading.Condition()
        self._parts: dict[tuple[str, int], _Partition] = {}
        self.in_flight_bytes = 0
        self._closing = False
        self._abandoned = False
        self._sender = threading.Thread(target=self._run, name="replog-pipeline", daemon=True)
        self._sender.start()

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
            key = (topic, partition)
            part = self._parts.get(key)
            if part is None:
                part = self._parts[key] = _Partition(key)
            part.queue.append(_Batch(part, values, acks, fut))
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
        left: list[Future[AppendResult]] = []
        with self._cond:
            self._abandoned = True  # answers arriving from now on are ignored
            for part in self._parts.values():
                left += [b.future for b in (*part.in_flight, *part.queue)]
                part.in_flight.clear()
                part.queue.clear()
            self.in_flight_bytes = 0
            self._cond.notify_all()  # the sender sees nothing left and returns
        err = ShuttingDownError(
            f"the client closed after waiting {wait_s} s for this batch: its outcome is unknown"
        )
        for fut in left:
            if not fut.done():
                fut.set_exception(err)

    # -- sending (the sender thread) ----------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closing and not self._busy():
                    return
                need, wait_s = self._send_ready()
                if need is None:
                    self._cond.wait(wait_s)
                    continue
            self._outside_lock(need)

    def _busy(self) -> bool:
        return any(p.queue or p.in_flight for p in self._parts.values())

    def _outside_lock(self, need: _Partition | str) -> None:
        """Calls that may block on the network, made without the lock: the producer's
        identity (InitProducer), or a reroute (maybe a metadata refresh)."""
        if need == "identity":
            try:
                self._identity()
            except ReplogError as exc:
                self._fail_unnumbered(exc)
            return
        assert isinstance(need, _Partition)
        with self._cond:
            pending, need.retry_error = need.retry_error, None
        if pending is None:
            return
        err, backoff_s = pending
        topic, partition = need.key
        rerouted = self._reroute(err, topic, partition)
        with self._cond:
            head = need.queue[0] if need.queue else None
            pause_s = backoff_s
            if head is not None and head.attempts is not None:
                pause_s = head.attempts.pause_s(backoff_s, rerouted)
            need.paused_until = time.monotonic() + pause_s
            self._cond.notify_all()

    def _send_ready(self) -> tuple[_Partition | str | None, float | None]:
        """Send what may go now (lock held); what must be done outside the lock first, and
        how long to wait otherwise."""
        now = time.monotonic()
        wait_s: float | None = None
        for part in self._parts.values():
            if part.retry_error is not None:
                return part, None
            if part.paused_until > now:
                due = part.paused_until - now
                wait_s = due if wait_s is None else min(wait_s, due)
                continue
            while part.queue and len(part.in_flight) < self._window(part):
                batch = part.queue[0]
                if self.in_flight_bytes and (
                    self.in_flight_bytes + batch.size_bytes > self.in_flight_bytes_max
                ):
                    break
                if batch.base_sequence < 0 and not self._number(part, batch):
                    if self._sequences.identity is None:
                        return "identity", None
                    break  # the partition's batches of the old identity come first
                part.queue.popleft()
                self._send(part, batch)
        return None, wait_s

    def _window(self, part: _Partition) -> int:
        """Batches that may be in flight: one until the partition acknowledged a batch of
        the current identity (a leader that does not know the producer accepts any first
        sequence: a later batch must not reach it first; see `aio_pipeline`)."""
        identity = self._sequences.identity
        known = identity is not None and part.confirmed == identity
        return self.partition_in_flight_max if known else 1

    def _number(self, part: _Partition, batch: _Batch) -> bool:
        identity = self._sequences.identity
        if identity is None:
            return False
        if any(b.identity != identity for b in part.in_flight):
            return False
        topic, partition = part.key
        seq = self._sequences.reserve(identity, topic, partition, len(batch.values))
        if seq is None:
            return False
        batch.identity, batch.base_sequence = identity, seq
        return True

    def _send(self, part: _Partition, batch: _Batch) -> None:
        assert batch.identity is not None
        if batch.attempts is None:
            batch.attempts = Attempts(self._retry)
        topic, partition = part.key
        request = log_pb2.AppendRequest(
            topic=topic,
            partition=partition,
            values=batch.values,
            acks=batch.acks,  # type: ignore[arg-type]  # the enum's wire number
            producer_id=batch.identity.producer_id,
            producer_epoch=batch.identity.producer_epoch,
            base_sequence=batch.base_sequence,
        )
        part.in_flight.append(batch)
        self.in_flight_bytes += batch.size_bytes
        generation = part.generation

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
        batch: _Batch,
        generation: int,
        response: log_pb2.AppendStreamResponse | None,
        err: ReplogError | None,
    ) -> None:
        if err is None and response is not None and response.HasField("error"):
            e = response.error
            err = error_from_reason(e.reason, e.message, dict(e.metadata))
        done: list[tuple[Future[AppendResult], AppendResult | ReplogError]] = []
        with self._cond:
            part = batch.part
            if batch.future.done() or self._abandoned:
                return  # acknowledged by another send of it, or failed by `close`
            if err is None:
                assert response is not None
                part.confirmed = batch.identity
                self._forget(part, batch)
                result = AppendResult(
                    response.base_offset, response.last_offset, response.high_watermark
                )
                done.append((batch.future, result))
            elif generation != part.generation:
                return  # an older send of the partition: its resend answers
            elif unimplemented(err):
                self._take_back(part)  # nothing was appended: resent at once, as unary Appends
            else:
                assert batch.attempts is not None
                backoff_s = batch.attempts.budget_left(err)
                if backoff_s is not None:
                    self._resend(part, err, backoff_s)
                else:
                    done.extend(self._give_up(part, batch, err))
            self._cond.notify_all()
        for fut, outcome in done:
            if isinstance(outcome, ReplogError):
                fut.set_exception(outcome)
            else:
                fut.set_result(outcome)

    def _forget(self, part: _Partition, batch: _Batch) -> None:
        if batch in part.in_flight:
            part.in_flight.remove(batch)
            self.in_flight_bytes -= batch.size_bytes
        elif batch in part.queue:
            part.queue.remove(batch)

    def _take_back(self, part: _Partition) -> list[_Batch]:
        """The partition's batches in flight, back to the front of its queue, in order."""
        back = list(part.in_flight)
        part.in_flight.clear()
        self.in_flight_bytes -= sum(b.size_bytes for b in back)
        part.queue.extendleft(reversed(back))
        part.generation += 1
        return back

    def _resend(self, part: _Partition, err: ReplogError, backoff_s: float) -> None:
        self._take_back(part)
        part.retry_error = (err, backoff_s)

    def _give_up(
        self, part: _Partition, batch: _Batch, err: ReplogError
    ) -> list[tuple[Future[AppendResult], AppendResult | ReplogError]]:
        self._forget(part, batch)
        done: list[tuple[Future[AppendResult], AppendResult | ReplogError]] = [(batch.future, err)]
        if isinstance(err, DuplicateSequenceError):
            return done  # written before (a resumed writer's resend): the numbering holds
        assert batch.identity is not None
        self._sequences.abandon(batch.identity)
        self._take_back(part)
        later = [b for b in part.queue if b.identity == batch.identity]
        if isinstance(err, NOTHING_WRITTEN):
            for b in later:  # the gap it leaves means none of them was appended
                b.identity, b.base_sequence = None, -1
        else:
            for b in later:
                part.queue.remove(b)
                done.append((b.future, err))
        return done

    def _fail_unnumbered(self, err: ReplogError) -> None:
        """No identity could be had: the batches waiting for numbers fail with its error."""
        done: list[Future[AppendResult]] = []
        with self._cond:
            for part in self._parts.values():
                for b in [b for b in part.queue if b.base_sequence < 0]:
                    part.queue.remove(b)
                    done.append(b.future)
            self._cond.notify_all()
        for fut in done:
            fut.set_exception(err)
