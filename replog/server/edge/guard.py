"""The wire boundary: every call passes here before its handler (`handler_chain.py`).

* Decoding. Each method's request deserializer is replaced by one that never raises: a body
  that is not a valid message of the request type (garbage, a truncated varint, a bad wire
  type, invalid UTF-8 in a string field) becomes a `Malformed` value, and the call ends with
  INVALID_ARGUMENT MALFORMED_REQUEST before the handler runs (a streamed request message:
  when the handler reaches it). Without this, grpc logs an error traceback per bad body and
  answers UNKNOWN. Each is logged at warning, at most `MALFORMED_LOGS_MAX` lines per
  `MALFORMED_LOG_INTERVAL_S` (the next line that is logged counts the dropped ones).
* Limits (`limits`). Calls of the client services (Log, Admin, Groups) hold one of `rpcs_max`;
  `StreamFrom` and `AppendStream` also one of `streams_max` and of
  `streams_per_connection_max` (the connection is `context.peer()`, the client's address
  and port). Refused calls get the typed RESOURCE_EXHAUSTED at once.
* Request bytes (`POOLED_METHODS`: Append). grpc.aio would receive a unary request whole
  before any code of ours runs; these methods are served as calls that read their one
  message themselves, as raw bytes, once the node's request pool has room for it
  (`limits.RequestPool`): what a flood of large requests makes the node allocate is
  bounded by the pool, not by the number of calls. They are decoded here, after the read.

Handlers are wrapped once per method (`handler_chain.WrappedHandlers` keeps the result).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import traceback
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from replog.errors import MalformedRequestError
from replog.server.edge import status
from replog.server.edge.handler_chain import Handler
from replog.server.edge.limits import Limits
from replog.server.logs import Throttle, log

_log = logging.getLogger("replog.server.guard")

MALFORMED_LOGS_MAX = 10
MALFORMED_LOG_INTERVAL_S = 10.0
ERROR_CHARS_MAX = 200
COUNTED_SERVICES = ("/replog.v1.Log/", "/replog.v1.Admin/", "/replog.v1.Groups/")
STREAM_METHODS = ("/replog.v1.Log/StreamFrom", "/replog.v1.Log/AppendStream")
UNCOUNTED_CALLS_HEADROOM = 256
POOLED_METHODS = ("/replog.v1.Log/Append",)
DROP_LOCALS_CHAIN_MAX = 8  # chained errors whose frames `_drop_locals` clears
STREAM_WINDOW_BYTES = 64 * 1024  # HTTP/2's initial stream window (65535) rounded up

Context = grpc.aio.ServicerContext[Any, Any]


class Malformed:
    """A request body that did not decode."""

    __slots__ = ("error", "size_bytes")

    def __init__(self, error: str, size_bytes: int) -> None:
        self.error = error
        self.size_bytes = size_bytes


def _safe(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def decode(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # DecodeError, UnicodeDecodeError, ...: all the sender's fault
            return Malformed(f"{type(exc).__name__}: {exc}", len(data))

    return decode


class Guard:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._throttle = Throttle(MALFORMED_LOGS_MAX, MALFORMED_LOG_INTERVAL_S)

    # -- wrapping ---------------------------------------------------------------------------

    def wrap(self, method: str, h: Handler) -> Handler:
        decode = _safe(h.request_deserializer)
        encode = h.response_serializer
        counted = method.startswith(COUNTED_SERVICES)
        stream = method in STREAM_METHODS
        if h.unary_unary is not None and method in POOLED_METHODS:
            assert decode is not None, method
            return grpc.stream_unary_rpc_method_handler(
                self._pooled(method, h.unary_unary, decode),
                request_deserializer=None,  # raw bytes: measured, then decoded by `_pooled`
                response_serializer=encode,
            )
        if h.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, h.unary_unary, counted),
                request_deserializer=decode,
                response_serializer=encode,
            )
        if h.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._unary(method, h.unary_stream, counted, stream),
                request_deserializer=decode,
                response_serializer=encode,
            )
        if h.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._streamed(method, h.stream_unary, counted, stream),
                request_deserializer=decode,
                response_serializer=encode,
            )
        assert h.stream_stream is not None, method
        return grpc.stream_stream_rpc_method_handler(
            self._streamed(method, h.stream_stream, counted, stream),
            request_deserializer=decode,
            response_serializer=encode,
        )

    def _holding(self, context: Context, counted: bool, stream: bool) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        try:
            if counted:
                stack.enter_context(self.limits.rpc())
            if stream:
                stack.enter_context(self.limits.stream(context.peer() or "?"))
        except BaseException:
            stack.close()  # a refused stream gives its rpc back
            raise
        return stack

    def _unary(
        self, method: str, inner: Callable[..., Any], counted: bool, stream: bool = False
    ) -> Callable[..., Any]:
        """A handler of one request message (its reply: one message, or a stream)."""
        if inspect.isasyncgenfunction(inner):

            async def generate(request: Any, context: Context) -> AsyncIterator[Any]:
                await self._check(method, request, context)
                with await self._enter(context, counted, stream):
                    async for reply in inner(request, context):
                        yield reply

            return generate

        if counted and not stream:  # the common call: no ExitStack, no generator per call
            limits = self.limits

            async def handle_counted(request: Any, context: Context) -> Any:
                if isinstance(request, Malformed):
                    await self._check(method, request, context)
                await status.or_refuse(context, limits.take_rpc)
                try:
                    return await inner(request, context)
                finally:
                    limits.give_rpc()

            return handle_counted

        async def handle(request: Any, context: Context) -> Any:
            await self._check(method, request, context)
            with await self._enter(context, counted, stream):
                return await inner(request, context)

        return handle

    def _pooled(
        self, method: str, inner: Callable[..., Any], decode: Callable[[bytes], Any]
    ) -> Callable[..., Any]:
        """A unary call that reads its request itself once the request pool has room."""
        limits = self.limits
        pool = limits.requests
        copies = pool.COPIES
        worst_bytes = copies * limits.config.message_bytes_max

        async def handle(_requests: AsyncIterator[Any], context: Context) -> Any:
            await status.or_refuse(context, limits.take_rpc)
            try:
                held, read = worst_bytes, False
                await pool.reserve(held)  # before gRPC allocates the message
                try:
                    raw = await context.read()
                    size_bytes = len(raw) if isinstance(raw, bytes) else 0
                    pool.resize(held, copies * size_bytes)
                    held, read = copies * size_bytes, True
                    if isinstance(raw, bytes):
                        request = decode(raw)
                    else:  # the client half-closed without a message
                        request = Malformed("no request message", 0)
                    del raw  # the parsed request is the one copy from here on
                    await self._check(method, request, context)
                    return await inner(request, context)
                except BaseException as exc:
                    request = None
                    _drop_locals(exc)  # the request's copies are freed now, not by the gc
                    raise
                finally:
                    pool.release(held, read=read)
            finally:
                limits.give_rpc()

        return handle

    def _streamed(
        self, method: str, inner: Callable[..., Any], counted: bool, stream: bool = False
    ) -> Callable[..., Any]:
        """A handler of a stream of request messages: each is checked as the handler reads it."""

        async def checked(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
            async for request in requests:
                await self._check(method, request, context)
                yield request

        if inspect.isasyncgenfunction(inner):

            async def generate(
                requests: AsyncIterator[Any], context: Context
            ) -> AsyncIterator[Any]:
                with await self._enter(context, counted, stream):
                    async for reply in inner(checked(requests, context), context):
                        yield reply

            return generate

        async def handle(requests: AsyncIterator[Any], context: Context) -> Any:
            with await self._enter(context, counted, stream):
                return await inner(checked(requests, context), context)

        return handle

    # -- checks -----------------------------------------------------------------------------

    async def _enter(self, context: Context, counted: bool, stream: bool) -> contextlib.ExitStack:
        return await status.or_refuse(context, lambda: self._holding(context, counted, stream))

    async def _check(self, method: str, request: Any, context: Context) -> None:
        if not isinstance(request, Malformed):
            return
        self.limits.malformed += 1
        allowed, dropped = self._throttle.allow()
        if allowed:
            log(
                _log,
                "rpc.malformed",
                logging.WARNING,
                method=method,
                peer=context.peer(),
                size_bytes=request.size_bytes,
                error=status.clip(request.error, ERROR_CHARS_MAX),
                dropped=dropped,
            )
        err = MalformedRequestError(
            f"the request body is not a valid {method.rsplit('/', 1)[-1]} request "
            f"({status.clip(request.error, ERROR_CHARS_MAX)})",
            method=method,
        )
        await status.abort(context, err)


def _drop_locals(exc: BaseException) -> None:
    """Clear the variables of the finished frames that `exc` (and the errors it chains) went
    through. A refused or failed append's frames hold its request and values (MiBs), and the
    traceback an exception keeps is often part of a reference cycle (asyncio tasks, grpc's
    own handling) that only the cycle collector frees, long after the pool gave the bytes
    back: 100 refused 3 MiB appends held 300+ MiB that way. Frames still running are left."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        err = pending.pop()
        if err is None or id(err) in seen or len(seen) >= DROP_LOCALS_CHAIN_MAX:
            continue
        seen.add(id(err))
        traceback.clear_frames(err.__traceback__)
        pending += [err.__context__, err.__cause__]


def server_options(limits: Limits) -> list[tuple[str, int]]:
    """gRPC server options that bound what one connection holds: its HTTP/2 streams (every
    call of the connection) never exceed `rpcs_max` plus the headroom of the uncounted calls,
    and each buffers at most its initial window before its handler reads.
    A client queues calls past it; below it, `rpcs_max` answers first, with a typed error."""
    return [
        ("grpc.max_concurrent_streams", limits.config.rpcs_max + UNCOUNTED_CALLS_HEADROOM),
        # No bandwidth-delay-product probing: with it, grpc sizes every stream's initial
        # window to max(4 MiB, 2 x BDP) while the process is under little memory pressure,
        # and a flood of calls the handlers have not read yet is buffered up to that, per
        # call (150 calls of 3 MiB: +750 MiB RSS, docs/benchmarks.md "Memory under floods").
        # Without it the window stays at STREAM_WINDOW_BYTES: a call whose message has not
        # been asked for (`_pooled`, a stream that has not read on) makes the node buffer
        # at most that much of it. A read that is asked for opens the window to the
        # message's size.
        ("grpc.http2.bdp_probe", 0),
        ("grpc.http2.lookahead_bytes", STREAM_WINDOW_BYTES),
    ]


def maximum_concurrent_rpcs(limits: Limits) -> int:
    """grpc's own limit on calls, a backstop above `rpcs_max` for the calls `rpcs_max` does
    not count (Replication, Health, Reflection): past it grpc answers RESOURCE_EXHAUSTED."""
    return limits.config.rpcs_max + UNCOUNTED_CALLS_HEADROOM
