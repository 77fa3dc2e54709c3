"""What clients can make a node hold is bounded: idle streams, acks=none bytes, calls.

Memory is the server's RSS from /proc/<pid>/status. Each load is bounded in count and time.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from replog.client import Client, RetryPolicy
from replog.client.errors import from_rpc_error
from replog.errors import (
    LimitExceededError,
    TooManyBytesInFlightError,
    TooManyRequestsError,
    TooManyStreamsError,
)
from replog.v1 import admin_pb2, admin_pb2_grpc, log_pb2, log_pb2_grpc
from tests.integration.servers import ServerProcess
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration

KIB = 1024
MIB = 1024 * KIB
IDLE_STREAMS = 500
STREAMS_PER_CHANNEL = 100  # streams_per_connection_max's default
# The documented bound (docs/api.md, "Limits"): an idle stream holds about two replies of
# stream_bytes_max (64 KiB): one in gRPC's send buffer, one in Python waiting for it. The
# unbounded server held about 4 MiB per stream here (a 1 MiB reply and gRPC's buffers).
STREAM_RSS_BYTES_MAX = 256 * KIB
RSS_RETURN_SLACK_BYTES = 24 * MIB
TOPIC_BYTES = 16 * MIB  # far more than any stream may hold


def rss_bytes(server: ServerProcess) -> int:
    assert server.proc is not None
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * KIB
    raise AssertionError("no VmRSS")


def settled_rss(server: ServerProcess, deadline_s: float = 30.0) -> int:
    """RSS once it stops moving (two readings 0.5 s apart within 2 MiB)."""
    last = rss_bytes(server)
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss_bytes(server)
        if abs(now - last) < 2 * MIB:
            return now
        last = now
    return last


def streams_open(server: ServerProcess) -> int | None:
    """StreamFrom calls open on the node, from its metrics (None: a server without them)."""
    match = re.search(r'^replog_limit_in_use\{limit="streams_max"\} (\S+)$', server.metrics(), re.M)
    return None if match is None else int(float(match.group(1)))


def channels(address: str, count: int) -> list[grpc.Channel]:
    """`count` channels on connections of their own (no shared subchannel)."""
    return [
        grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(count)
    ]


def open_stream(channel: grpc.Channel, topic: str, offset: int = 1, max_bytes: int = 0) -> Any:
    stub = log_pb2_grpc.LogStub(channel)
    call = stub.StreamFrom(
        log_pb2.StreamFromRequest(topic=topic, partition=0, offset=offset, max_bytes=max_bytes),
        timeout=120,
    )
    return call


def first_error(call: Any) -> Exception:
    with pytest.raises(grpc.RpcError) as info:
        next(iter(call))
    return from_rpc_error(info.value)


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    args = getattr(request, "param", [])
    server = ServerProcess(tmp_path / "data", tmp_path, ["--flush", "interval", *args]).start()
    yield server
    server.kill()


POOL_BYTES = 16 * MIB


@pytest.mark.parametrize(
    ("server", "max_bytes"),
    [([], 0), (["--stream-bytes-pool-max", str(POOL_BYTES)], MIB)],
    indirect=["server"],
    ids=["default-replies", "asking-for-1MiB-replies"],
)
def test_idle_streams_hold_a_bounded_amount_of_memory_and_give_it_back_when_they_end(
    server: ServerProcess, max_bytes: int
) -> None:
    """Streams asking for large replies (max_bytes) hold no more than the node's stream pool
    above what default streams hold (500 x 1 MiB would be 500 MiB), each pooled byte being
    held up to three times (the read, the serialized message, gRPC's send buffer)."""
    bound = STREAM_RSS_BYTES_MAX + (3 * POOL_BYTES // IDLE_STREAMS if max_bytes else 0)
    with Client(server.address, timeout_s=30, retry=RetryPolicy(attempts_max=3)) as client:
        client.create_topic("big", 1)
        record = bytes(16 * KIB)
        for _ in range(TOPIC_BYTES // (64 * len(record))):
            client.append("big", 0, [record] * 64)
        for i, _batch in enumerate(client.stream("big", 0, 1)):  # warm up the read path
            if i == 4:
                break
    start = settled_rss(server)
    chans = channels(server.address, IDLE_STREAMS // STREAMS_PER_CHANNEL)
    try:
        calls = [
            open_stream(chans[i % len(chans)], "big", max_bytes=max_bytes)
            for i in range(IDLE_STREAMS)
        ]  # none of them is ever read
        wait_until(lambda: streams_open(server) in (None, IDLE_STREAMS), "every stream is open")
        held = settled_rss(server)
        # The node still answers other calls: one attempt, within a generous deadline (a
        # starved node would miss it; a wall-clock threshold would only measure the machine).
        one = RetryPolicy(attempts_max=1)
        with Client(server.address, timeout_s=30, attempt_timeout_s=30, retry=one) as client:
            assert "big" in client.list_topics()
        per_stream = (held - start) / IDLE_STREAMS
        print(f"RSS {start >> 20} MiB -> {held >> 20} MiB: {per_stream / KIB:.0f} KiB/stream")
        assert per_stream < bound, f"{per_stream / KIB:.0f} KiB per idle stream"
        for call in calls:
            call.cancel()
    finally:
        for chan in chans:
            chan.close()
    wait_until(
        lambda: rss_bytes(server) < start + RSS_RETURN_SLACK_BYTES,
        f"RSS returns near {start >> 20} MiB (now {rss_bytes(server) >> 20} MiB)",
        deadline_s=30,
    )
    # Clients that go away are not server bugs: no error lines, no tracebacks.
    text = server.log_text()
    assert "level=error" not in text and "Traceback" not in text, text[-3000:]


@pytest.mark.parametrize(
    "server", [["--streams-max", "5", "--streams-per-connection-max", "3"]], indirect=True
)
def test_streams_past_their_limits_get_a_typed_retriable_error(server: ServerProcess) -> None:
    with Client(server.address, timeout_s=10) as client:
        client.create_topic("s", 1)
    a, b = chans = channels(server.address, 2)
    try:
        held = [open_stream(a, "s") for _ in range(3)]
        wait_until(lambda: all(c.running() for c in held), "the streams are open")
        time.sleep(0.2)
        err = first_error(open_stream(a, "s"))
        assert isinstance(err, TooManyStreamsError) and err.retriable, err
        assert (err.limit, err.limit_value) == ("streams_per_connection_max", 3)
        held += [open_stream(b, "s") for _ in range(2)]  # another connection: 5 on the node
        time.sleep(0.5)
        err = first_error(open_stream(b, "s"))
        assert isinstance(err, TooManyStreamsError) and err.limit == "streams_max", err
        metrics = server.metrics()
        for name in ("streams_max", "streams_per_connection_max"):
            assert f'replog_limit_refused_total{{limit="{name}"}} 1.0' in metrics, metrics
        assert 'replog_limit_in_use{limit="streams_max"} 5.0' in metrics
        held.pop(0).cancel()
        # Once one ends, a stream may open again.
        wait_until(lambda: _stream_opens(b), "a stream opens once another ended")
    finally:
        for chan in chans:
            chan.close()


def _stream_opens(channel: grpc.Channel) -> bool:
    call = open_stream(channel, "s")
    time.sleep(0.3)
    ok = call.running()
    call.cancel()
    return bool(ok)


@pytest.mark.parametrize(
    "server",
    [["--rpcs-max", "4", "--streams-max", "4", "--streams-per-connection-max", "4"]],
    indirect=True,
)
def test_calls_past_rpcs_max_get_too_many_requests_and_health_still_answers(
    server: ServerProcess,
) -> None:
    with Client(server.address, timeout_s=10) as client:
        client.create_topic("r", 1)
    (chan,) = channels(server.address, 1)
    try:
        held = [open_stream(chan, "r") for _ in range(4)]  # streams are calls too
        time.sleep(0.5)
        with pytest.raises(grpc.RpcError) as info:
            admin_pb2_grpc.AdminStub(chan).ListTopics(admin_pb2.ListTopicsRequest(), timeout=10)
        err = from_rpc_error(info.value)
        assert isinstance(err, TooManyRequestsError) and err.retriable, err
        assert (err.limit, err.limit_value) == ("rpcs_max", 4)
        reply = health_pb2_grpc.HealthStub(chan).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        for call in held:
            call.cancel()
        wait_until(lambda: _lists(chan), "calls are served again once the streams end")
    finally:
        chan.close()


def _lists(channel: grpc.Channel) -> bool:
    try:
        admin_pb2_grpc.AdminStub(channel).ListTopics(admin_pb2.ListTopicsRequest(), timeout=10)
    except grpc.RpcError:
        return False
    return True


FLOOD_CALLS = 100
FLOOD_RECORD_BYTES = 1 * MIB
FLOOD_LIMIT_BYTES = 4 * MIB


@pytest.mark.parametrize(
    "server",
    [["--flush", "always", "--acks-none-bytes-max", str(FLOOD_LIMIT_BYTES)]],
    indirect=True,
)
def test_an_acks_none_flood_is_refused_past_the_bytes_in_flight_limit(
    server: ServerProcess,
) -> None:
    with Client(server.address, timeout_s=30) as client:
        client.create_topic("flood", 1, format="raw")  # plain values from a raw stub below
    request = log_pb2.AppendRequest(
        topic="flood", partition=0, values=[bytes(FLOOD_RECORD_BYTES)], acks=log_pb2.ACKS_NONE
    )
    (chan,) = channels(server.address, 1)
    try:
        stub = log_pb2_grpc.LogStub(chan)
        began = time.monotonic()
        futures = [stub.Append.future(request, timeout=60) for _ in range(FLOOD_CALLS)]
        accepted, refused = 0, 0
        for future in futures:
            try:
                future.result()
                accepted += 1
            except grpc.RpcError as exc:
                err = from_rpc_error(exc)
                assert isinstance(err, TooManyBytesInFlightError), err
                assert isinstance(err, LimitExceededError) and err.retriable
                assert (err.limit, err.limit_value) == ("acks_none_bytes_max", FLOOD_LIMIT_BYTES)
                refused += 1
        assert time.monotonic() - began < 60
    finally:
        chan.close()
    print(f"acks=none flood: {accepted} accepted, {refused} refused")
    assert refused > 0 and accepted > 0, (accepted, refused)
    with Client(server.address, timeout_s=30) as client:
        # Everything accepted is written, nothing else; the node takes new work at once.
        wait_until(
            lambda: client.list_offsets("flood")[0].latest == 1 + accepted,
            "the accepted appends are written",
        )
        # (an idempotent append: its batch header takes offset 1 + accepted)
        assert client.append("flood", 0, [b"after"], acks="all").base_offset == 2 + accepted
