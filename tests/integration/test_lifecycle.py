"""Crash and shutdown: SIGKILL loses nothing acknowledged under flush=always; SIGTERM drains."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from replog.client import Client, RetryPolicy
from replog.errors import ShuttingDownError, UnavailableError
from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration

WAIT_S = 30.0
Factory = Callable[..., ServerProcess]


def quick_client(server: ServerProcess) -> Client:
    return Client(server.address, timeout_s=WAIT_S, retry=RetryPolicy(attempts_max=1))


def test_sigkill_loses_no_acknowledged_record_under_flush_always(server_factory: Factory) -> None:
    server = server_factory("--flush", "always", "--segment-bytes-max", "4096").start()
    with quick_client(server) as client:
        client.create_topic("durable", 2)
        acked: list[bytes] = []
        for i in range(30):
            values = [b"rec-%d-%d" % (i, j) for j in range(20)]
            res = client.append("durable", i % 2, values)
            assert res.high_watermark == res.last_offset + 1
            if i % 2 == 0:
                acked.extend(values)
    server.signal(signal.SIGKILL)
    assert server.proc is not None and server.proc.wait(WAIT_S) == -signal.SIGKILL
    server.start()
    with quick_client(server) as client:
        (offsets,) = client.list_offsets("durable", [0])
        # Besides the records: the epoch markers of the first leader and of the restarted one,
        # and the header of each of the 15 idempotent batches.
        assert offsets.latest == offsets.log_end_offset == len(acked) + 2 + 15
        got: list[bytes] = []
        offset = 0
        while offset < offsets.latest:
            res = client.fetch("durable", 0, offset)
            got.extend(res.records.values)
            offset = res.next_offset
        assert got == acked
        # after the 15 batch headers and the new leader's marker, the new batch's header
        assert client.append("durable", 0, [b"after"]).base_offset == len(acked) + 2 + 15 + 1


def test_sigterm_ends_streams_flushes_and_exits_cleanly(server_factory: Factory) -> None:
    server = server_factory("--flush", "interval", "--flush-interval-ms", "60000").start()
    client = quick_client(server)
    client.create_topic("drain", 1)
    client.append("drain", 0, [b"x"] * 100)
    stream_error: list[BaseException] = []
    streaming = threading.Event()

    def follow() -> None:
        try:
            for batch in client.stream("drain", 0, 0):
                if batch.next_offset >= 100:
                    streaming.set()
        except BaseException as exc:
            stream_error.append(exc)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    assert streaming.wait(WAIT_S)

    with grpc.insecure_channel(server.address) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service=""), timeout=WAIT_S
        )
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        assert server.terminate() == 0
        statuses = []
        with pytest.raises(grpc.RpcError):
            for update in watch:
                statuses.append(update.status)
    assert health_pb2.HealthCheckResponse.NOT_SERVING in statuses
    thread.join(WAIT_S)
    assert len(stream_error) == 1
    assert isinstance(stream_error[0], ShuttingDownError | UnavailableError)
    client.close()
    assert "server.stopped" in server.log_text()

    server.start()  # the 60 s flush interval never ran: the SIGTERM flushed
    with quick_client(server) as client:
        (offsets,) = client.list_offsets("drain")
        # and the epoch markers of both leaderships, and the one batch's header
        assert offsets.latest == 100 + 2 + 1


def test_a_stopped_server_is_reported_as_unavailable(server_factory: Factory) -> None:
    server = server_factory().start()
    address = server.address
    assert server.terminate() == 0, server.log_text()
    client = Client(address, timeout_s=5, retry=RetryPolicy(attempts_max=2))
    with client, pytest.raises(UnavailableError):
        client.list_topics()


def test_json_logs_are_one_object_per_line(server_factory: Factory) -> None:
    server = server_factory("--log-format", "json").start()
    assert server.terminate() == 0
    events = [json.loads(line)["event"] for line in server.log_text().splitlines() if line]
    # first start on an empty data directory: its identity is decided (written) first
    assert events[:2] == ["identity.decided", "server.serving"]
    assert events[-1] == "server.stopped"
