"""Clients may read `__consumer_offsets` but never append to it (a `handler_chain` wrapper).

Only group coordinators write that topic (through their replicas, not through Log.Append):
a record a client appended could forge a group's committed offsets past its fencing. An
Append to it is answered INVALID_ARGUMENT before its handler runs; an AppendStream request
to it is handed to the handler as `status.Refused` (answered with that error in its place,
the stream goes on). It sits after the guard (`guard.py`), so it sees decoded requests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from replog.errors import InvalidArgumentError
from replog.server.control.topics import OFFSETS_TOPIC
from replog.server.edge.handler_chain import Handler
from replog.server.edge.status import Refused, abort

APPEND = "/replog.v1.Log/Append"
APPEND_STREAM = "/replog.v1.Log/AppendStream"


class InternalTopics:
    def wrap(self, method: str, handler: Handler) -> Handler:
        if method == APPEND:
            return self._wrap(handler)
        if method == APPEND_STREAM:
            return self._wrap_stream(handler)
        return handler

    def _wrap_stream(self, handler: Handler) -> Handler:
        assert handler.stream_stream is not None
        inner: Callable[..., Any] = handler.stream_stream  # the aio handler: a coroutine

        async def refusing(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
            async for request in requests:
                if getattr(request, "topic", None) == OFFSETS_TOPIC:
                    yield Refused(request, _refusal())
                else:
                    yield request

        async def append_stream(requests: AsyncIterator[Any], context: Any) -> Any:
            return await inner(refusing(requests), context)

        return grpc.stream_stream_rpc_method_handler(
            append_stream,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _wrap(self, handler: Handler) -> Handler:
        assert handler.unary_unary is not None
        inner = handler.unary_unary

        async def append(request: Any, context: Any) -> Any:
            if getattr(request, "topic", None) == OFFSETS_TOPIC:
                await abort(context, _refusal())
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            append,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _refusal() -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{OFFSETS_TOPIC} is written by group coordinators only", topic=OFFSETS_TOPIC
    )
