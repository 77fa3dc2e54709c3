"""Wrappers every RPC handler goes through: errors to status (via `status`), metrics, logs.

`unary("Method")` wraps an `async def handler(self, request, context)`; `streaming("Method")`
wraps an async generator handler and sends what it yields with `await context.write(...)`,
which returns only once gRPC's flow control has taken the message: the generator is not
resumed (and reads nothing more) while a slow reader has not taken the previous reply, so a
stream holds at most one reply in flight. (Handing grpc.aio the generator itself would let
it pull the next item as soon as the previous one is queued.)

A `ReplogError` ends the call with its status and ErrorInfo; a client cancel is counted as
CANCELLED (a reply that cannot be written because the client went away, too); anything
else is a bug: its traceback is logged (`rpc.failed`) with a fresh
`correlation_id`, and the client gets INTERNAL, reason INTERNAL, a message that names only
that id (no paths, no exception text), and the id in the ErrorInfo metadata.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NoReturn, Protocol, TypeVar

import grpc

from replog.errors import InternalError, ReplogError
from replog.server.edge import status
from replog.server.logs import log
from replog.server.metrics import Metrics

_log = logging.getLogger("replog.server.rpc")

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Context = grpc.aio.ServicerContext[Any, Any]


class HasMetrics(Protocol):
    metrics: Metrics


UnaryHandler = Callable[[Any, Req, Context], Awaitable[Resp]]
StreamHandler = Callable[[Any, Req, Context], AsyncGenerator[Resp, None]]
StreamingHandler = Callable[[Any, Req, Context], Awaitable[None]]


def unary(
    method: str,
) -> Callable[[UnaryHandler[Req, Resp]], UnaryHandler[Req, Resp]]:
    def decorate(fn: UnaryHandler[Req, Resp]) -> UnaryHandler[Req, Resp]:
        async def handler(self: HasMetrics, request: Req, context: Context) -> Resp:
            started = time.perf_counter()
            try:
                async with _Call(self.metrics, method, context):
                    return await fn(self, request, context)
            finally:
                self.metrics.latency.labels(method).observe(time.perf_counter() - started)

        handler.__name__ = fn.__name__
        return handler

    return decorate


def streaming(
    method: str,
) -> Callable[[StreamHandler[Req, Resp]], StreamingHandler[Req]]:
    def decorate(fn: StreamHandler[Req, Resp]) -> StreamingHandler[Req]:
        async def handler(self: HasMetrics, request: Req, context: Context) -> None:
            replies = fn(self, request, context)
            try:
                async with _Call(self.metrics, method, context) as call:
                    async for item in replies:
                        if not await _write(context, item):
                            call.code = "CANCELLED"  # the client went away during the write
                            return
            finally:
                await replies.aclose()  # its finally blocks run now

        handler.__name__ = fn.__name__
        return handler

    return decorate


@dataclass(slots=True)
class _Call:
    """One call's ending, either kind: counted under its status code once it ends (OK,
    CANCELLED, or the code of what it raised); an exception ends it by `_fail`."""

    metrics: Metrics
    method: str
    context: Context
    code: str = "OK"

    async def __aenter__(self) -> _Call:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if isinstance(exc, asyncio.CancelledError):
                self.code = "CANCELLED"
            elif isinstance(exc, Exception):
                self.code = _code(exc)
                await _fail(self.method, self.context, exc)
        finally:
            self.metrics.requests.labels(self.method, self.code).inc()


async def _write(context: Context, item: object) -> bool:
    """Send `item`, waiting for flow control; False when the call ended under the write
    (the client cancelled or went away: grpc fails the send operation, and drops that
    failure itself once it knows the client closed). Not a bug of ours: no traceback."""
    try:
        await context.write(item)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log(_log, "rpc.write_failed", logging.DEBUG, error=type(exc).__name__)
        return False
    return True


def _code(exc: Exception) -> str:
    """The status code a call that raised `exc` is counted under."""
    return exc.code if isinstance(exc, ReplogError) else "INTERNAL"


async def _fail(method: str, context: Context, exc: Exception) -> NoReturn:
    """End the call for `exc`: a `ReplogError` with its own status, anything else (a bug)
    with INTERNAL and a logged traceback."""
    if isinstance(exc, ReplogError):
        _log_error(method, exc)
        await status.refuse(context, exc)
    await status.refuse(context, _internal(method, exc))


def _log_error(method: str, err: ReplogError) -> None:
    message = status.clip(err.message, status.MESSAGE_CHARS_MAX)
    log(_log, "rpc.error", logging.DEBUG, method=method, reason=err.reason, message=message)


def _internal(method: str, exc: Exception) -> InternalError:
    """Log `exc` (a bug) with its traceback under a new correlation id; the client's error."""
    correlation_id = uuid.uuid4().hex[:16]
    log(
        _log,
        "rpc.failed",
        logging.ERROR,
        exc_info=exc,
        method=method,
        correlation_id=correlation_id,
    )
    return InternalError(
        f"internal error in {method}; the server log has the details under correlation_id="
        f"{correlation_id}",
        correlation_id=correlation_id,
    )
