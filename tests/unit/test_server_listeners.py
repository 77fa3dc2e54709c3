"""listeners.generic_handlers_only: every method is still served, and grpc.aio's serving loop
waits on one pending request per call instead of one per registered method."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from replog.server.edge.listeners import generic_handlers_only
from replog.v1 import log_pb2, log_pb2_grpc


class FakeLog(log_pb2_grpc.LogServicer):  # type: ignore[misc]
    async def Append(self, request: log_pb2.AppendRequest, context: Any) -> Any:
        return log_pb2.AppendResponse(base_offset=7, last_offset=6 + len(request.values))

    async def StreamFrom(
        self, request: log_pb2.StreamFromRequest, context: Any
    ) -> AsyncIterator[log_pb2.StreamBatch]:
        for offset in (request.offset + 1, request.offset + 2):
            yield log_pb2.StreamBatch(next_offset=offset)


async def serve_and_call(generic_only: bool, waits: list[int]) -> tuple[int, list[int]]:
    """Start a server (generic handlers only or not), call Append and StreamFrom; record the
    number of futures of every asyncio.wait made meanwhile."""
    server = grpc.aio.server()
    if generic_only:
        generic_handlers_only(server)
    log_pb2_grpc.add_LogServicer_to_server(FakeLog(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    real_wait = asyncio.wait

    async def counting_wait(fs: Any, *args: Any, **kwargs: Any) -> Any:
        fs = list(fs)
        waits.append(len(fs))
        return await real_wait(fs, *args, **kwargs)

    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = log_pb2_grpc.LogStub(channel)
            await stub.Append(log_pb2.AppendRequest(topic="t", values=[b"warm"]), timeout=30)
            asyncio.wait = counting_wait  # type: ignore[assignment]
            try:
                request = log_pb2.AppendRequest(topic="t", values=[b"a", b"b"])
                reply = await stub.Append(request, timeout=30)
                since = log_pb2.StreamFromRequest(topic="t", offset=10)
                stream = stub.StreamFrom(since, timeout=30)
                offsets = [batch.next_offset async for batch in stream]
            finally:
                asyncio.wait = real_wait
    finally:
        await server.stop(0)
    return reply.last_offset, offsets


@pytest.mark.parametrize("generic_only", [True, False])
def test_every_method_is_served_with_or_without_registered_methods(generic_only: bool) -> None:
    last_offset, offsets = asyncio.run(serve_and_call(generic_only, []))
    assert last_offset == 8
    assert offsets == [11, 12]


def test_with_generic_handlers_only_each_call_waits_on_one_pending_request() -> None:
    generic: list[int] = []
    registered: list[int] = []
    asyncio.run(serve_and_call(True, generic))
    asyncio.run(serve_and_call(False, registered))
    methods = len(log_pb2.DESCRIPTOR.services_by_name["Log"].methods)
    # grpc.aio waits per call on the generic request plus one per registered method
    assert registered and max(registered) == 1 + methods
    assert generic and max(generic) == 1
