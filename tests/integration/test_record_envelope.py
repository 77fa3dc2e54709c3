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
from tests.integration.waiting import wait_until

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
        offsets = [f.result(30).offset for f in futures]
    got = _all(idem, "env-producer", 2)
    assert [r.offset for r in got] == offsets
    assert (got[0].key, got[0].headers) == (b"customer-1", (("h", b"1"),))
    assert got[1].timestamp_ms == 42


def test_a_null_value_is_a_tombstone_on_an_envelope_topic_and_refused_on_a_raw_one(
    idem: Client,
) -> None:
    idem.create_topic("env-null", 1, format="envelope")
    with idem.producer("env-null", linger_ms=1) as producer:
        with pytest.raises(InvalidArgumentError, match="str"):
            producer.send("text", key=b"k")  # type: ignore[arg-type]
        offsets = [
            producer.send(None, key=b"k").result(30).offset,  # Kafka's tombstone idiom
            producer.send(b"", key=b"k").result(30).offset,  # empty is not null
            producer.send(None).result(30).offset,
        ]
    idem.append("env-null", 0, [Record(None, key=b"j")])
    got = _all(idem, "env-null", 4)
    assert [r.offset for r in got[:3]] == offsets
    assert [(r.key, r.value) for r in got] == [
        (b"k", None),
        (b"k", b""),
        (None, None),
        (b"j", None),
    ]
    idem.create_topic("raw-null", 1, format="raw")
    with idem.producer("raw-null", linger_ms=1) as producer:
        with pytest.raises(InvalidArgumentError, match="null values"):
            producer.send(None, key=b"k")
        assert producer.send(b"after").result(30).offset >= 0  # the sender thread lives on
    with pytest.raises(InvalidArgumentError, match="null values"):
        idem.append("raw-null", 0, [Record(None)])


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "unary"])
def test_records_sent_one_by_one_keep_each_its_send_time_in_one_batch(
    idem: Client, streaming: bool
) -> None:
    """Plain values sent one by one travel as bytes with a send time each (no Record per
    record): in one batch, mixed with keyed records, each keeps its own time."""
    topic = f"env-send-times-{streaming}"
    idem.create_topic(topic, 1)
    sent: list[tuple[int, int]] = []
    with idem.producer(topic, linger_ms=60_000, streaming=streaming) as producer:
        futures = []
        for i in range(6):
            before = int(time.time() * 1000)
            key = b"k" if i == 3 else None
            futures.append(producer.send(b"v%d" % i, key=key))
            after = int(time.time() * 1000)  # >= this record's send time
            sent.append((before, after))
            wait_until(lambda a=after: int(time.time() * 1000) > a or None, "the clock moves")
        producer.flush()
        offsets = [f.result(30).offset for f in futures]
    assert offsets == list(range(offsets[0], offsets[0] + 6))  # one batch, in order
    got = _all(idem, topic, 6)
    assert [r.value for r in got] == [b"v%d" % i for i in range(6)]
    assert [r.key for r in got] == [None, None, None, b"k", None, None]
    for record, (before, after) in zip(got, sent, strict=True):
        assert before <= record.timestamp_ms <= after
    stamps = [r.timestamp_ms for r in got]
    assert stamps == sorted(stamps) and len(set(stamps)) == 6


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
