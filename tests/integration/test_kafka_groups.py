"""Kafka consumer groups, unchanged clients: librdkafka (confluent-kafka) and kafka-python
consumers with a `group.id` that `subscribe()` share a topic's partitions through the
classic group protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup) against a real
`replog serve --kafka-listen` process, rebalance when a member leaves, commit, and a new
member resumes from the committed offsets; tools list and describe the group."""

from __future__ import annotations

import contextlib
import itertools
import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from replog.client import Client, RetryPolicy
from replog.devcluster import free_port
from replog.kafka import protocol
from replog.kafka.errors import ErrorCode
from replog.kafka.protocol import ApiKey, RequestHeader
from tests.integration.servers import ServerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")
kafka_python = pytest.importorskip("kafka")

_names = itertools.count()
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("kafka-groups")
    port = free_port()
    s = ServerProcess(root / "data", root, ["--kafka-listen", f"127.0.0.1:{port}"])
    s.start()
    s.kafka = f"127.0.0.1:{port}"  # type: ignore[attr-defined]
    yield s
    assert s.terminate() == 0


def bootstrap(server: ServerProcess) -> str:
    return str(server.kafka)  # type: ignore[attr-defined]


def new_topic(server: ServerProcess, partitions: int) -> str:
    name = f"g{next(_names)}"
    client = admin.AdminClient({"bootstrap.servers": bootstrap(server)})
    client.create_topics([admin.NewTopic(name, partitions, 1)])[name].result(30)
    return name


def produce(server: ServerProcess, topic: str, per_partition: int, partitions: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap(server)})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=b"p%d-%d" % (p, i), partition=p)
    assert producer.flush(30) == 0


def consumer(server: ServerProcess, group: str, assignors: str = "range,roundrobin") -> Any:
    return confluent_kafka.Consumer(
        {
            "partition.assignment.strategy": assignors,
            "bootstrap.servers": bootstrap(server),
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "fetch.wait.max.ms": 100,
        }
    )


def poll_until(consumers: list[Any], done: Callable[[], bool], got: dict[int, list[Any]]) -> None:
    """Poll every consumer in turn (a librdkafka consumer rebalances inside poll) until
    `done()`; records land in `got[index of the consumer]`."""
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, "the group did not settle in time"
        for i, c in enumerate(consumers):
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                got.setdefault(i, []).append(msg)


def partitions_of(c: Any) -> set[int]:
    return {tp.partition for tp in c.assignment()}


# librdkafka's default assignors, and the cooperative one (incremental rebalances: the
# clients' own rejoins, nothing of the broker)
@pytest.mark.parametrize("assignors", ["range,roundrobin", "cooperative-sticky"])
def test_librdkafka_consumers_share_partitions_rebalance_commit_and_resume(
    server: ServerProcess, assignors: str
) -> None:
    topic = new_topic(server, 4)
    group = f"grp-{topic}"
    a, b = consumer(server, group, assignors), consumer(server, group, assignors)
    c = None
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        got: dict[int, list[Any]] = {}
        # Both members hold two partitions each, disjoint, and read them through.
        poll_until(
            [a, b],
            lambda: len(partitions_of(a)) == 2 and len(partitions_of(b)) == 2,
            got,
        )
        assert partitions_of(a) | partitions_of(b) == {0, 1, 2, 3}
        produce(server, topic, per_partition=5, partitions=4)
        poll_until([a, b], lambda: sum(len(v) for v in got.values()) >= 20, got)
        assert sorted(m.value() for v in got.values() for m in v) == sorted(
            b"p%d-%d" % (p, i) for p in range(4) for i in range(5)
        )  # each once: each partition had one owner
        for i, member in enumerate((a, b)):
            assert {m.partition() for m in got.get(i, [])} == partitions_of(member)
        # One leaves: the other gets every partition.
        b.close()
        poll_until([a], lambda: partitions_of(a) == {0, 1, 2, 3}, got)
        # It commits each partition's fourth record as the next to read (through its
        # generation), and a new member of the group resumes there.
        fourth = {
            m.partition(): m.offset() for v in got.values() for m in v if m.value()[3:] == b"3"
        }
        tps = [confluent_kafka.TopicPartition(topic, p, fourth[p]) for p in range(4)]
        a.commit(offsets=tps, asynchronous=False)
        a.close()
        c = consumer(server, group, assignors)
        c.subscribe([topic])
        resumed: dict[int, list[Any]] = {}
        poll_until([c], lambda: len(resumed.get(0, [])) >= 8, resumed)
        assert sorted(m.value() for m in resumed[0]) == sorted(
            b"p%d-%d" % (p, i) for p in range(4) for i in (3, 4)
        )
        # Tools see the group: one member, stable, holding the four partitions.
        tool = admin.AdminClient({"bootstrap.servers": bootstrap(server)})
        described = tool.describe_consumer_groups([group])[group].result(30)
        assert described.group_id == group and len(described.members) == 1
        held = {tp.partition for tp in described.members[0].assignment.topic_partitions}
        assert held == {0, 1, 2, 3}
        listed = tool.list_consumer_groups().result(30)
        assert group in {g.group_id for g in listed.valid}
    finally:
        for x in (a, b, c):
            if x is not None:
                _close(x)


def _close(c: Any) -> None:
    with contextlib.suppress(RuntimeError):  # closed already
        c.close()


def test_kafka_python_group_consumer_consumes_and_commits(server: ServerProcess) -> None:
    topic = new_topic(server, 2)
    produce(server, topic, per_partition=3, partitions=2)
    group = f"kp-{topic}"
    consumer = kafka_python.KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap(server),
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=int(DEADLINE_S * 1000),
    )
    try:
        got = []
        for msg in consumer:
            got.append(msg)
            if len(got) == 6:
                break
        assert sorted(m.value for m in got) == sorted(
            b"p%d-%d" % (p, i) for p in range(2) for i in range(3)
        )
        consumer.commit()
    finally:
        consumer.close()
    with Client(server.address, timeout_s=30, retry=RetryPolicy(attempts_max=5)) as client:
        committed = client.committed_offsets(group, [(topic, 0), (topic, 1)])
    ends = [max(m.offset for m in got if m.partition == p) + 1 for p in (0, 1)]
    assert [c.offset for c in committed] == ends  # through replog's own client


def _request(sock: socket.socket, api_key: int, version: int, body: dict[str, Any]) -> Any:
    sock.sendall(protocol.encode_request(RequestHeader(api_key, version, 7, "raw"), body))
    size = struct.unpack(">i", _read(sock, 4))[0]
    correlation_id, answer = protocol.decode_response(api_key, version, _read(sock, size))
    assert correlation_id == 7
    return answer


def _read(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf


def test_the_wire_answers_kafka_group_errors_and_fences_stale_commits(
    server: ServerProcess,
) -> None:
    topic = new_topic(server, 1)
    group = f"raw-{topic}"
    host, port = bootstrap(server).split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        deadline = time.monotonic() + DEADLINE_S
        while True:  # the group's coordinator is loaded (a first FindCoordinator creates it)
            found = _request(sock, ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
            if found["error_code"] == ErrorCode.NONE:
                break
            assert time.monotonic() < deadline, found
            time.sleep(0.1)
        join: dict[str, Any] = {
            "group_id": group,
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 10_000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"x" * 300_000}],
        }
        too_big = _request(sock, ApiKey.JOIN_GROUP, 5, join)
        assert too_big["error_code"] == ErrorCode.INVALID_REQUEST
        join["protocols"] = [{"name": "range", "metadata": b"sub"}]
        first = _request(sock, ApiKey.JOIN_GROUP, 5, join)
        assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED and first["member_id"]
        member = first["member_id"]
        joined = _request(sock, ApiKey.JOIN_GROUP, 5, join | {"member_id": member})
        assert joined["error_code"] == ErrorCode.NONE and joined["leader"] == member
        generation = joined["generation_id"]
        assert [m["member_id"] for m in joined["members"]] == [member]
        sync = {"group_id": group, "generation_id": generation, "member_id": member}
        sync |= {
            "group_instance_id": None,
            "assignments": [{"member_id": member, "assignment": b"A"}],
        }
        synced = _request(sock, ApiKey.SYNC_GROUP, 3, sync)
        assert synced["error_code"] == ErrorCode.NONE and synced["assignment"] == b"A"
        beat = {"group_id": group, "member_id": member, "group_instance_id": None}
        stale = _request(sock, ApiKey.HEARTBEAT, 3, beat | {"generation_id": generation - 1})
        assert stale["error_code"] == ErrorCode.ILLEGAL_GENERATION
        fine = _request(sock, ApiKey.HEARTBEAT, 3, beat | {"generation_id": generation})
        assert fine["error_code"] == ErrorCode.NONE
        commit: dict[str, Any] = {
            "group_id": group,
            "member_id": member,
            "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
                    ],
                }
            ],
        }
        for gen, code in ((generation - 1, ErrorCode.ILLEGAL_GENERATION), (generation, 0)):
            answer = _request(
                sock, ApiKey.OFFSET_COMMIT, 7, commit | {"generation_id_or_member_epoch": gen}
            )
            assert answer["topics"][0]["partitions"][0]["error_code"] == code
        described = _request(sock, ApiKey.DESCRIBE_GROUPS, 4, {"groups": [group]})["groups"][0]
        assert described["group_state"] == "Stable" and described["protocol_data"] == "range"
        assert [m["member_assignment"] for m in described["members"]] == [b"A"]
        left = _request(
            sock, ApiKey.LEAVE_GROUP, 3, {"group_id": group, "members": [{"member_id": member}]}
        )
        assert [m["error_code"] for m in left["members"]] == [ErrorCode.NONE]
        gone = _request(sock, ApiKey.HEARTBEAT, 3, beat | {"generation_id": generation})
        assert gone["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    with Client(server.address, timeout_s=30, retry=RetryPolicy(attempts_max=5)) as client:
        (committed,) = client.committed_offsets(group, [(topic, 0)])
    assert committed.offset == 1  # the commit at the group's generation, not the stale one
