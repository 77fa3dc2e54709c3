"""Every call's handler wrapped once per method: the guard, the internal-topic refusal, the
authorizer, in that order (outermost first).

`serve_through(server, wrappers)` makes `server` hand every method to its handler through
one generic handler that looks the method up in the services registered on `server`
(`add_*Servicer_to_server`), wraps the handler with each wrapper's `wrap(method, handler)`,
innermost last in the list first, and keeps the result: a call costs one dict lookup.

Why not grpc.aio interceptors: with interceptors, grpc.aio runs the chain for every call
(a coroutine per interceptor, each awaiting the next, and the lookup) before the handler
starts; these wrappers need the method name only, so the chain is decided once per method.
Measured with bench/compare_commits.py (docs/benchmarks.md, issue 10).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import grpc

if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
    Generic = grpc.GenericRpcHandler[Any, Any]
else:  # the stubs' generics do not exist at run time
    Handler = grpc.RpcMethodHandler
    Generic = grpc.GenericRpcHandler


class Wrapper(Protocol):
    def wrap(self, method: str, handler: Handler) -> Handler:
        """The handler that serves `method` in place of `handler` (which it may call)."""


class WrappedHandlers(Generic):
    """One generic handler: the registered services' handlers, each wrapped once."""

    def __init__(self, wrappers: Sequence[Wrapper]) -> None:
        self.wrappers = tuple(wrappers)
        self.services: list[Generic] = []
        self._handlers: dict[str, Handler] = {}  # only methods that exist: a bounded set

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Handler | None:
        method: str = handler_call_details.method
        handler = self._handlers.get(method)
        if handler is not None:
            return handler
        for service in self.services:
            handler = service.service(handler_call_details)
            if handler is not None:
                break
        if handler is None:
            return None  # an unknown method: grpc answers UNIMPLEMENTED
        for wrapper in reversed(self.wrappers):
            handler = wrapper.wrap(method, handler)
        self._handlers[method] = handler
        return handler


def serve_through(server: grpc.aio.Server, wrappers: Sequence[Wrapper]) -> WrappedHandlers:
    """Route every service registered on `server` from now on through `wrappers`."""
    chain = WrappedHandlers(wrappers)
    server.add_generic_rpc_handlers((chain,))

    def add_generic_rpc_handlers(handlers: Iterable[Generic]) -> None:
        chain.services.extend(handlers)

    server.add_generic_rpc_handlers = add_generic_rpc_handlers  # type: ignore[method-assign,assignment]
    return chain
