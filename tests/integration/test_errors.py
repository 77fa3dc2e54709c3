"""Every error crosses a real channel with its status code and ErrorInfo reason, and changes
nothing on the server."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from replog.client import Client
from replog.client.errors import from_rpc_error
from replog.errors import (
    EmptyBatchError,
    InvalidArgumentError,
    InvalidTopicNameError,
    OffsetOutOfRangeError,
    PartitionNotFoundError,
    RecordTooLargeError,
    ReplogError,
    TopicExistsError,
    TopicNotFoundError,
)
from replog.v1 import admin_pb2, admin_pb2_grpc, log_pb2, log_pb2_grpc
from tests.integration.servers import ServerProcess
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration


def raw_error(address: str, call: Callable[[grpc.Channel], object]) -> grpc.RpcError:
    with grpc.insecure_channel(address) as channel:
        with pytest.raises(grpc.RpcError) as info:
            call(channel)
        return info.value


def reason_of(err: grpc.RpcError) -> str:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None
    info = error_details_pb2.ErrorInfo()
    status.details[0].Unpack(info)
    assert info.domain == "replog"
    return info.reason


CASES = [
    (
        "append to an unknown topic",
        lambda ch: log_pb2_grpc.LogStub(ch).Append(
            log_pb2.AppendRequest(topic="nope", partition=0, values=[b"x"])
        ),
        grpc.StatusCode.NOT_FOUND,
        "UNKNOWN_TOPIC",
    ),
    (
        "fetch from an invalid topic name",
        lambda ch: log_pb2_grpc.LogStub(ch).Fetch(log_pb2.FetchRequest(topic="a/b", offset=0)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_TOPIC_NAME",
    ),
    (
        "create a topic with zero partitions",
        lambda ch: admin_pb2_grpc.AdminStub(ch).CreateTopic(
            admin_pb2.CreateTopicRequest(name="zero", partitions=0)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
    ),
    (
        "create a topic replicated beyond the cluster",
        lambda ch: admin_pb2_grpc.AdminStub(ch).CreateTopic(
            admin_pb2.CreateTopicRequest(name="rf", partitions=1, replication_factor=3)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
    ),
    (
        "delete an unknown topic",
        lambda ch: admin_pb2_grpc.AdminStub(ch).DeleteTopic(
            admin_pb2.DeleteTopicRequest(name="nope")
        ),
        grpc.StatusCode.NOT_FOUND,
        "UNKNOWN_TOPIC",
    ),
    (
        "describe an unknown topic",
        lambda ch: admin_pb2_grpc.AdminStub(ch).DescribeTopic(
            admin_pb2.DescribeTopicRequest(name="nope")
        ),
        grpc.StatusCode.NOT_FOUND,
        "UNKNOWN_TOPIC",
    ),
    (
        "stream an unknown topic",
        lambda ch: list(
            log_pb2_grpc.LogStub(ch).StreamFrom(log_pb2.StreamFromRequest(topic="nope"))
        ),
        grpc.StatusCode.NOT_FOUND,
        "UNKNOWN_TOPIC",
    ),
]


@pytest.mark.parametrize(("what", "call", "code", "reason"), CASES, ids=[c[0] for c in CASES])
def test_bad_requests_get_the_right_status_code_and_reason(
    shared_server: ServerProcess,
    what: str,
    call: Callable[[grpc.Channel], object],
    code: grpc.StatusCode,
    reason: str,
) -> None:
    err = raw_error(shared_server.address, call)
    assert err.code() is code  # type: ignore[attr-defined]
    assert reason_of(err) == reason
    assert type(from_rpc_error(err)).reason == reason


def expect(cls: type[ReplogError], fn: Callable[[], object]) -> ReplogError:
    with pytest.raises(cls) as info:
        fn()
    assert type(info.value) is cls
    return info.value


def test_the_client_raises_the_servers_typed_errors_and_nothing_changes(
    client: Client, topic: str
) -> None:
    client.append(topic, 0, [b"ok"])
    expect(EmptyBatchError, lambda: client.append(topic, 0, []))
    err = expect(RecordTooLargeError, lambda: client.append(topic, 0, [b"a", b"x" * 5000]))
    assert isinstance(err, RecordTooLargeError) and err.record_bytes_max == 4096
    expect(PartitionNotFoundError, lambda: client.append(topic, 7, [b"x"]))
    expect(TopicNotFoundError, lambda: client.append("missing", 0, [b"x"]))
    expect(InvalidTopicNameError, lambda: client.create_topic("..", 1))
    expect(TopicExistsError, lambda: client.create_topic(topic, 1))
    expect(InvalidArgumentError, lambda: client.create_topic("huge", 10**6))
    (offsets,) = client.list_offsets(topic)
    # Offset 0 is the epoch marker of the topic's first leader (a cluster of one).
    assert (offsets.earliest, offsets.latest, offsets.log_end_offset) == (0, 2, 2)


def test_acks_none_still_refuses_a_record_over_the_limit(client: Client, topic: str) -> None:
    expect(RecordTooLargeError, lambda: client.append(topic, 0, [b"x" * 5000], acks="none"))
    assert client.list_offsets(topic)[0].log_end_offset == 1  # the leader's epoch marker


def test_offset_out_of_range_carries_the_valid_range(client: Client, topic: str) -> None:
    client.append(topic, 0, [b"a", b"b"])  # offsets 1 and 2, after the epoch marker
    err = expect(OffsetOutOfRangeError, lambda: client.fetch(topic, 0, 4))
    assert isinstance(err, OffsetOutOfRangeError)
    assert (err.offset, err.log_start_offset, err.high_watermark) == (4, 0, 3)
    stream = client.stream(topic, 0, 6)
    err = expect(OffsetOutOfRangeError, lambda: next(stream))
    assert isinstance(err, OffsetOutOfRangeError) and err.high_watermark == 3


def test_errors_are_counted_by_status_code_in_metrics(
    shared_server: ServerProcess, client: Client
) -> None:
    with pytest.raises(TopicNotFoundError):
        client.list_offsets("missing-for-metrics")
    # The server counts a call as it ends, which may be just after the client saw the error.
    line = 'replog_requests_total{code="NOT_FOUND",method="ListOffsets"}'
    wait_until(lambda: line in shared_server.metrics(), "the failed call is counted")


def test_an_unknown_acks_value_is_invalid_and_appends_nothing(
    shared_server: ServerProcess, client: Client, topic: str
) -> None:
    err = raw_error(
        shared_server.address,
        lambda ch: log_pb2_grpc.LogStub(ch).Append(
            log_pb2.AppendRequest(topic=topic, partition=0, values=[b"x"], acks=9)
        ),
    )
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert reason_of(err) == "INVALID_ARGUMENT"
    assert client.list_offsets(topic)[0].log_end_offset == 1  # the leader's epoch marker


def test_a_batch_over_the_message_limit_is_refused_by_the_transport(
    client: Client, topic: str
) -> None:
    with pytest.raises(ReplogError) as info:
        client.append(topic, 0, [b"x" * 4000] * 1100)  # 4.4 MB > 4 MiB
    assert info.value.metadata.get("grpc_code") == "RESOURCE_EXHAUSTED"
    assert client.list_offsets(topic)[0].log_end_offset == 1  # the leader's epoch marker
