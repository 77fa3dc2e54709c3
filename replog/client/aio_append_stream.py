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
(`append_stream.unimplemented`). Nothing was appended by such a refused stream. grpc.aio
sometimes reports such a stream as INTERNAL ("Internal error from Core": a write raced
the server's refusal, measured in about 4 of 10 refused streams here): a stream that ends
so before its first answer is probed with a second call that writes nothing (half-closed
at once: a server that knows the method ends it with OK, one that does not with
UNIMPLEMENTED, with no write to race), and fails its requests as the probe says.

The order of a partition's batches, their window and resends: `aio_pipeline`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import grpc

from replog.client.routing import Routing
from replog.errors import (
    DeadlineExceededError,
    ReplogError,
    TransportError,
    UnavailableError,
    error_from_reason,
)
from replog.rpc_errors import from_code, from_rpc_error
from replog.v1 import log_pb2

_EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]  # what read() returns at the end


class _AioStream:
    """One AppendStream call: requests in order, answers matched by position."""

    def __init__(self, address: str, stub: Any, routing: Routing, timeout_s: float) -> None:
        self.address = address
        self._routing = routing
        self._timeout_s = timeout_s
        self._stub = stub
        self._call = stub.AppendStream()
        self._answered = False  # an answer came: the node knows the method
        self._unimplemented = False
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

    async def _probe(self) -> bool:
        """Whether the node lacks AppendStream: a call that writes nothing (module doc)."""
        call = self._stub.AppendStream(timeout=self._timeout_s)
        try:
            await call.done_writing()
            await call.read()
        except grpc.RpcError as exc:
            return bool(exc.code() is grpc.StatusCode.UNIMPLEMENTED)
        finally:
            call.cancel()
        return False

    def _error(self, exc: BaseException | None) -> ReplogError:
        """Why the call ended (`exc`: its status; None: it ended without one)."""
        if self._expired:
            return DeadlineExceededError("no answer on the append stream before the deadline")
        if self._unimplemented:
            return from_code(grpc.StatusCode.UNIMPLEMENTED, "the node has no AppendStream")
        if isinstance(exc, grpc.RpcError):
            err = from_rpc_error(exc)
            if isinstance(err, TransportError):
                # grpc's own failure (no ErrorInfo), before or after answers: a stream cut
                # by a node that died is sometimes INTERNAL ("Internal error from Core").
                # Its unanswered requests have an unknown outcome: resent (idempotent).
                return UnavailableError(f"the append stream failed: {err.message}")
            return err
        return UnavailableError("the append stream ended", address=self.address)

    async def _read(self) -> None:
        error: BaseException | None = None
        try:
            while True:
                response = await self._call.read()
                if response is _EOF:
                    break
                self._answered = True
                self._routing.answered(self.address)
                fut = self._pending.popleft()
                if not fut.done():
                    fut.set_result(response)
        except grpc.RpcError as exc:
            error = exc
            code = exc.code() if callable(getattr(exc, "code", None)) else None
            if code is grpc.StatusCode.UNIMPLEMENTED:
                self._unimplemented = True
            elif code is grpc.StatusCode.INTERNAL and not self._answered:
                self._unimplemented = await self._probe()
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
