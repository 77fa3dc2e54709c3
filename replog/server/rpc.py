"""Wrappers every RPC handler goes through: errors to status (via `status`), metrics, logs.

`unary("Method")` wraps an `async def handler(self, request, context)`; `streaming("Method")`
wraps an async generator handler. A `ReplogError` ends the call with its status and
ErrorInfo; a client cancel is counted as CANCELLED; anything else is a bug: logged with its
traceback and answered UNKNOWN by grpc.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

import grpc

from replog.errors import ReplogError
from replog.server import status
from replog.server.logs import log
from replog.server.metrics import Metrics

_log = logging.getLogger("replog.server.rpc")

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Context = grpc.aio.ServicerContext[Any, Any]


class HasMetrics(Protocol):
    metrics: Metrics


UnaryHandler = Callable[[Any, Req, Context], Awaitable[Resp]]
StreamHandler = Callable[[Any, Req, Context], AsyncIterator[Resp]]


def unary(
    method: str,
) -> Callable[[UnaryHandler[Req, Resp]], UnaryHandler[Req, Resp]]:
    def decorate(fn: UnaryHandler[Req, Resp]) -> UnaryHandler[Req, Resp]:
        async def handler(self: HasMetrics, request: Req, context: Context) -> Resp:
            started = time.perf_counter()
            code = "OK"
            try:
                return await fn(self, request, context)
            except ReplogError as err:
                code = err.code
                _log_error(method, err)
                await status.abort(context, err)
                raise AssertionError("abort returned") from err
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except Exception:
                code = "UNKNOWN"
                _log.exception("rpc.failed", extra={"replog_fields": {"method": method}})
                raise
            finally:
                self.metrics.requests.labels(method, code).inc()
                self.metrics.latency.labels(method).observe(time.perf_counter() - started)

        handler.__name__ = fn.__name__
        return handler

    return decorate


def streaming(
    method: str,
) -> Callable[[StreamHandler[Req, Resp]], StreamHandler[Req, Resp]]:
    def decorate(fn: StreamHandler[Req, Resp]) -> StreamHandler[Req, Resp]:
        async def handler(self: HasMetrics, request: Req, context: Context) -> AsyncIterator[Resp]:
            code = "OK"
            try:
                async for item in fn(self, request, context):
                    yield item
            except ReplogError as err:
                code = err.code
                _log_error(method, err)
                await status.abort(context, err)
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except Exception:
                code = "UNKNOWN"
                _log.exception("rpc.failed", extra={"replog_fields": {"method": method}})
                raise
            finally:
                self.metrics.requests.labels(method, code).inc()

        handler.__name__ = fn.__name__
        return handler

    return decorate


def _log_error(method: str, err: ReplogError) -> None:
    log(_log, "rpc.error", logging.DEBUG, method=method, reason=err.reason, message=err.message)
