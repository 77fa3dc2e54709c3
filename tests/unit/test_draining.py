"""`draining`: once the node stops, request streams end at their read with UNAVAILABLE
SHUTTING_DOWN and its ErrorInfo (after what the handler answered), health `Watch` sends
NOT_SERVING and ends the same way, and `server.stop(grace)` does not wait for the grace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from replog.errors import ShuttingDownError
from replog.server.edge.draining import Draining, Health
from replog.server.edge.handler_chain import serve_through

GRACE_S = 60.0  # never reached: a stop that waited for it would fail the test's deadline
DEADLINE_S = 30.0


def reason(err: grpc.aio.AioRpcError) -> tuple[str, str]:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None and status.details, err
    info = error_details_pb2.ErrorInfo()
    status.details[0].Unpack(info)
    return err.code().name, info.reason


async def echo(requests: AsyncIterator[bytes], _context: Any) -> AsyncIterator[bytes]:
    async for request in requests:
        yield request


async def count(requests: AsyncIterator[bytes], _context: Any) -> bytes:
    seen = 0
    async for _request in requests:  # lets ShuttingDownError escape, as Exchange would
        seen += 1
    return b"%d" % seen


def run(test: Callable[[grpc.aio.Server, Draining, grpc.aio.Channel], Awaitable[None]]) -> None:
    async def main() -> None:
        draining = Draining()
        server = grpc.aio.server()
        serve_through(server, [draining])
        handlers = {
            "Echo": grpc.stream_stream_rpc_method_handler(echo),
            "Count": grpc.stream_unary_rpc_method_handler(count),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.T", handlers),))
        health_pb2_grpc.add_HealthServicer_to_server(Health(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        try:
            await test(server, draining, channel)
        finally:
            await channel.close()
            await server.stop(0)

    asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


def test_an_idle_stream_ends_with_shutting_down_after_its_answers_and_stop_does_not_wait() -> None:
    async def test(server: grpc.aio.Server, draining: Draining, channel: grpc.aio.Channel) -> None:
        call = channel.stream_stream("/t.T/Echo")()
        await call.write(b"one")
        await call.write(b"two")
        assert await call.read() == b"one"
        assert await call.read() == b"two"
        draining.begin()  # the handler waits in its next read
        try:
            while await call.read() is not grpc.aio.EOF:
                raise AssertionError("no more answers")
        except grpc.aio.AioRpcError as err:
            assert reason(err) == ("UNAVAILABLE", "SHUTTING_DOWN")
        else:
            raise AssertionError("the stream ended without its status")
        await server.stop(GRACE_S)  # nothing left to wait for (the test's deadline: 30 s)

    run(test)


def test_a_handler_that_lets_the_error_escape_and_a_stream_started_late_get_the_status() -> None:
    async def test(server: grpc.aio.Server, draining: Draining, channel: grpc.aio.Channel) -> None:
        idle = channel.stream_unary("/t.T/Count")()
        await idle.write(b"x")
        await asyncio.sleep(0)  # (it ends either way: waiting in a read, or at its next one)
        draining.begin()
        late = channel.stream_unary("/t.T/Count")()
        for call in (idle, late):
            try:
                await call
            except grpc.aio.AioRpcError as err:
                assert reason(err) == ("UNAVAILABLE", "SHUTTING_DOWN")
            else:
                raise AssertionError("ended without the status")

    run(test)


def test_reads_end_with_shutting_down_and_other_cancels_still_cancel() -> None:
    async def main() -> None:
        draining = Draining()
        stuck: asyncio.Queue[int] = asyncio.Queue()

        async def requests() -> AsyncIterator[int]:
            while True:
                yield await stuck.get()

        async def read_all(out: list[int]) -> None:
            async for value in draining.reads(requests()):
                out.append(value)

        got: list[int] = []
        reader = asyncio.ensure_future(read_all(got))
        stuck.put_nowait(1)
        while not got:
            await asyncio.sleep(0)
        other = asyncio.ensure_future(read_all([]))
        await asyncio.sleep(0)
        other.cancel()  # a cancel that is not the node stopping stays a cancel
        try:
            await other
        except asyncio.CancelledError:
            pass
        else:
            raise AssertionError("the cancel was lost")
        draining.begin()
        try:
            await reader
        except ShuttingDownError:
            pass
        else:
            raise AssertionError("the read did not end")
        assert got == [1]
        assert reader.cancelling() == 0  # nothing left pending on the task

    asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


def test_health_watch_sends_not_serving_then_ends_with_shutting_down() -> None:
    async def main() -> None:
        health = Health()
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)  # type: ignore[no-untyped-call]
            call = stub.Watch(health_pb2.HealthCheckRequest(service=""))
            seen = [(await call.read()).status]
            await health.enter_graceful_shutdown()
            try:
                while True:
                    seen.append((await call.read()).status)
            except grpc.aio.AioRpcError as err:
                assert reason(err) == ("UNAVAILABLE", "SHUTTING_DOWN")
            status = health_pb2.HealthCheckResponse
            assert seen == [status.SERVING, status.NOT_SERVING]
            # a Watch opened after the stop began: the status, then the end at once
            late = stub.Watch(health_pb2.HealthCheckRequest(service=""))
            assert (await late.read()).status == status.NOT_SERVING
            try:
                await late.read()
            except grpc.aio.AioRpcError as err:
                assert reason(err) == ("UNAVAILABLE", "SHUTTING_DOWN")
            else:
                raise AssertionError("the late Watch did not end")
            await server.stop(GRACE_S)

    asyncio.run(asyncio.wait_for(main(), DEADLINE_S))
