"""AppendStream's handler (`replog.server.services.append_stream.answer`) against a fake Log
service: answers in request order, typed errors in place, the window bounds what a stream reads
ahead, and a stream that ends mid-way gives everything back."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

from replog.errors import (
    NotLeaderError,
    PermissionDeniedError,
    RecordTooLargeError,
    ReplogError,
    ShuttingDownError,
)
from replog.server.edge.limits import Limits, LimitsConfig
from replog.server.edge.status import Refused
from replog.server.services.append_stream import answer, error_message
from replog.v1 import log_pb2

DEADLINE_S = 10.0


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """An asyncio scenario as a plain test (each in its own event loop)."""

    @functools.wraps(test)
    def sync() -> None:
        asyncio.run(test())

    return sync


class FakeService:
    """Appends whose completion the test controls; records the order they started in."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.started: list[int] = []
        self.done: dict[int, asyncio.Future[tuple[int, int, int]]] = {}
        self.refuse: dict[int, ReplogError] = {}  # request id -> error at prepare

    async def prepare_append(self, request: log_pb2.AppendRequest) -> int:
        rid = request.partition
        await asyncio.sleep(0)  # prepare may suspend (routing)
        if rid in self.refuse:
            raise self.refuse[rid]
        self.done[rid] = asyncio.get_running_loop().create_future()
        return rid

    async def complete_append(self, prepared: int) -> tuple[int, int, int]:
        self.started.append(prepared)
        return await asyncio.shield(self.done[prepared])  # the owner appends, not us


def request(rid: int, size_bytes: int = 10) -> log_pb2.AppendRequest:
    return log_pb2.AppendRequest(topic="t", partition=rid, values=[b"x" * size_bytes])


async def feed(
    items: list[log_pb2.AppendRequest | Refused], pulled: list[int] | None = None
) -> AsyncIterator[log_pb2.AppendRequest | Refused]:
    for item in items:
        if pulled is not None:
            pulled.append(1)
        yield item


async def collect(
    first: asyncio.Future[log_pb2.AppendStreamResponse],
    replies: AsyncIterator[log_pb2.AppendStreamResponse],
) -> list[log_pb2.AppendStreamResponse]:
    return [await first] + [r async for r in replies]


async def wait_for(condition: object, what: str) -> None:
    async with asyncio.timeout(DEADLINE_S):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.001)


@run
async def test_answers_come_in_request_order_even_when_later_appends_finish_first() -> None:
    service = FakeService(Limits(LimitsConfig()))
    replies = answer(service, feed([request(i) for i in range(5)]))
    first = asyncio.ensure_future(replies.__anext__())
    await wait_for(lambda: len(service.started) == 5, "all five appends started")
    for rid in reversed(range(5)):  # the last finishes first
        service.done[rid].set_result((rid * 10, rid * 10 + 1, 100))
    got = [await first] + [r async for r in replies]
    assert [r.base_offset for r in got] == [0, 10, 20, 30, 40]
    assert service.started == [0, 1, 2, 3, 4]  # started in stream order
    assert service.limits.append_pool_bytes == 0


@run
async def test_a_failed_request_is_answered_with_its_typed_error_and_the_stream_goes_on() -> None:
    service = FakeService(Limits(LimitsConfig()))
    service.refuse[1] = NotLeaderError(
        "node 1 does not lead t/1", leader_id=2, leader_address="127.0.0.1:9"
    )
    denied = PermissionDeniedError("User:bob may not write topic 't'", principal="User:bob")
    items: list[log_pb2.AppendRequest | Refused] = [
        request(0),
        request(1),
        Refused(request(2), denied),
        request(3),
    ]
    replies = answer(service, feed(items))
    first = asyncio.ensure_future(replies.__anext__())
    await wait_for(lambda: len(service.started) == 2, "appends 0 and 3 started")
    service.done[0].set_result((5, 5, 6))
    service.done[3].set_exception(RecordTooLargeError("too big", record_bytes_max=4))
    got = [await first] + [r async for r in replies]
    assert [r.error.reason for r in got] == [
        "",
        "NOT_LEADER",
        "PERMISSION_DENIED",
        "RECORD_TOO_LARGE",
    ]
    assert got[0].base_offset == 5 and not got[0].HasField("error")
    assert got[1].error.metadata["leader_address"] == "127.0.0.1:9"
    assert got[1].error.code == 9  # FAILED_PRECONDITION, as the unary Append's status
    assert got[3].error.metadata["record_bytes_max"] == "4"


@run
async def test_a_stream_reads_no_further_than_its_window_while_answers_are_pending() -> None:
    limits = Limits(LimitsConfig(append_stream_requests_max=3, append_stream_bytes_max=10_000))
    service = FakeService(limits)
    pulled: list[int] = []
    replies = answer(service, feed([request(i, 100) for i in range(20)], pulled))
    first = asyncio.ensure_future(replies.__anext__())
    await wait_for(lambda: len(service.started) == 3, "three appends started")
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(service.started) == 3  # the window is full: nothing more is started
    assert len(pulled) <= 4  # at most one request read and waiting for room
    # the window counts each request's size as read: its values and their framing
    assert limits.append_pool_bytes == sum(request(i, 100).ByteSize() for i in range(3))
    collected = asyncio.ensure_future(collect(first, replies))
    for rid in range(20):
        await wait_for(lambda rid=rid: rid in service.done, f"append {rid} prepared")
        assert limits.append_pool_bytes <= 3 * request(19, 100).ByteSize()  # the largest
        service.done[rid].set_result((rid, rid, rid + 1))
    got = await collected
    assert [r.base_offset for r in got] == list(range(20))
    assert limits.append_pool_bytes == 0


@run
async def test_the_node_pool_holds_streams_back_but_each_may_hold_one_request() -> None:
    limits = Limits(LimitsConfig(append_stream_bytes_pool_max=150))
    service = FakeService(limits)
    replies = answer(service, feed([request(i, 100) for i in range(3)]))
    first = asyncio.ensure_future(replies.__anext__())
    await wait_for(lambda: len(service.started) == 1, "one append started")
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(service.started) == 1  # 200 bytes would pass the pool of 150
    collected = asyncio.ensure_future(collect(first, replies))
    for rid in range(3):
        await wait_for(lambda rid=rid: rid in service.done, f"append {rid} prepared")
        assert len(service.started) == rid + 1  # one at a time
        service.done[rid].set_result((rid, rid, rid + 1))
    assert [r.base_offset for r in await collected] == [0, 1, 2]


@run
async def test_a_stopping_node_ends_the_stream_after_the_answers_before_it() -> None:
    service = FakeService(Limits(LimitsConfig()))
    service.refuse[1] = ShuttingDownError("the server is shutting down")
    replies = answer(service, feed([request(0), request(1), request(2)]))
    first = asyncio.ensure_future(replies.__anext__())
    await wait_for(lambda: 0 in service.done, "append 0 prepared")
    service.done[0].set_result((1, 1, 2))
    assert (await first).base_offset == 1
    with pytest.raises(ShuttingDownError):
        await replies.__anext__()
    assert service.limits.append_pool_bytes == 0


@run
async def test_a_stream_that_ends_mid_way_cancels_only_the_waits_and_gives_its_window_back() -> (
    None
):
    service = FakeService(Limits(LimitsConfig()))
    replies = answer(service, feed([request(i) for i in range(4)]))
    first = asyncio.ensure_future(replies.__anext__())
    await wait_for(lambda: len(service.started) == 4, "all started")
    service.done[0].set_result((0, 0, 1))
    assert (await first).base_offset == 0
    await replies.aclose()  # the client went away
    assert service.limits.append_pool_bytes == 0
    # The appends themselves belong to their partitions: their futures are not touched.
    assert not any(service.done[rid].cancelled() for rid in (1, 2, 3))


def test_an_error_travels_with_the_code_reason_and_clipped_metadata_of_its_status() -> None:
    err = NotLeaderError("x" * 5000, leader_address="a" * 1000)
    message = error_message(err)
    assert message.code == 9 and message.reason == "NOT_LEADER"
    assert len(message.message) < 1100
    assert len(message.metadata["leader_address"]) < 300
