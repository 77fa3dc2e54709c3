"""Kafka clients, unchanged, against a real `replog serve --kafka-listen` process: librdkafka
(confluent-kafka), kafka-python and aiokafka produce, consume, list offsets and read the
metadata; what they write reads back through replog's gRPC client with the same key,
value, headers, timestamp and offset, and the other way round; hostile bytes on the Kafka
port get a typed answer or a closed connection and write nothing."""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from replog.client import Client, Record, RetryPolicy
from replog.devcluster import free_port
from replog.kafka import protocol
from replog.kafka.errors import ErrorCode
from replog.kafka.protocol import ApiKey, RequestHeader
from replog.kafka.records import batch_of, decode_batches, encode_batch
from tests.integration.servers import ServerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")

_names = itertools.count()
T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("kafka")
    port = free_port()
    s = ServerProcess(root / "data", root, ["--kafka-listen", f"127.0.0.1:{port}"])
    s.start()
    s.kafka = f"127.0.0.1:{port}"  # type: ignore[attr-defined]
    yield s
    assert s.terminate() == 0


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[Client]:
    with Client(server.address, timeout_s=30, retry=RetryPolicy(attempts_max=5)) as c:
        yield c


def kafka(server: ServerProcess) -> str:
    return str(server.kafka)  # type: ignore[attr-defined]


def new_topic(server: ServerProcess, partitions: int = 1) -> str:
    """A topic created through Kafka's CreateTopics (an envelope topic)."""
    name = f"k{next(_names)}"
    client = admin.AdminClient({"bootstrap.servers": kafka(server)})
    futures = client.create_topics([admin.NewTopic(name, partitions, 1)])
    futures[name].result(30)
    return name


def consume(server: ServerProcess, topic: str, count: int, partition: int = 0) -> list[Any]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": kafka(server),
            "group.id": "unused",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    got: list[Any] = []
    try:
        tp = confluent_kafka.TopicPartition(topic, partition, confluent_kafka.OFFSET_BEGINNING)
        consumer.assign([tp])
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_idempotent_produce_reads_back_through_kafka_and_grpc(
    server: ServerProcess, client: Client, compression: str
) -> None:
    topic = new_topic(server)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": kafka(server),
            "compression.type": compression,
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.num.messages": 7,
        }
    )
    offsets: list[int] = []

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    for i in range(30):
        producer.produce(
            topic,
            key=b"k%d" % i,
            value=b"v%d " % i * 20,
            headers=[("n", b"%d" % i)],
            timestamp=T0 + i,
            on_delivery=delivered,
        )
    assert producer.flush(60) == 0
    assert len(offsets) == 30
    got = consume(server, topic, 30)
    assert [m.offset() for m in got] == sorted(offsets)
    assert [(m.key(), m.value()) for m in got] == [
        (b"k%d" % i, b"v%d " % i * 20) for i in range(30)
    ]
    assert [m.headers() for m in got] == [[("n", b"%d" % i)] for i in range(30)]
    assert [m.timestamp()[1] for m in got] == [T0 + i for i in range(30)]
    # One log, two protocols: the gRPC client reads the same records at the same offsets.
    records = read_grpc(client, topic, 30)
    assert [r.offset for r in records] == [m.offset() for m in got]
    assert [(r.key, r.value, r.timestamp_ms) for r in records] == [
        (m.key(), m.value(), m.timestamp()[1]) for m in got
    ]
    assert [list(r.headers) for r in records] == [[("n", b"%d" % i)] for i in range(30)]


def read_grpc(client: Client, topic: str, count: int) -> list[Any]:
    out: list[Any] = []
    offset = 0
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        result = client.fetch(topic, 0, offset, max_wait_ms=200)
        out += result.records.records()  # type: ignore[union-attr]
        offset = result.next_offset
    return out


def test_records_written_through_grpc_read_back_through_kafka_python(
    server: ServerProcess, client: Client
) -> None:
    kafka_python = pytest.importorskip("kafka")
    topic = f"g{next(_names)}"
    client.create_topic(topic, 1)
    rows = [
        Record(b"value-%d" % i, b"key-%d" % i, [("h", b"%d" % i)], T0 + 7 * i) for i in range(12)
    ]
    first = client.append(topic, 0, rows[:6])
    second = client.append(topic, 0, rows[6:])
    consumer = kafka_python.KafkaConsumer(
        bootstrap_servers=kafka(server), enable_auto_commit=False, consumer_timeout_ms=20000
    )
    try:
        tp = kafka_python.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = []
        for msg in consumer:
            got.append(msg)
            if len(got) == 12:
                break
    finally:
        consumer.close()
    expected = list(range(first.base_offset, first.last_offset + 1))
    expected += range(second.base_offset, second.last_offset + 1)
    assert [m.offset for m in got] == expected
    assert [(m.key, m.value, m.timestamp) for m in got] == [
        (r.key, r.value, r.timestamp_ms) for r in rows
    ]
    assert [list(m.headers) for m in got] == [[("h", b"%d" % i)] for i in range(12)]


def test_compacted_topics_are_created_with_configs_and_null_values_are_tombstones(
    server: ServerProcess, client: Client
) -> None:
    """CreateTopics takes every topic config replog serves (a bad one: INVALID_CONFIG), and a
    null value is a tombstone: read back null through Kafka and None through gRPC, distinct
    from an empty value (Kafka's delete of a key on a compacted topic)."""
    name = f"c{next(_names)}"
    kafka_admin = admin.AdminClient({"bootstrap.servers": kafka(server)})
    configs = {"cleanup.policy": "compact", "min.compaction.lag.ms": "1000"}
    kafka_admin.create_topics([admin.NewTopic(name, 1, 1, config=configs)])[name].result(30)
    described = _configs(kafka_admin, name)
    assert described["cleanup.policy"].value == "compact"
    assert described["min.compaction.lag.ms"].value == "1000"
    bad = f"c{next(_names)}"
    refused = kafka_admin.create_topics([admin.NewTopic(bad, 1, 1, config={"retention.ms": "x"})])
    with pytest.raises(confluent_kafka.KafkaException) as invalid:
        refused[bad].result(30)
    assert invalid.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG
    assert bad not in kafka_admin.list_topics(timeout=30).topics
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka(server), "linger.ms": 5})
    for key, value in ((b"a", b"1"), (b"b", b""), (b"a", None)):
        producer.produce(name, key=key, value=value)
    assert producer.flush(60) == 0
    got = consume(server, name, 3)
    assert [(m.key(), m.value()) for m in got] == [(b"a", b"1"), (b"b", b""), (b"a", None)]
    assert [(r.key, r.value) for r in read_grpc(client, name, 3)] == [
        (b"a", b"1"),
        (b"b", b""),
        (b"a", None),
    ]


def test_raw_topic_records_are_served_with_null_keys(server: ServerProcess, client: Client) -> None:
    topic = f"r{next(_names)}"
    client.create_topic(topic, 1, format="raw")
    client.append(topic, 0, [b"a", b"b", b"c"])
    got = consume(server, topic, 3)
    assert [(m.key(), m.value()) for m in got] == [(None, b"a"), (None, b"b"), (None, b"c")]
    assert all(m.timestamp()[1] > T0 for m in got)  # the leader's append time


def test_metadata_and_list_offsets_by_time_answer_kafka_clients(server: ServerProcess) -> None:
    topic = new_topic(server, partitions=3)
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka(server)})
    for i in range(10):
        producer.produce(topic, value=b"x%d" % i, partition=1, timestamp=T0 + 1000 * i)
    assert producer.flush(30) == 0
    meta = producer.list_topics(topic, timeout=30)
    t = meta.topics[topic]
    assert t.error is None and sorted(t.partitions) == [0, 1, 2]
    assert all(p.leader == 0 and p.replicas == [0] and p.isrs == [0] for p in t.partitions.values())
    assert list(meta.brokers) == [0] and meta.controller_id == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": kafka(server), "group.id": "x"})
    try:
        tp = confluent_kafka.TopicPartition(topic, 1)
        low, high = consumer.get_watermark_offsets(tp, timeout=30)
        at = consumer.offsets_for_times([confluent_kafka.TopicPartition(topic, 1, T0 + 4500)], 30)
        got = consume(server, topic, 10, partition=1)
        assert at[0].offset == got[5].offset()  # the first record at or after the time
        # replog's offsets: an epoch marker (and, for idempotent producers, a batch header)
        # takes an offset, so offsets have gaps, as on a compacted Kafka topic
        assert low == 0 and high == got[-1].offset() + 1
        assert [m.value() for m in got] == [b"x%d" % i for i in range(10)]
        missing = producer.list_topics("no-such-topic", timeout=30).topics["no-such-topic"]
        assert missing.error.code() == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        consumer.close()


def test_aiokafka_produces_and_consumes(server: ServerProcess) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    topic = new_topic(server)

    async def scenario() -> list[Any]:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=kafka(server), compression_type="gzip", enable_idempotence=True
        )
        await producer.start()
        try:
            metas = [
                await producer.send_and_wait(topic, b"v%d" % i, key=b"k%d" % i) for i in range(8)
            ]
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=kafka(server), enable_auto_commit=False
        )
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[Any] = []
            for _ in range(60):
                if len(got) >= 8:
                    break
                got += (await consumer.getmany(timeout_ms=500)).get(tp, [])
        finally:
            await consumer.stop()
        assert [m.offset for m in got] == [m.offset for m in metas]
        return got

    got = asyncio.run(scenario())
    assert [(m.key, m.value) for m in got] == [(b"k%d" % i, b"v%d" % i) for i in range(8)]


# -- hostile input ---------------------------------------------------------------------------


def _connect(server: ServerProcess) -> socket.socket:
    host, _, port = kafka(server).rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    return sock


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _request(
    sock: socket.socket, api_key: int, version: int, body: dict[str, Any]
) -> dict[str, Any]:
    header = RequestHeader(api_key, version, 7, "hostile")
    sock.sendall(protocol.encode_request(header, body))
    size = struct.unpack(">i", _read(sock, 4))[0]
    correlation_id, answer = protocol.decode_response(api_key, version, _read(sock, size))
    assert correlation_id == 7, "the answer to another request"
    return answer


def _read(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf


def test_hostile_frames_close_the_connection_and_the_node_keeps_serving(
    server: ServerProcess,
) -> None:
    with _connect(server) as sock:  # a 2 GiB size prefix
        sock.sendall(struct.pack(">i", 0x7FFFFFFF))
        assert _closed(sock)
    with _connect(server) as sock:  # a negative size
        sock.sendall(struct.pack(">i", -5))
        assert _closed(sock)
    with _connect(server) as sock:  # an unknown API key
        sock.sendall(protocol.frame(struct.pack(">hhih", 999, 0, 1, -1)))
        assert _closed(sock)
    with _connect(server) as sock:  # a lying length inside the body: truncated
        sock.sendall(
            protocol.frame(struct.pack(">hhih", ApiKey.METADATA, 1, 1, -1) + b"\x00\x00\x10")
        )
        assert _closed(sock)
    with _connect(server) as sock:  # ApiVersions at a version not served: typed answer
        sock.sendall(protocol.frame(struct.pack(">hhih", ApiKey.API_VERSIONS, 99, 5, -1)))
        size = struct.unpack(">i", _read(sock, 4))[0]
        corr, body = protocol.decode_response(ApiKey.API_VERSIONS, 0, _read(sock, size))
        assert corr == 5 and body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert {k["api_key"] for k in body["api_keys"]} >= {ApiKey.PRODUCE, ApiKey.FETCH}
    with _connect(server) as sock:  # still serving
        answer = _request(sock, ApiKey.API_VERSIONS, 0, {})
        assert answer["error_code"] == 0
    metrics = server.metrics()
    malformed = [
        line
        for line in metrics.splitlines()
        if 'connections_closed_total{reason="malformed"}' in line
    ]
    assert malformed and float(malformed[0].split()[-1]) >= 4  # the 4 closed above
    assert 'replog_kafka_requests_total{api="API_VERSIONS"}' in metrics


def test_corrupt_batch_is_refused_and_nothing_is_written(
    server: ServerProcess, client: Client
) -> None:
    topic = new_topic(server)
    end = client.list_offsets(topic)[0].log_end_offset
    batch = bytearray(encode_batch(batch_of(0, [(b"k", b"v", T0, [])])))
    batch[-1] ^= 0xFF  # the CRC no longer matches
    body = {
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": bytes(batch)}]}],
    }
    with _connect(server) as sock:
        answer = _request(sock, ApiKey.PRODUCE, 7, body)
        part = answer["responses"][0]["partition_responses"][0]
        assert part["error_code"] == ErrorCode.CORRUPT_MESSAGE
        body["topic_data"][0]["name"] = "no-such-topic"
        body["topic_data"][0]["partition_data"][0]["records"] = encode_batch(
            batch_of(0, [(b"k", b"v", T0, [])])
        )
        answer = _request(sock, ApiKey.PRODUCE, 7, body)
        part = answer["responses"][0]["partition_responses"][0]
        assert part["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert client.list_offsets(topic)[0].log_end_offset == end


def test_offsets_committed_by_an_assigning_kafka_consumer_are_replog_group_offsets(
    server: ServerProcess, client: Client
) -> None:
    topic = new_topic(server)
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka(server)})
    for i in range(10):
        producer.produce(topic, value=b"r%d" % i)
    assert producer.flush(30) == 0
    got = consume(server, topic, 10)
    group = f"grp-{topic}"
    config = {"bootstrap.servers": kafka(server), "group.id": group, "enable.auto.commit": False}
    committer = confluent_kafka.Consumer(config)
    try:
        tp = confluent_kafka.TopicPartition(topic, 0, got[6].offset())
        committer.commit(offsets=[tp], asynchronous=False)
    finally:
        committer.close()
    # The same offsets through gRPC; and a gRPC commit is what Kafka consumers resume from.
    (committed,) = client.committed_offsets(group, [(topic, 0)])
    assert committed.offset == got[6].offset()
    client.commit_offsets(group, {(topic, 0): got[8].offset()})
    resumed = confluent_kafka.Consumer(config)
    try:
        resumed.assign([confluent_kafka.TopicPartition(topic, 0)])  # from the committed offset
        rest: list[Any] = []
        deadline = time.monotonic() + 60
        while len(rest) < 2 and time.monotonic() < deadline:
            msg = resumed.poll(0.5)
            if msg is not None and msg.error() is None:
                rest.append(msg)
        stored = resumed.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=30)
    finally:
        resumed.close()
    assert [m.value() for m in rest] == [b"r8", b"r9"]
    assert stored[0].offset == got[8].offset()


def test_a_fetch_answers_within_its_max_bytes_the_first_batch_always(
    server: ServerProcess, client: Client
) -> None:
    topic = new_topic(server, partitions=2)
    firsts = [
        client.append(
            topic, p, [Record(b"x%d" % i, None, [], T0 + i) for i in range(5)]
        ).base_offset
        for p in (0, 1)
    ]
    ends = {o.partition: o.latest for o in client.list_offsets(topic)}
    partitions = [
        {
            "partition": p,
            "fetch_offset": firsts[p],
            "log_start_offset": -1,
            "partition_max_bytes": 1 << 20,
        }
        for p in (0, 1)
    ]
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1,  # less than one batch
        "isolation_level": 0,
        "topics": [{"topic": topic, "partitions": partitions}],
    }
    with _connect(server) as sock:
        answer = _request(sock, ApiKey.FETCH, 4, body)
    first, second = answer["responses"][0]["partitions"]
    assert first["error_code"] == 0 and second["error_code"] == 0
    (batch,) = decode_batches(first["records"])  # one record: progress, within the limit
    assert [(batch.base_offset + r.offset_delta, r.value) for r in batch.records] == [
        (firsts[0], b"x0")
    ]
    assert not second["records"]  # no room left: its offsets only
    assert (first["high_watermark"], second["high_watermark"]) == (ends[0], ends[1])


def _produce_body(topic: str, records: bytes, acks: int = -1) -> dict[str, Any]:
    partition = {"index": 0, "records": records}
    return {
        "acks": acks,
        "timeout_ms": 10000,
        "topic_data": [{"name": topic, "partition_data": [partition]}],
    }


def test_idempotent_batches_map_onto_replog_sequences_and_acks_0_gets_no_answer(
    server: ServerProcess, client: Client
) -> None:
    topic = new_topic(server)
    with _connect(server) as sock:
        ids = _request(sock, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None})
        assert ids["error_code"] == 0 and ids["producer_id"] > 0
        pid, epoch = ids["producer_id"], ids["producer_epoch"]

        def batch(seq: int, value: bytes) -> bytes:
            rows = [(None, value, T0, [])]
            return encode_batch(
                batch_of(0, rows, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
            )

        def produce(records: bytes) -> dict[str, Any]:
            answer = _request(sock, ApiKey.PRODUCE, 9, _produce_body(topic, records))
            return dict(answer["responses"][0]["partition_responses"][0])

        first = produce(batch(0, b"a"))
        assert first["error_code"] == 0
        again = produce(batch(0, b"a"))  # a retry: the original offset, nothing written twice
        assert (again["error_code"], again["base_offset"]) == (0, first["base_offset"])
        gap = produce(batch(5, b"c"))
        assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(batch(1, b"b"))["error_code"] == 0
        # acks=0: no response at all; the next answer on the connection is the next request's
        header = RequestHeader(ApiKey.PRODUCE, 7, 99, "hostile")
        sock.sendall(protocol.encode_request(header, _produce_body(topic, batch(2, b"z"), 0)))
        assert _request(sock, ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 3 and time.monotonic() < deadline:
        values = [r.value for r in read_grpc(client, topic, 3)]
    assert values == [b"a", b"b", b"z"]


def _configs(client: Any, topic: str) -> dict[str, Any]:
    resource = admin.ConfigResource(admin.ResourceType.TOPIC, topic)
    return dict(client.describe_configs([resource])[resource].result(30))


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_admin_client_grows_topics_alters_configs_and_deletes_groups(
    server: ServerProcess,
) -> None:
    client = admin.AdminClient({"bootstrap.servers": kafka(server)})
    topic = new_topic(server)
    # CreatePartitions: validate_only changes nothing; a growth applies; a shrink is refused
    client.create_partitions([admin.NewPartitions(topic, 4)], validate_only=True)[topic].result(30)
    assert len(client.list_topics(topic, timeout=30).topics[topic].partitions) == 1
    client.create_partitions([admin.NewPartitions(topic, 3)])[topic].result(30)
    assert len(client.list_topics(topic, timeout=30).topics[topic].partitions) == 3
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        client.create_partitions([admin.NewPartitions(topic, 2)])[topic].result(30)
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.INVALID_PARTITIONS
    # DescribeConfigs, IncrementalAlterConfigs (SET), AlterConfigs (the whole set)
    before = _configs(client, topic)
    assert before["retention.ms"].is_default and before["cleanup.policy"].value == "delete"
    incremental = admin.ConfigResource(
        admin.ResourceType.TOPIC,
        topic,
        incremental_configs=[
            admin.ConfigEntry(
                "retention.ms", "123456", incremental_operation=admin.AlterConfigOpType.SET
            )
        ],
    )
    client.incremental_alter_configs([incremental])[incremental].result(30)
    after = _configs(client, topic)
    assert after["retention.ms"].value == "123456" and not after["retention.ms"].is_default
    whole = admin.ConfigResource(
        admin.ResourceType.TOPIC, topic, set_config={"retention.bytes": "1048576"}
    )
    client.alter_configs([whole])[whole].result(30)
    altered = _configs(client, topic)
    assert altered["retention.bytes"].value == "1048576"
    assert altered["retention.ms"].is_default  # not named: reset (AlterConfigs' semantics)
    bad = admin.ConfigResource(admin.ResourceType.TOPIC, topic, set_config={"retention.ms": "x"})
    with pytest.raises(confluent_kafka.KafkaException) as invalid:
        client.alter_configs([bad])[bad].result(30)
    assert invalid.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG
    # DescribeCluster (librdkafka's describe_cluster asks Metadata; the API itself, raw):
    # the brokers and controller Metadata names. A broker resource: no configs; an
    # APPEND: INVALID_REQUEST (librdkafka checks it before sending).
    cluster = client.describe_cluster().result(30)
    assert cluster.cluster_id == "replog" and len(cluster.nodes) == 1
    with _connect(server) as sock:
        metadata = _request(sock, ApiKey.METADATA, 12, {"topics": []})
        described = _request(sock, ApiKey.DESCRIBE_CLUSTER, 1, {"endpoint_type": 1})
        broker = {"resource_type": 4, "resource_name": "1", "configuration_keys": None}
        configs = _request(sock, ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [broker]})
        append = {"name": "cleanup.policy", "config_operation": 2, "value": "delete"}
        resource = {"resource_type": 2, "resource_name": topic, "configs": [append]}
        appended = _request(sock, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [resource]})
    assert described["error_code"] == 0 and described["cluster_id"] == "replog"
    assert described["controller_id"] == metadata["controller_id"]
    assert [(b["broker_id"], b["host"], b["port"]) for b in described["brokers"]] == [
        (b["node_id"], b["host"], b["port"]) for b in metadata["brokers"]
    ]
    assert configs["results"][0]["error_code"] == 0 and configs["results"][0]["configs"] == []
    assert appended["responses"][0]["error_code"] == ErrorCode.INVALID_REQUEST
    # DeleteGroups: refused while the group has a member; once it left, the group (which
    # committed offsets) is deleted; then it is not found
    group = f"del-{topic}"
    config = {"bootstrap.servers": kafka(server), "group.id": group, "enable.auto.commit": False}
    member = confluent_kafka.Consumer(config | {"session.timeout.ms": 10_000})
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + 60
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        assert member.assignment()
        member.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 0)], asynchronous=False)
        with pytest.raises(confluent_kafka.KafkaException) as busy:
            client.delete_consumer_groups([group], request_timeout=30)[group].result(30)
        assert busy.value.args[0].code() == confluent_kafka.KafkaError.NON_EMPTY_GROUP
    finally:
        member.close()
    client.delete_consumer_groups([group], request_timeout=30)[group].result(30)
    with pytest.raises(confluent_kafka.KafkaException) as gone:
        client.delete_consumer_groups([group], request_timeout=30)[group].result(30)
    assert gone.value.args[0].code() == confluent_kafka.KafkaError.GROUP_ID_NOT_FOUND


def test_pipelined_idempotent_produces_append_in_order_and_are_answered_in_order(
    server: ServerProcess, client: Client
) -> None:
    """Eight Produce requests sent back to back (more than the 5 a connection answers at
    once) before reading any answer, then a Metadata request: the answers come in request
    order, each batch at the offsets after the one before, in sequence; the listener had
    several of them in flight at once (`replog_kafka_produce_in_flight`)."""
    topic = new_topic(server)
    before = _series(server.metrics(), "replog_kafka_produce_in_flight")
    with _connect(server) as sock:
        ids = _request(sock, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None})
        pid, epoch = ids["producer_id"], ids["producer_epoch"]
        sent = []  # one write: the requests reach the listener together
        for n in range(8):
            rows = [(None, b"%d-%d" % (n, i), T0, []) for i in range(50)]
            records = encode_batch(
                batch_of(0, rows, producer_id=pid, producer_epoch=epoch, base_sequence=50 * n)
            )
            header = RequestHeader(ApiKey.PRODUCE, 9, 100 + n, "pipelined")
            sent.append(protocol.encode_request(header, _produce_body(topic, records)))
        sent.append(protocol.encode_request(RequestHeader(ApiKey.METADATA, 12, 200, "m"), {
            "topics": [], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }))  # fmt: skip
        sock.sendall(b"".join(sent))
        bases = []
        for n in range(8):
            size = struct.unpack(">i", _read(sock, 4))[0]
            correlation_id, answer = protocol.decode_response(ApiKey.PRODUCE, 9, _read(sock, size))
            assert correlation_id == 100 + n, "answers in request order"
            part = answer["responses"][0]["partition_responses"][0]
            assert part["error_code"] == 0
            bases.append(part["base_offset"])
        size = struct.unpack(">i", _read(sock, 4))[0]
        assert protocol.decode_response(ApiKey.METADATA, 12, _read(sock, size))[0] == 200
    # each batch after the one before (a control record may sit between them)
    assert bases == sorted(bases) and len(set(bases)) == 8
    after = _series(server.metrics(), "replog_kafka_produce_in_flight")
    seen = {k: after[k] - before.get(k, 0.0) for k in after}  # this test's 8 requests
    assert seen["_count"] == 8
    assert seen['_bucket{le="1.0"}'] < 8, "some were read while others were in flight"
    values = [r.value for r in read_grpc(client, topic, 400)]
    assert values == [b"%d-%d" % (n, i) for n in range(8) for i in range(50)]


def _series(metrics: str, name: str) -> dict[str, float]:
    """`name`'s samples in a metrics page: {suffix and labels: value}."""
    return {
        line.split()[0][len(name) :]: float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith(name)
    }
