"""librdkafka (confluent-kafka) talks to a few lines of test broker built on replog.kafka:
its ApiVersions, Metadata and Produce requests decode, its record batches (every codec,
idempotent producer) decode with their CRCs, and it accepts our responses, so a delivery
report arrives with the offset we gave. An independent C implementation of the protocol
agreeing with the codec, before the real listener exists (issue 31). librdkafka 2.16
negotiates ApiVersions v3, Metadata v12, Produce v9, InitProducerId v4, Fetch v13 (topic
ids), ListOffsets v7 and FindCoordinator v2 against `RECOMMENDED_VERSIONS`; aiokafka 0.14
the non-flexible ApiVersions v0, Metadata v5, Produce v7, Fetch v11 and ListOffsets v3."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from typing import Any

import pytest

from replog.kafka import protocol
from replog.kafka.compression import Compression
from replog.kafka.protocol import ApiKey, FrameDecoder, RequestHeader
from replog.kafka.records import Header, RecordBatch, batch_of, decode_batches, encode_batch
from replog.kafka.schema import api_specs

confluent_kafka = pytest.importorskip("confluent_kafka")

# A real client over loopback sockets (in-process threads): the integration layer's budget.
pytestmark = pytest.mark.integration

TOPIC = "events"
TOPIC_ID = uuid.UUID(int=7)


class TinyBroker:
    """One node, one topic with one partition; answers the APIs a producer uses."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.requests: list[RequestHeader] = []
        self.errors: list[Exception] = []  # the test broker's own failures, asserted empty
        self.batches: list[RecordBatch] = []
        self.next_offset = 0
        self.stored: list[tuple[int, bytes]] = []  # (base offset, batch bytes) to fetch
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        decoder = FrameDecoder(1 << 20)
        with conn:
            while not self.stop.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:  # reset by a closing consumer
                    return
                if not data:
                    return
                for payload in decoder.feed(data):
                    request = protocol.decode_request(payload)
                    with self.lock:
                        self.requests.append(request.header)
                        try:
                            body = self._answer(request.header, request.body)
                        except Exception as e:
                            self.errors.append(e)
                            raise
                    try:
                        conn.sendall(protocol.encode_response(request.header, body))
                    except OSError:  # the client went away (a closing consumer)
                        return

    def _answer(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        if header.api_key == ApiKey.API_VERSIONS:
            keys = [
                {"api_key": int(k), "min_version": lo, "max_version": hi}
                for k, (lo, hi) in protocol.RECOMMENDED_VERSIONS.items()
            ]
            return {"error_code": 0, "api_keys": keys}
        if header.api_key == ApiKey.METADATA:
            partition = {"partition_index": 0, "leader_id": 0, "replica_nodes": [0]}
            partition |= {"isr_nodes": [0], "leader_epoch": 0}
            return {
                "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": self.port}],
                "cluster_id": "replog-test",
                "controller_id": 0,
                "topics": [{"name": TOPIC, "topic_id": TOPIC_ID, "partitions": [partition]}],
            }
        if header.api_key == ApiKey.INIT_PRODUCER_ID:
            return {"producer_id": 1000, "producer_epoch": 0}
        if header.api_key == ApiKey.FIND_COORDINATOR:
            node = {"node_id": 0, "host": "127.0.0.1", "port": self.port}
            if header.api_version < 4:
                return node
            return {"coordinators": [{"key": k} | node for k in body["coordinator_keys"]]}
        if header.api_key == ApiKey.LIST_OFFSETS:
            return {"topics": [self._list_offsets(t) for t in body["topics"]]}
        if header.api_key == ApiKey.FETCH:
            return {"responses": [self._fetch(t) for t in body["topics"]]}
        assert header.api_key == ApiKey.PRODUCE, f"unexpected request {header}"
        responses = []
        for topic in body["topic_data"]:
            parts = []
            for p in topic["partition_data"]:
                batches = decode_batches(p["records"])
                base = self.next_offset
                raw = bytearray(p["records"])
                assert len(batches) == 1, "one batch per partition, as every client sends"
                raw[0:8] = base.to_bytes(8, "big")  # the broker assigns the offsets
                self.stored.append((base, bytes(raw)))
                self.batches += batches
                self.next_offset += sum(len(b.records) for b in batches)
                parts.append({"index": p["index"], "base_offset": base, "log_start_offset": 0})
            responses.append({"name": topic["name"], "partition_responses": parts})
        return {"responses": responses}

    def _list_offsets(self, topic: dict[str, Any]) -> dict[str, Any]:
        end = sum(len(b.records) for b in self.batches)
        parts = [
            {"partition_index": p["partition_index"], "offset": 0 if p["timestamp"] == -2 else end}
            for p in topic["partitions"]
        ]
        return {"name": topic["name"], "partitions": parts}

    def _fetch(self, topic: dict[str, Any]) -> dict[str, Any]:
        assert topic["topic_id"] == TOPIC_ID or topic["topic"] == TOPIC
        parts = []
        for p in topic["partitions"]:
            records = b"".join(raw for base, raw in self.stored if base >= p["fetch_offset"])
            end = sum(len(b.records) for b in self.batches)
            parts.append(
                {"partition_index": p["partition"], "high_watermark": end}
                | {"last_stable_offset": end, "log_start_offset": 0, "records": records}
            )
        return {"topic_id": topic["topic_id"], "topic": topic["topic"], "partitions": parts}

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=5)
        self.sock.close()


@pytest.fixture
def broker() -> Any:
    b = TinyBroker()
    yield b
    b.close()
    assert b.errors == []


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_produces_through_the_codec_with_every_compression(
    broker: TinyBroker, compression: str
) -> None:
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{broker.port}",
            "compression.type": compression,
            "enable.idempotence": True,
            "linger.ms": 50,
            "message.timeout.ms": 20000,
        }
    )
    reports: list[tuple[Any, int | None]] = []

    def on_delivery(err: Any, msg: Any) -> None:
        reports.append((err, None if err else msg.offset()))

    for i in range(20):
        producer.produce(
            TOPIC,
            key=b"key-%d" % i,
            value=b"value-%d " % i * 40,
            headers=[("n", str(i).encode())],
            on_delivery=on_delivery,
        )
    assert producer.flush(30) == 0
    assert sorted(o for _, o in reports) == list(range(20)) and all(e is None for e, _ in reports)
    records = [r for b in broker.batches for r in b.records]
    assert [r.key for r in records] == [b"key-%d" % i for i in range(20)]
    assert [r.value for r in records] == [b"value-%d " % i * 40 for i in range(20)]
    assert [r.headers[0].value for r in records] == [str(i).encode() for i in range(20)]
    assert all(b.producer_id == 1000 and b.base_sequence >= 0 for b in broker.batches)
    if compression != "none":
        assert all(b.compression.name.lower() == compression for b in broker.batches)
    seen = {h.api_key for h in broker.requests}
    assert {ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.PRODUCE} <= seen


@pytest.mark.parametrize("codec", list(Compression))
def test_librdkafka_consumes_our_batches_with_every_codec(
    broker: TinyBroker, codec: Compression
) -> None:
    rows = [
        (b"k%d" % i, b"v%d" % i * 30, 1_700_000_000_000 + i, [Header("i", b"%d" % i)])
        for i in range(25)
    ]
    for base in (0, 10, 20):
        batch = batch_of(base, rows[base : base + 10], compression=codec)
        broker.stored.append((base, encode_batch(batch)))
        broker.batches.append(batch)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{broker.port}",
            "group.id": "replog-test",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
    )
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition(TOPIC, 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < 25 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg)
    finally:
        consumer.close()
    assert [m.offset() for m in got] == list(range(25))
    assert [(m.key(), m.value()) for m in got] == [(k, v) for k, v, _, _ in rows]
    assert [m.timestamp()[1] for m in got] == [ts for _, _, ts, _ in rows]
    assert [m.headers() for m in got] == [[("i", b"%d" % i)] for i in range(25)]


def test_aiokafka_produces_and_consumes_at_its_older_non_flexible_versions(
    broker: TinyBroker,
) -> None:
    aiokafka = pytest.importorskip("aiokafka")

    async def scenario() -> list[Any]:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=f"127.0.0.1:{broker.port}", compression_type="gzip"
        )
        await producer.start()
        try:
            for i in range(10):
                meta = await producer.send_and_wait(
                    TOPIC, b"v%d" % i, key=b"k%d" % i, headers=[("i", b"%d" % i)]
                )
                assert meta.offset == i
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{broker.port}", enable_auto_commit=False
        )
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition(TOPIC, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[Any] = []
            for _ in range(60):  # 0.5 s polls: 30 s at most
                if len(got) >= 10:
                    break
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                got += batch.get(tp, [])
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(scenario())
    assert [(m.offset, m.key, m.value) for m in got] == [
        (i, b"k%d" % i, b"v%d" % i) for i in range(10)
    ]
    assert [list(m.headers) for m in got] == [[("i", b"%d" % i)] for i in range(10)]
    used = {(h.api_key, h.api_version) for h in broker.requests}
    assert all(v not in range(*_flexible(k)) for k, v in used if k != ApiKey.API_VERSIONS)


def _flexible(api_key: int) -> tuple[int, int]:
    request, _ = api_specs()[api_key]
    return request.flexible.lo, request.flexible.hi + 1
