"""How every stream ends when the node stops: `UNAVAILABLE SHUTTING_DOWN`, with its ErrorInfo.

`server.stop(grace)` returns once every call has ended, at the latest when the grace has
passed (then grpc cancels what is left with a bare `UNAVAILABLE "Cancelling all calls"`).
So every call that would otherwise wait for more input must end by itself once the node
stops, or each stop lasts the whole grace (measured before this module: 5.0 s after a
0.04 s hand-over, every time). A cancelled handler task does not end its call either:
grpc sends no status for it, and the call waits for the grace like an idle one.

* A call that reads a stream of requests (`AppendStream`, the replication `Exchange`,
  server reflection) reads them through `Draining.reads`: once `Draining.begin` runs, the
  read it waits in, or its next one, raises `ShuttingDownError` instead of returning a
  request. What the handler took before is answered first (an `AppendStream` answers every
  request it read, in order, then ends: `append_stream`); the error then ends the call with
  its status (`rpc.streaming`, or here for handlers that let it escape). Only the wait is
  interrupted: a request the handler has taken belongs to it, and what it does with it (an
  append, a delivery to a replica's owner) is not cut short.
* `StreamFrom` and long polls (`Fetch` with `max_wait_ms`) wait on their partition, which
  the node closes (`ReplicaManager.begin_shutdown`): they end at once with the same error.
* A health `Watch` sends NOT_SERVING (health turns NOT_SERVING first) and then ends
  (`Health`).

What remains for the grace is in-flight unary calls (an `acks=all` append waiting for its
quorum) and answers a client does not take (flow control): the grace caps them.
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2

from replog.errors import ReplogError, ShuttingDownError
from replog.server.edge import status
from replog.server.edge.handler_chain import Handler

Context = grpc.aio.ServicerContext[Any, Any]

STOPPING_MESSAGE = "the server is shutting down"


def stopping_error() -> ShuttingDownError:
    return ShuttingDownError(STOPPING_MESSAGE)


class _Reads:
    """One call's requests; `ShuttingDownError` in place of the next once the node stops."""

    __slots__ = ("__weakref__", "_draining", "_interrupted", "_iterator", "_requests", "_task")

    def __init__(self, draining: Draining, requests: AsyncIterator[Any]) -> None:
        self._draining = draining
        self._requests = requests
        self._iterator: AsyncIterator[Any] | None = None  # (made at the first read only)
        self._task: asyncio.Task[Any] | None = None  # the task waiting in a read
        self._interrupted = False

    def __aiter__(self) -> _Reads:
        return self

    async def __anext__(self) -> Any:
        draining = self._draining
        if draining.stopping:
            raise stopping_error()
        iterator = self._iterator
        if iterator is None:
            iterator = self._iterator = self._requests.__aiter__()
            draining._streams.add(self)
        task = self._task = asyncio.current_task()
        try:
            return await iterator.__anext__()
        except asyncio.CancelledError:
            # `interrupt` cancelled the wait (and nobody else cancelled this task too)
            if self._interrupted and task is not None and task.uncancel() == 0:
                raise stopping_error() from None
            raise
        finally:
            self._task = None

    def interrupt(self) -> None:
        """Stop the wait for the next request (a read that completes meanwhile is dropped:
        its request was never taken, so never answered nor performed)."""
        if self._task is not None and not self._interrupted:
            self._interrupted = True
            self._task.cancel()


class Draining:
    """Every call's handler wrapper (`handler_chain`, outermost) that ends request streams
    when the node stops (`begin`)."""

    def __init__(self) -> None:
        self.stopping = False
        self._streams: weakref.WeakSet[_Reads] = weakref.WeakSet()  # (gone once unused)

    def begin(self) -> None:
        """The node stops: every request stream ends at its next read, waiting ones now."""
        self.stopping = True
        for reads in list(self._streams):
            reads.interrupt()

    def reads(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """`requests`, ended with `ShuttingDownError` once the node stops."""
        return _Reads(self, requests)

    def wrap(self, method: str, h: Handler) -> Handler:
        if h.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._streamed(h.stream_unary),
                request_deserializer=h.request_deserializer,
                response_serializer=h.response_serializer,
            )
        if h.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._streamed(h.stream_stream),
                request_deserializer=h.request_deserializer,
                response_serializer=h.response_serializer,
            )
        return h  # one request: nothing to wait for from the client

    def _streamed(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        """`inner` reading its requests through `reads`; a `ReplogError` it lets escape (a
        handler that is not `rpc.streaming`'s) ends the call with its status."""
        if inspect.isasyncgenfunction(inner):

            async def generate(requests: AsyncIterator[Any], context: Context) -> Any:
                try:
                    async for reply in inner(self.reads(requests), context):
                        yield reply
                except ReplogError as err:
                    await status.abort(context, err)

            return generate

        async def handle(requests: AsyncIterator[Any], context: Context) -> Any:
            try:
                return await inner(self.reads(requests), context)
            except ReplogError as err:
                await status.abort(context, err)

        return handle


class Health(health.aio.HealthServicer):  # type: ignore[misc,name-defined]
    """grpc.health.v1 whose `Watch` ends once the node stops: it sends NOT_SERVING (every
    name turns NOT_SERVING first: `enter_graceful_shutdown`), then `UNAVAILABLE
    SHUTTING_DOWN`. The library's own `Watch` waits for a change that never comes."""

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: Context) -> None:
        name = request.service
        unknown = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        serving = health_pb2.HealthCheckResponse.SERVING
        condition = self._server_watchers[name]
        self._watcher_count_by_service[name] += 1
        last = None
        try:
            async with condition:
                while True:
                    now = self._server_status.get(name, unknown)
                    if now != last:
                        await context.write(health_pb2.HealthCheckResponse(status=now))
                    last = now
                    if self._gracefully_shutting_down and now != serving:
                        break  # (still SERVING: its NOT_SERVING is being set, and notified)
                    await condition.wait()
        finally:
            self._watcher_count_by_service[name] -= 1
            if self._watcher_count_by_service[name] == 0:
                del self._server_watchers[name]
                del self._watcher_count_by_service[name]
        await status.abort(context, stopping_error())


async def stop_servers(servers: Sequence[grpc.aio.Server], grace_s: float) -> None:
    """Stop every server at once; each returns when its calls ended, at most `grace_s`."""
    await asyncio.gather(*(server.stop(grace_s) for server in servers))
