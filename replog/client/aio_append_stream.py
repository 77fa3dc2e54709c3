"""Appends over AppendStream for the asyncio client (`AsyncClient`): one stream per node.

`AsyncAppendStreams` keeps one AppendStream call per node address (`_AioStream`, a
`grpc.aio` stream-stream call): requests are written in order, one write at a time, and a
reader task gives each answer to the request at the same position (the server answers in
request order). A stream that breaks (the node went away, the server ended it) fails every
request it had not answered with the error the call ended with (`Routing.failed`: a node
that does not answer is passed over); the next request opens a new stream. A request not
answered within `timeout_s` ends its stream: it and every request behind it fail with
DEADLINE_EXCEEDED (outcome unknown, as for a unary call that timed out; an idempotent
producer's resend of it is answered with its first offsets).

A node that answers the stream with UNIMPLEMENTED (a server from before AppendStream) is
remembered (`unary_only`): the client sends that node unary Appends from then on
(`append_stream.unimplemented`). Nothing was appended by such a refused stream.

How `AsyncClient` numbers and sends an idempotent batch over it (`AsyncClient._append`):
under the partition's lock it takes the batch's sequence numbers and writes the request, so
that concurrent appends reach the leader in sequence order; it awaits the answer outside
the lock, so up to `PARTITION_IN_FLIGHT_MAX` batches per partition are in flight (Kafka's
`max.in.flight.requests.per.connection`, 5: the leader recognises a resend of any of the
last 5 batches). A failed batch is resent alone, with the same numbers, within its
`RetryPolicy`, to wherever routing says the leader is now; a batch behind it that arrived
first is answered OUT_OF_ORDER_SEQUENCE (retriable) and resent after a backoff: the
leader appends a partition's batches only in sequence order, each once.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import grpc

from replog.client.routing import Routing
from replog.errors import DeadlineExceededError, ReplogError, UnavailableError, error_from_reason
from replog.rpc_errors import from_rpc_error
from replog.v1 import log_pb2

PARTITION_IN_FLIGHT_MAX = 5
_EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]  # what read() returns at the end


class _AioStream:
    """One AppendStream call: requests in order, answers matched by position."""

    def __init__(self, address: str, stub: Any, routing: Routing, timeout_s: float) -> None:
        self.address = address
        self._routing = routing
        self._timeout_s = timeout_s
        self._call = stub.AppendStream()
        self._pending: deque[asyncio.Future[log_pb2.AppendStreamResponse]] = deque()
        self._writing = asyncio.Lock()
        self.broken: ReplogError | None = None  # why the stream ended (None: open)
        self._expired = False
        self._reader = asyncio.ensure_future(self._read())

    async def send(self, request: log_pb2.AppendRequest) -> asyncio.Future[Any]:
        """Write `request`; the returned future gets its answer (`AppendStreamResponse`) or
        the `ReplogError` that ended the stream first."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[log_pb2.AppendStreamResponse] = loop.create_future()
        async with self._writing:
            if self.broken is not None:
                raise self.broken
            self._pending.append(fut)
            try:
                await self._call.write(request)
            except (grpc.RpcError, asyncio.InvalidStateError) as exc:
                # The call ended under the write: the reader fails what was pending (this one
                # included) with the call's status; wait for it.
                await asyncio.wait([self._reader], timeout=self._timeout_s)
                if not fut.done():
                    err = self._error(exc)
                    fut.set_exception(self._routing.failed(err, self.address, idempotent=True))
        return fut

    async def answer(self, fut: asyncio.Future[Any]) -> log_pb2.AppendStreamResponse:
        """The answer of a request sent on this stream, within `timeout_s`: past it the
        stream ends (DEADLINE_EXCEEDED for each of its requests)."""
        try:
            response: log_pb2.AppendStreamResponse = await asyncio.wait_for(
                asyncio.shield(fut), self._timeout_s
            )
        except TimeoutError:
            self._expired = True
            self._call.cancel()
            response = await fut  # failed by the reader as the call ends
        if response.HasField("error"):
            e = response.error
            raise error_from_reason(e.reason, e.message, dict(e.metadata))
        return response

    def _error(self, exc: BaseException | None) -> ReplogError:
        """Why the call ended (`exc`: its status; None: it ended without one)."""
        if self._expired:
            return DeadlineExceededError("no answer on the append stream before the deadline")
        if isinstance(exc, grpc.RpcError):
            return from_rpc_error(exc)
        return UnavailableError("the append stream ended", address=self.address)

    async def _read(self) -> None:
        error: BaseException | None = None
        try:
            while True:
                response = await self._call.read()
                if response is _EOF:
                    break
                fut = self._pending.popleft()
                if not fut.done():
                    fut.set_result(response)
        except grpc.RpcError as exc:
            error = exc
        except asyncio.CancelledError:
            error = None
        finally:
            self.broken = self._error(error)
            if self._pending:  # requests left without an answer: routing hears of it once
                failed = self._routing.failed(self.broken, self.address, idempotent=True)
                while self._pending:
                    fut = self._pending.popleft()
                    if not fut.done():
                        fut.set_exception(failed)

    async def close(self) -> None:
        self._call.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)


class AsyncAppendStreams:
    """One AppendStream per node address, opened on first use, replaced once broken; the
    addresses that answered UNIMPLEMENTED (`unary_only`)."""

    def __init__(self, routing: Routing, timeout_s: float) -> None:
        self._routing = routing
        self._timeout_s = timeout_s
        self._streams: dict[str, _AioStream] = {}
        self.unary_only: set[str] = set()

    def get(self, address: str, stub: Any) -> _AioStream:
        stream = self._streams.get(address)
        if stream is None or stream.broken is not None:
            stream = self._streams[address] = _AioStream(
                address, stub, self._routing, self._timeout_s
            )
        return stream

    async def close(self) -> None:
        streams = list(self._streams.values())
        self._streams.clear()
        await asyncio.gather(*(s.close() for s in streams), return_exceptions=True)
