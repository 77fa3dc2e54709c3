"""Hostile input gets a typed error: malformed bodies, unexpected failures, huge names.

Raw bytes go through a generic channel (`request_serializer=None`), so nothing on the client
side validates them; each answer is decoded the way the client does (by ErrorInfo reason).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from grpc_status import rpc_status

from replog.client import Client, RetryPolicy
from replog.client.errors import from_rpc_error
from replog.errors import (
    InternalError,
    InvalidTopicNameError,
    MalformedRequestError,
    ReplogError,
    TopicNotFoundError,
)
from replog.v1 import admin_pb2, log_pb2
from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration

MALFORMED_BODIES = {
    "garbage": b"\xff\xfe\xfd\xfc garbage \x00\x01",
    "truncated varint": b"\x10\xff\xff\xff",  # field 2 (varint), the value never ends
    "bad wire type": b"\x0f\x01",  # field 1 with wire type 7 (does not exist)
    "truncated length": b"\x0a\x10ab",  # field 1 says 16 bytes, 2 follow
    "invalid utf-8 in a string field": b"\x0a\x03\xff\xfe\xfd",  # topic/name = 3 bad bytes
}
METHODS = {
    "/replog.v1.Log/Append": "unary",
    "/replog.v1.Log/Fetch": "unary",
    "/replog.v1.Log/StreamFrom": "stream",
    "/replog.v1.Admin/CreateTopic": "unary",
    "/replog.v1.Admin/DescribeTopic": "unary",
    "/replog.v1.Replication/Exchange": "client-stream",  # peers' stream: the peer listener
    "/replog.v1.Replication/ExchangeBatches": "client-stream",
    "/replog.v1.Replication/ShareLeaders": "unary",  # the leader directory's news
    "/grpc.health.v1.Health/Watch": "stream",
}
FLOOD_CALLS = 300
LOG_LINES_MAX = 30  # the guard logs at most 10 per 10 s; a slow run may see a few windows


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("hostile")
    # (a peer listener: where Replication is served; never on the client listener)
    server = ServerProcess(work / "data", work, ["--peer-listen", "127.0.0.1:0"]).start()
    yield server
    server.kill()


def call_raw(channel: grpc.Channel, method: str, body: bytes) -> grpc.RpcError:
    if METHODS[method] == "stream":
        stream = channel.unary_stream(method, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as info:
            list(stream(body, timeout=10))
    elif METHODS[method] == "client-stream":
        upload = channel.stream_unary(method, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as info:
            upload(iter([body]), timeout=10)
    else:
        unary = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as info:
            unary(body, timeout=10)
    return info.value


def error_info(err: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None, f"{err.code()} without ErrorInfo: {err.details()}"
    info = error_details_pb2.ErrorInfo()
    status.details[0].Unpack(info)
    return info


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("body", list(MALFORMED_BODIES.values()), ids=list(MALFORMED_BODIES))
def test_a_malformed_request_body_answers_invalid_argument_malformed_request(
    server: ServerProcess, method: str, body: bytes
) -> None:
    peer_call = method.startswith("/replog.v1.Replication/")
    assert server.peer_address
    with grpc.insecure_channel(server.peer_address if peer_call else server.address) as channel:
        err = call_raw(channel, method, body)
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT, (err.code(), err.details())
    assert error_info(err).reason == "MALFORMED_REQUEST"
    assert isinstance(from_rpc_error(err), MalformedRequestError)


def test_a_flood_of_malformed_bodies_logs_a_bounded_number_of_warnings_and_no_tracebacks(
    server: ServerProcess,
) -> None:
    with grpc.insecure_channel(server.address) as channel:
        for i in range(FLOOD_CALLS):
            body = list(MALFORMED_BODIES.values())[i % len(MALFORMED_BODIES)]
            err = call_raw(channel, "/replog.v1.Log/Append", body)
            assert err.code() is grpc.StatusCode.INVALID_ARGUMENT
        # The node still serves well-formed calls on the same connection.
        ok = channel.unary_unary(
            "/replog.v1.Admin/ListTopics",
            request_serializer=admin_pb2.ListTopicsRequest.SerializeToString,
            response_deserializer=admin_pb2.ListTopicsResponse.FromString,
        )
        ok(admin_pb2.ListTopicsRequest(), timeout=10)
    # Every malformed call of this module so far (over 300, in a few seconds) logged at most
    # a few warning lines, the count of the dropped ones in the next, and no traceback.
    text = server.log_text()
    lines = [line for line in text.splitlines() if "rpc.malformed" in line]
    assert 1 <= len(lines) <= LOG_LINES_MAX, text[-3000:]
    assert all("level=warning" in line for line in lines), lines
    assert "Traceback" not in text and "level=error" not in text, text[-3000:]
    counted = re.search(r"^replog_malformed_requests_total (\S+)$", server.metrics(), re.M)
    assert counted is not None and float(counted.group(1)) >= FLOOD_CALLS


def test_a_10kb_topic_name_gets_invalid_topic_name_not_a_transport_error(
    server: ServerProcess,
) -> None:
    name = "n" * 10_240
    with Client(server.address, timeout_s=10, retry=RetryPolicy(attempts_max=1)) as client:
        for call in (
            lambda: client.create_topic(name, 1),
            lambda: client.append(name, 0, [b"x"]),
            lambda: client.fetch(name, 0, 0),
            lambda: client.describe_topic(name),
            lambda: client.delete_topic(name),
        ):
            with pytest.raises(InvalidTopicNameError) as info:
                call()
            assert len(info.value.message) < 2_000
            assert all(len(v) < 300 for v in info.value.metadata.values())
    with grpc.insecure_channel(server.address) as channel:
        err = call_raw(
            channel,
            "/replog.v1.Admin/DescribeTopic",
            admin_pb2.DescribeTopicRequest(name="\u00e9" * 10_000).SerializeToString(),
        )
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(err).reason == "INVALID_TOPIC_NAME"


def test_a_long_but_unknown_valid_name_is_echoed_whole(server: ServerProcess) -> None:
    name = "k" * 200  # valid names are short enough to echo whole
    with (
        Client(server.address, timeout_s=10, retry=RetryPolicy(attempts_max=1)) as client,
        pytest.raises(TopicNotFoundError) as info,
    ):
        client.append(name, 0, [b"x"])
    assert name in info.value.message


def test_reflection_is_served_as_v1_and_v1alpha(server: ServerProcess) -> None:
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    with grpc.insecure_channel(server.address) as channel:
        for version in ("v1", "v1alpha"):
            info = channel.stream_stream(
                f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
                request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
            )
            (reply,) = list(info(iter([request]), timeout=10))
            names = {s.name for s in reply.list_services_response.service}
            assert {"replog.v1.Log", "replog.v1.Admin", "grpc.reflection.v1.ServerReflection"} <= (
                names
            ), names


def test_health_watch_still_works_through_the_guard(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.address) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service="replog.v1.Log"), timeout=10
        )
        assert next(iter(watch)).status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()


def test_an_unexpected_failure_answers_internal_with_a_correlation_id_and_no_internals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAULTY_SERVE_TASK", "rpc")
    server = ServerProcess(tmp_path / "data", tmp_path, module="tests.integration.faulty_serve")
    try:
        server.start()
        with Client(server.address, timeout_s=10, retry=RetryPolicy(attempts_max=1)) as client:
            client.create_topic("t", 1)
            for call in (client.list_topics, lambda: list(_stream_one(client))):
                with pytest.raises(InternalError) as info:
                    call()
                err = info.value
                assert err.reason == "INTERNAL" and not err.retriable
                assert "/" not in err.message and "injected" not in err.message, err.message
                assert err.correlation_id and err.correlation_id in err.message
                text = server.log_text()
                tag = f"correlation_id={err.correlation_id}"
                line = next((ln for ln in text.splitlines() if tag in ln), "")
                assert "event=rpc.failed" in line and "level=error" in line, text[-2000:]
                assert "Traceback" in line and "/srv/secret/replog" in line, line
            assert client.append("t", 0, [b"still serving"]).base_offset == 2  # marker, header
    finally:
        server.kill()


def _stream_one(client: Client) -> Iterator[object]:
    for batch in client.stream("t", 0, 1):
        yield batch
        return


def test_every_error_from_the_server_carries_error_info(server: ServerProcess) -> None:
    """The errors above, and a plain not-found, all decode to a reason (never bare)."""
    with grpc.insecure_channel(server.address) as channel:
        err = call_raw(
            channel,
            "/replog.v1.Log/Fetch",
            log_pb2.FetchRequest(topic="absent", offset=0).SerializeToString(),
        )
    assert error_info(err).reason == "UNKNOWN_TOPIC"
    assert isinstance(from_rpc_error(err), ReplogError)
    assert re.match(r"^[A-Z_]+$", error_info(err).reason)
