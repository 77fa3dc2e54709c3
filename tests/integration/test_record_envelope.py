"""Envelope topics against a real server: records keep key, headers and timestamp; the
leader refuses values that are not envelopes and stamps log-append time; raw topics stay
as they were (issue 13 item 1)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest

from replog import records
from replog.client import Client, Record, RetryPolicy
from replog.errors import InvalidArgumentError
from replog.v1 import admin_pb2, admin_pb2_grpc, log_pb2, log_pb2_grpc
from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def idem(shared_server: ServerProcess) -> Iterator[Client]:
    with Client(shared_server.address, timeout_s=30, retry=RetryPolicy(attempts_max=3)) as c:
        yield c


def _all(client: Client, topic: str, count: int) -> list[records.ConsumerRecord]:
    consumer = client.consumer(topic, 0, "earliest")
    out: list[records.ConsumerRecord] = []
    for record in consumer:
        assert isinstance(record, records.ConsumerRecord)
        out.append(record)
        if len(out) == count:
            break
    consumer.close()
    return out


def test_records_keep_key_headers_and_timestamp_on_an_envelope_topic(idem: Client) -> None:
    idem.create_topic("env-roundtrip", 1, format="envelope")
    before = int(time.time() * 1000)
    idem.append(
        "env-roundtrip",
        0,
        [
            Record(b"v1", key=b"k1", headers=[("trace", b"t-1")], timestamp_ms=1_000),
            Record(b"v2", key=b""),
            b"plain bytes",
        ],
    )
    after = int(time.time() * 1000)
    got = _all(idem, "env-roundtrip", 3)
    assert [(r.value, r.key, r.headers) for r in got] == [
        (b"v1", b"k1", (("trace", b"t-1"),)),
        (b"v2", b"", ()),
        (b"plain bytes", None, ()),
    ]
    assert got[0].timestamp_ms == 1_000  # create time: the producer's
    assert before <= got[1].timestamp_ms <= after  # none given: the client's clock
    fetched = idem.fetch("env-roundtrip", 0, got[0].offset)
    assert isinstance(fetched.records, records.DecodedRecords)
    assert fetched.records.keys == [b"k1", b"", None]


def test_the_producer_sends_keys_and_headers_and_stamps_each_send(idem: Client) -> None:
    idem.create_topic("env-producer", 1, format="envelope")
    with idem.producer("env-producer", linger_ms=1) as producer:
        futures = [
            producer.send(b"a", key=b"customer-1", headers=[("h", b"1")]),
            producer.send(b"b", timestamp_ms=42),
        ]
        offsets = [f.result(30) for f in futures]
    got = _all(idem, "env-producer", 2)
    assert [r.offset for r in got] == offsets
    assert (got[0].key, got[0].headers) == (b"customer-1", (("h", b"1"),))
    assert got[1].timestamp_ms == 42


def test_log_append_time_replaces_the_producers_timestamp_with_the_leaders(
    idem: Client,
) -> None:
    idem.create_topic("env-append-time", 1, format="envelope", timestamp_type="log_append_time")
    before = int(time.time() * 1000)
    idem.append("env-append-time", 0, [Record(b"x", key=b"k", timestamp_ms=5)] * 3)
    after = int(time.time() * 1000)
    got = _all(idem, "env-append-time", 3)
    assert all(before <= r.timestamp_ms <= after for r in got), [r.timestamp_ms for r in got]
    assert [(r.value, r.key) for r in got] == [(b"x", b"k")] * 3


def test_the_leader_refuses_a_batch_that_is_not_all_envelopes(
    idem: Client, shared_server: ServerProcess
) -> None:
    idem.create_topic("env-refuse", 1, format="envelope")
    good = records.encode(b"ok", timestamp_ms=1)
    with grpc.insecure_channel(shared_server.address) as channel:
        stub = log_pb2_grpc.LogStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as raised:
            stub.Append(
                log_pb2.AppendRequest(topic="env-refuse", partition=0, values=[good, b"raw"])
            )
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "record 1 of the batch" in (raised.value.details() or "")
    offsets = idem.list_offsets("env-refuse")[0]
    assert offsets.latest == offsets.log_end_offset == 1  # the leader's epoch marker only


def test_a_create_without_the_field_is_envelope_and_metadata_says_each_format(
    idem: Client, shared_server: ServerProcess
) -> None:
    """An unset format makes an envelope topic (Kafka's model, the default); raw is asked
    for explicitly."""
    with grpc.insecure_channel(shared_server.address) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name="unset-format", partitions=1))
        admin.CreateTopic(
            admin_pb2.CreateTopicRequest(
                name="raw-asked", partitions=1, format=admin_pb2.TOPIC_FORMAT_RAW
            )
        )
        idem.create_topic("env-meta", 1, timestamp_type="log_append_time")
        names = ["unset-format", "raw-asked", "env-meta"]
        meta = admin.GetMetadata(admin_pb2.GetMetadataRequest(topics=names))
        described = admin.DescribeTopic(admin_pb2.DescribeTopicRequest(name="env-meta"))
    by_name = {t.name: (t.format, t.timestamp_type) for t in meta.topics}
    assert by_name == {
        "unset-format": (admin_pb2.TOPIC_FORMAT_ENVELOPE, admin_pb2.TIMESTAMP_TYPE_CREATE_TIME),
        "raw-asked": (admin_pb2.TOPIC_FORMAT_RAW, admin_pb2.TIMESTAMP_TYPE_CREATE_TIME),
        "env-meta": (admin_pb2.TOPIC_FORMAT_ENVELOPE, admin_pb2.TIMESTAMP_TYPE_LOG_APPEND_TIME),
    }
    assert (described.format, described.timestamp_type) == by_name["env-meta"]
    assert idem.topic_format("raw-asked") == "raw"
    assert idem.topic_format("unset-format") == "envelope"
    # Raw topics hold values only: a record with a key would lose it, so it is refused.
    with pytest.raises(InvalidArgumentError, match="is raw"):
        idem.append("raw-asked", 0, [Record(b"v", key=b"k")])
    idem.append("raw-asked", 0, [b"as before", Record(b"value only")])
    assert idem.fetch("raw-asked", 0, 0).records.values == [b"as before", b"value only"]
