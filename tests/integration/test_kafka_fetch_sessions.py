"""Incremental fetch sessions (KIP-227) on a real listener: raw Fetch v12 requests through
the edge's own codec open a session, fetch incrementally (only what changed comes back),
and are refused FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH as Kafka refuses
them; kafka-python (which uses sessions) and librdkafka (which sends sessionless full
fetches) each read every record of a topic of many partitions."""

from __future__ import annotations

import re
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replog.client import Client, RetryPolicy
from replog.devcluster import free_port
from replog.kafka import protocol
from replog.kafka.errors import ErrorCode
from replog.kafka.protocol import ApiKey, RequestHeader
from replog.kafka.records import decode_batches
from replog.records import Record
from tests.integration.servers import ServerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = [pytest.mark.integration]

PARTITIONS = 24


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root: Path = tmp_path_factory.mktemp("sessions")
    address = f"127.0.0.1:{free_port()}"
    s = ServerProcess(root / "data", root, ["--kafka-listen", address])
    s.start()
    s.kafka = address  # type: ignore[attr-defined]
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30):  # open as the node stops
        yield s
        assert s.terminate() == 0
    # connections the node ended as it stopped are no errors in its log
    assert "Exception in callback" not in s.log_text()


def kafka(server: ServerProcess) -> str:
    return str(server.kafka)  # type: ignore[attr-defined]


def create(server: ServerProcess, name: str, partitions: int) -> None:
    client = admin.AdminClient({"bootstrap.servers": kafka(server)})
    client.create_topics([admin.NewTopic(name, partitions, 1)])[name].result(30)


def fetch(sock: socket.socket, session_id: int, epoch: int, topics: list[Any], **kw: Any) -> Any:
    body = {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
        "topics": topics, "forgotten_topics_data": kw.get("forget", []), "rack_id": "",
    }  # fmt: skip
    header = RequestHeader(ApiKey.FETCH, 12, 9, "sessions")
    sock.sendall(protocol.encode_request(header, body))
    (size,) = struct.unpack(">i", read(sock, 4))
    correlation_id, answer = protocol.decode_response(ApiKey.FETCH, 12, read(sock, size))
    assert correlation_id == 9
    return answer


def read(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf


def parts(topic: str, offsets: dict[int, int]) -> list[Any]:
    return [
        {
            "topic": topic,
            "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": o}
                | {"last_fetched_epoch": -1, "log_start_offset": -1}
                | {"partition_max_bytes": 1 << 20}
                for p, o in offsets.items()
            ],
        }
    ]


def answered(answer: Any) -> dict[int, Any]:
    return {p["partition_index"]: p for t in answer["responses"] for p in t["partitions"]}


def test_raw_fetches_open_a_session_fetch_incrementally_and_are_refused_out_of_step(
    server: ServerProcess,
) -> None:
    create(server, "raw", 3)
    with Client(server.address, retry=RetryPolicy(attempts_max=20)) as c:
        ends = {o.partition: o.latest for o in c.list_offsets("raw")}
        with socket.create_connection(tuple(kafka(server).rsplit(":", 1)), timeout=30) as sock:  # type: ignore[arg-type]
            full = fetch(sock, 0, 0, parts("raw", ends))
            sid = full["session_id"]
            assert full["error_code"] == 0 and sid != 0 and sorted(answered(full)) == [0, 1, 2]
            # nothing changed since: an incremental fetch naming no partition answers none
            assert answered(fetch(sock, sid, 1, [])) == {}
            # a record on partition 1: only partition 1 comes back, with it
            c.append("raw", 1, [Record(b"new", None, [], 1_700_000_000_000)], acks="all")
            changed = answered(fetch(sock, sid, 2, []))
            assert list(changed) == [1]
            (batch,) = decode_batches(changed[1]["records"])
            assert [r.value for r in batch.records] == [b"new"]
            # out of step: a wrong epoch, an id never given; both name no partition
            for session_id, epoch, code in [
                (sid, 9, ErrorCode.INVALID_FETCH_SESSION_EPOCH),
                (sid + 1, 1, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
            ]:
                refused = fetch(sock, session_id, epoch, parts("raw", ends))
                assert (refused["error_code"], refused["session_id"]) == (code, 0)
                assert refused["responses"] == []
            # epoch -1 closes the session (answered as a sessionless full fetch)
            closing = fetch(sock, sid, -1, parts("raw", ends))
            assert closing["session_id"] == 0 and sorted(answered(closing)) == [0, 1, 2]
            gone = fetch(sock, sid, 3, [])
            assert gone["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def produce_one_per_partition(server: ServerProcess, topic: str) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka(server), "acks": "all"})
    for p in range(PARTITIONS):
        producer.produce(topic, value=b"p%d" % p, partition=p)
    assert producer.flush(60) == 0


def sessions_open(server: ServerProcess) -> float:
    found = re.search(r"^replog_kafka_fetch_sessions (\S+)$", server.metrics(), re.MULTILINE)
    return float(found[1]) if found else 0.0


def test_kafka_python_reads_many_partitions_through_an_incremental_session(
    server: ServerProcess,
) -> None:
    kafka_python = pytest.importorskip("kafka")
    create(server, "many", PARTITIONS)
    produce_one_per_partition(server, "many")
    consumer = kafka_python.KafkaConsumer(
        bootstrap_servers=kafka(server), enable_auto_commit=False, fetch_max_wait_ms=100
    )
    try:
        tps = [kafka_python.TopicPartition("many", p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        got: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(got) < PARTITIONS and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got |= {r.value for r in records}
        assert got == {b"p%d" % p for p in range(PARTITIONS)}
        # a session was opened and kept (kafka-python fetches incrementally within it)
        assert sessions_open(server) >= 1
        # records that arrive later come through the same session
        produce_one_per_partition(server, "many")
        later = 0
        deadline = time.monotonic() + 60
        while later < PARTITIONS and time.monotonic() < deadline:
            later += sum(len(r) for r in consumer.poll(timeout_ms=500).values())
        assert later == PARTITIONS
    finally:
        consumer.close()


def test_librdkafka_reads_many_partitions_with_sessionless_fetches(server: ServerProcess) -> None:
    """librdkafka 2.x does not implement KIP-227: it opens no session (its fetches carry
    session id 0, epoch -1) and is served full fetches."""
    before = sessions_open(server)
    create(server, "many-rd", PARTITIONS)
    produce_one_per_partition(server, "many-rd")
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": kafka(server), "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition("many-rd", p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(PARTITIONS)
            ]
        )
        got: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(got) < PARTITIONS and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.add(msg.value())
        assert got == {b"p%d" % p for p in range(PARTITIONS)}
        assert sessions_open(server) == before
    finally:
        consumer.close()
