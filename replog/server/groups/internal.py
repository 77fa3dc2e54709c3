"""Clients may read `__consumer_offsets` but never append to it (a grpc.aio interceptor).

Only group coordinators write that topic (through their replicas, not through Log.Append):
a record a client appended could forge a group's committed offsets past its fencing. An
Append to it is answered INVALID_ARGUMENT before its handler runs. It sits after the guard
(`guard.py`), so it sees decoded requests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

from replog.errors import InvalidArgumentError
from replog.server.status import abort
from replog.server.topics import OFFSETS_TOPIC

if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
    Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:  # the stubs' generics do not exist at run time
    Handler = grpc.RpcMethodHandler
    Interceptor = grpc.aio.ServerInterceptor
Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[Handler]]

APPEND = "/replog.v1.Log/Append"


class InternalTopics(Interceptor):
    def __init__(self) -> None:
        self._wrapped: tuple[Handler, Handler] | None = None  # (Append's, ours): made once

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> Handler:
        handler: Handler | None = await continuation(handler_call_details)
        if handler is None or handler_call_details.method != APPEND:
            return handler  # type: ignore[return-value]
        if self._wrapped is None or self._wrapped[0] is not handler:
            self._wrapped = (handler, self._wrap(handler))
        return self._wrapped[1]

    def _wrap(self, handler: Handler) -> Handler:
        assert handler.unary_unary is not None
        inner = handler.unary_unary

        async def append(request: Any, context: Any) -> Any:
            if getattr(request, "topic", None) == OFFSETS_TOPIC:
                await abort(
                    context,
                    InvalidArgumentError(
                        f"{OFFSETS_TOPIC} is written by group coordinators only",
                        topic=OFFSETS_TOPIC,
                    ),
                )
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            append,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
