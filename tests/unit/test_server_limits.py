"""Limits, the malformed-body decoder, the log throttle and echo bounds (no network)."""

from __future__ import annotations

import asyncio

import pytest

from replog.errors import (
    InvalidTopicNameError,
    TooManyBytesInFlightError,
    TooManyRequestsError,
    TooManyStreamsError,
)
from replog.server.edge import memory
from replog.server.edge.guard import Malformed, _safe
from replog.server.edge.limits import Limits, LimitsConfig, RequestPool
from replog.server.edge.status import MESSAGE_CHARS_MAX, VALUE_CHARS_MAX, clip, to_status
from replog.server.logs import Throttle
from replog.v1 import log_pb2


def test_calls_past_rpcs_max_are_refused_and_an_ended_call_frees_its_place() -> None:
    limits = Limits(LimitsConfig(rpcs_max=2))
    with limits.rpc(), limits.rpc():
        with pytest.raises(TooManyRequestsError) as info, limits.rpc():
            pass
        assert info.value.retriable and info.value.limit == "rpcs_max"
    assert limits.rpcs == 0
    with limits.rpc():
        assert limits.rpcs == 1


def test_streams_are_limited_per_connection_and_per_node() -> None:
    limits = Limits(LimitsConfig(streams_max=3, streams_per_connection_max=2))
    with limits.stream("a"), limits.stream("a"):
        with pytest.raises(TooManyStreamsError) as info, limits.stream("a"):
            pass
        assert info.value.limit == "streams_per_connection_max"
        with limits.stream("b"):
            with pytest.raises(TooManyStreamsError) as info, limits.stream("c"):
                pass
            assert info.value.limit == "streams_max"
    assert limits.streams == 0 and limits.streams_by_connection == {}


def test_acks_none_bytes_are_bounded_but_a_lone_batch_always_fits() -> None:
    limits = Limits(LimitsConfig(acks_none_bytes_max=100))
    limits.take_acks_none(500)  # larger than the limit, but nothing else is in flight
    with pytest.raises(TooManyBytesInFlightError):
        limits.take_acks_none(1)
    limits.release_acks_none(500)
    limits.take_acks_none(60)
    limits.take_acks_none(40)
    with pytest.raises(TooManyBytesInFlightError) as info:
        limits.take_acks_none(1)
    assert (info.value.limit, info.value.limit_value) == ("acks_none_bytes_max", 100)


@pytest.mark.parametrize(
    "body",
    [b"\xff\xfe\xfd", b"\x10\xff\xff\xff", b"\x0f\x01", b"\x0a\x10ab", b"\x0a\x03\xff\xfe\xfd"],
)
def test_a_body_that_does_not_decode_becomes_malformed_instead_of_raising(body: bytes) -> None:
    decode = _safe(log_pb2.AppendRequest.FromString)
    assert decode is not None
    value = decode(body)
    assert isinstance(value, Malformed) and value.size_bytes == len(body)
    good = decode(log_pb2.AppendRequest(topic="t").SerializeToString())
    assert isinstance(good, log_pb2.AppendRequest) and good.topic == "t"


def test_the_throttle_logs_a_bounded_number_per_interval_and_counts_the_dropped() -> None:
    now = [0.0]
    throttle = Throttle(3, 10.0, clock=lambda: now[0])
    assert [throttle.allow()[0] for _ in range(5)] == [True, True, True, False, False]
    now[0] = 10.0
    assert throttle.allow() == (True, 2)
    assert throttle.allow() == (True, 0)


def test_a_huge_name_is_echoed_as_a_bounded_prefix() -> None:
    name = "x" * 10_240
    err = InvalidTopicNameError(f"invalid topic name {name!r}", topic=name)
    status = to_status(err)
    size = sum(len(k) + len(v) for k, v in status.trailing_metadata)
    assert size < 4096  # far under gRPC's 16 KiB metadata limit
    assert len(status.details) <= MESSAGE_CHARS_MAX + 32
    assert clip(name, VALUE_CHARS_MAX).endswith("...(10240 chars)")
    assert clip("short", VALUE_CHARS_MAX) == "short"


def test_memory_is_released_when_streams_fall_to_half_their_peak_and_to_none() -> None:
    async def run() -> int:
        releaser = memory.MemoryReleaser(interval_s=0.0)
        for n in range(1, 21):
            releaser.streams_opened(n)
        releaser.streams_ended(15)  # above half the peak: nothing
        await asyncio.sleep(0)
        assert releaser.releases == 0
        releaser.streams_ended(10)
        releaser.streams_ended(0)
        assert releaser._pending is not None
        await asyncio.wait_for(releaser._pending, 60)  # a thread: slow on a loaded box
        return releaser.releases

    assert asyncio.run(run()) >= 2


def test_request_bytes_wait_for_room_first_come_first_served_and_a_lone_request_fits() -> None:
    async def run() -> list[str]:
        peaks: list[int] = []
        pool = RequestPool(100, peaks.append)
        order: list[str] = []

        async def call(name: str, reserve: int, real: int, done: asyncio.Event) -> None:
            await pool.reserve(reserve)
            order.append(name)
            pool.resize(reserve, real)
            await done.wait()
            pool.release(real, read=True)

        await pool.reserve(500)  # larger than the pool, but it is empty: a lone one fits
        big_done, small_done = asyncio.Event(), asyncio.Event()
        big = asyncio.create_task(call("big", 80, 80, big_done))
        small = asyncio.create_task(call("small", 10, 10, small_done))
        await asyncio.sleep(0)
        assert order == [] and pool.held_bytes == 500  # both wait, in arrival order
        pool.release(500)
        await asyncio.sleep(0)
        assert order == ["big", "small"] and pool.held_bytes == 90
        cancelled = asyncio.create_task(pool.reserve(50))
        await asyncio.sleep(0)
        cancelled.cancel()  # a call that goes away while it waits takes nothing
        await asyncio.gather(cancelled, return_exceptions=True)
        assert pool.held_bytes == 90
        big_done.set()
        small_done.set()
        await asyncio.gather(big, small)
        assert pool.held_bytes == pool.read_bytes == 0
        assert peaks == [90]  # drained once, at the end: 80 + 10 read (reservations do not count)
        return order

    assert asyncio.run(run()) == ["big", "small"]


def test_a_reservation_shrinks_to_the_real_size_and_wakes_the_waiters() -> None:
    async def run() -> None:
        pool = RequestPool(100)
        await pool.reserve(100)
        waiting = asyncio.create_task(pool.reserve(60))
        await asyncio.sleep(0)
        assert not waiting.done()
        pool.resize(100, 30)  # the message was small: room for the next one
        await asyncio.wait_for(waiting, 5)
        assert pool.held_bytes == 90 and pool.read_bytes == 30

    asyncio.run(run())


def test_memory_is_released_when_a_flood_of_request_bytes_drains() -> None:
    async def run() -> int:
        limits = Limits(LimitsConfig(request_bytes_pool_max=64 * 1024 * 1024))
        limits.memory._interval_s = 0.0
        pool = limits.requests
        await pool.reserve(1024)
        pool.resize(1024, 1024)
        pool.release(1024, read=True)  # a small burst: nothing to give back
        assert limits.memory._pending is None
        size = 40 * 1024 * 1024
        await pool.reserve(size)
        pool.resize(size, size)
        pool.release(size, read=True)
        assert limits.memory._pending is not None
        await asyncio.wait_for(limits.memory._pending, 5)
        return limits.memory.releases

    assert asyncio.run(run()) == 2


def test_a_clipped_message_is_bounded_in_utf8_bytes_so_error_headers_stay_small() -> None:
    """gRPC percent-encodes non-ASCII bytes in grpc-message (3 bytes each): 1024 characters
    of "é" made 9 KB of error headers, which a client refuses at random above 8 KiB."""
    from replog.errors import InvalidTopicNameError
    from replog.server.edge.status import MESSAGE_CHARS_MAX, to_status

    wide = "\u00e9" * 10_000
    cut = clip(wide, MESSAGE_CHARS_MAX)
    assert cut.endswith("...(10000 chars)")
    assert len(cut.encode()) <= MESSAGE_CHARS_MAX + len("...(10000 chars)")
    assert clip("é" * 10, MESSAGE_CHARS_MAX) == "é" * 10  # short text stays whole
    status = to_status(InvalidTopicNameError(f"bad name {wide!r}", topic=wide))
    size = sum(len(k) + len(v) for k, v in status.trailing_metadata)
    assert size < 6_000  # binary details, before base64; the message appears in it once
