"""AppendStream against real servers: answers in order with typed errors in place, a
flood is held by flow control with the node's memory bounded, streams count against the
stream limits, a follower answers NOT_LEADER with the leader's address, and a streaming
idempotent Producer with acks=all writes every record once through a leader kill."""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import ReplogError, TooManyStreamsError
from replog.rpc_errors import from_rpc_error
from replog.v1 import log_pb2, log_pb2_grpc
from tests.integration.servers import ServerProcess
from tests.integration.test_cluster import PATIENT, leader_of
from tests.integration.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_names = itertools.count()
KIB = 1024
MIB = 1024 * KIB


def fresh_topic(server: ServerProcess, partitions: int = 2) -> str:
    name = f"stream-{next(_names)}"
    with Client(server.address, idempotent=False) as c:
        c.create_topic(name, partitions, format="raw")
    return name


def stub(address: str) -> log_pb2_grpc.LogStub:
    channel = grpc.insecure_channel(address)
    return log_pb2_grpc.LogStub(channel)  # type: ignore[no-untyped-call]


def append(topic: str, partition: int, *values: bytes) -> log_pb2.AppendRequest:
    return log_pb2.AppendRequest(
        topic=topic, partition=partition, values=list(values), acks=log_pb2.ACKS_ALL
    )


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * KIB
    raise AssertionError("no VmRSS")


def gauge(server: ServerProcess, name: str, limit: str) -> float:
    prefix = f'{name}{{limit="{limit}"}} '
    for line in server.metrics().splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    raise AssertionError(f"no {prefix}")


def test_each_request_is_answered_in_order_with_its_offsets_or_its_typed_error(
    shared_server: ServerProcess,
) -> None:
    topic = fresh_topic(shared_server)
    requests = [
        append(topic, 0, b"a0", b"a1"),
        append(topic, 1, b"b0"),
        append("no-such-topic", 0, b"x"),
        append(topic, 0, b"x" * 5000),  # the shared server's record_bytes_max is 4096
        append(topic, 0),
        append(topic, 7, b"x"),
        append("__consumer_offsets", 0, b"forged"),
        append(topic, 0, b"a2"),
        append(topic, 1, b"b1"),
    ]
    answers = list(stub(shared_server.address).AppendStream(iter(requests), timeout=30))
    reasons = [a.error.reason for a in answers]
    assert reasons == [
        "",
        "",
        "UNKNOWN_TOPIC",
        "RECORD_TOO_LARGE",
        "EMPTY_BATCH",
        "UNKNOWN_PARTITION",
        "INVALID_ARGUMENT",
        "",
        "",
    ]
    assert answers[3].error.metadata["record_bytes_max"] == "4096"
    assert answers[3].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert answers[2].error.code == grpc.StatusCode.NOT_FOUND.value[0]
    # The good ones landed in stream order, nothing of the refused ones in between.
    assert answers[7].base_offset == answers[0].last_offset + 1
    assert answers[8].base_offset == answers[1].last_offset + 1
    with Client(shared_server.address, idempotent=False) as c:
        values = c.fetch(topic, 0, 0).records.values
    assert values == [b"a0", b"a1", b"a2"]


def test_a_flood_from_a_client_that_reads_no_answer_holds_the_node_to_the_stream_window(
    server_factory: object,
) -> None:
    make = server_factory
    assert callable(make)
    server: ServerProcess = make(
        "--append-stream-requests-max", "4", "--append-stream-bytes-max", str(1 * MIB)
    ).start()
    assert server.proc is not None
    topic = fresh_topic(server, 1)
    value = b"v" * (60 * KIB)
    count = 2000  # 120 MiB through one stream; the answers fit the client's HTTP/2 window
    baseline = rss_bytes(server.proc.pid)
    peak = {"held": 0.0, "rss": 0}
    done = threading.Event()
    written = [0]

    def sample() -> None:
        while not done.is_set():
            held = gauge(server, "replog_limit_in_use", "append_stream_bytes_pool_max")
            peak["held"] = max(peak["held"], held)
            peak["rss"] = max(peak["rss"], rss_bytes(server.proc.pid))  # type: ignore[union-attr]
            done.wait(0.05)

    def requests() -> Iterator[log_pb2.AppendRequest]:
        for i in range(count):
            written[0] = i + 1
            yield append(topic, 0, value)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        call = stub(server.address).AppendStream(requests(), timeout=120)
        # No answer is read until the server has taken every request.
        wait_until(lambda: written[0] == count, "the client wrote every request", 120)
        with Client(server.address, idempotent=False) as c:
            wait_until(
                lambda: c.list_offsets(topic)[0].log_end_offset >= count,
                "the server appended every request",
                120,
            )
        answers = list(call)
    finally:
        done.set()
        sampler.join(30)
    assert [a.error.reason for a in answers] == [""] * count  # flow control, never an error
    offsets = [a.base_offset for a in answers]
    assert offsets == sorted(offsets) and len(set(offsets)) == count
    assert 0 < peak["held"] <= 1 * MIB  # the stream's window, whatever the client sends
    assert peak["rss"] - baseline < 100 * MIB, (baseline, peak)


def test_append_streams_count_against_the_stream_limits(server_factory: object) -> None:
    make = server_factory
    assert callable(make)
    server: ServerProcess = make("--streams-max", "2", "--streams-per-connection-max", "2").start()
    topic = fresh_topic(server, 1)
    log = stub(server.address)
    gate = [threading.Event(), threading.Event()]

    def held(i: int) -> Iterator[log_pb2.AppendRequest]:
        yield append(topic, 0, b"held-%d" % i)
        gate[i].wait(60)

    calls = [log.AppendStream(held(i), timeout=60) for i in range(2)]
    firsts = [next(c) for c in calls]  # both streams are open and answering
    assert all(not f.error.reason for f in firsts)
    with pytest.raises(grpc.RpcError) as refused:
        list(log.AppendStream(iter([append(topic, 0, b"third")]), timeout=30))
    err = from_rpc_error(refused.value)
    assert isinstance(err, TooManyStreamsError), err
    for g in gate:
        g.set()
    for c in calls:
        assert list(c) == []
    answers = list(log.AppendStream(iter([append(topic, 0, b"after")]), timeout=30))
    assert answers[0].base_offset >= 0 and not answers[0].error.reason


# -- three nodes --------------------------------------------------------------------------


def test_a_follower_answers_not_leader_with_the_leader_address_and_the_stream_goes_on(
    cluster: DevCluster,
) -> None:
    with Client(cluster.bootstrap, retry=PATIENT, idempotent=False) as admin:
        admin.create_topic("hint", 1, 3, format="raw")

        def named() -> list[log_pb2.AppendStreamResponse] | None:
            """Both answers from a follower, once it names the leader (a new partition's
            follower may not have heard from its leader yet, and the balancer may still
            move the leadership to the preferred replica: asked again until it does)."""
            leader = leader_of(admin, "hint")
            follower = next(m for m in cluster.members.values() if m.node_id != leader)
            answers = list(
                stub(follower.address).AppendStream(
                    iter([append("hint", 0, b"x"), append("hint", 0, b"y")]), timeout=30
                )
            )
            assert len(answers) == 2, answers  # the stream goes on after the first error
            named = answers[0].error.metadata.get("leader_address")
            if named != cluster.addresses[leader_of(admin, "hint")]:
                return None
            return answers

        answers = wait_until(named, "a follower names the leader on its stream")
    assert [a.error.reason for a in answers] == ["NOT_LEADER", "NOT_LEADER"]
    assert answers[0].error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]


def read_back(
    cluster: DevCluster, topic: str, partitions: int
) -> tuple[dict[bytes, tuple[int, int]], Counter[bytes]]:
    """Every committed record of `topic`: where each value is (partition, offset), and how
    many times each value was written."""
    where: dict[bytes, tuple[int, int]] = {}
    counts: Counter[bytes] = Counter()
    with Client(cluster.bootstrap, retry=PATIENT) as reader:
        for p in range(partitions):
            leader_of(reader, topic, p)
            offset, hw = 0, reader.list_offsets(topic, [p])[0].latest
            while offset < hw:
                got = reader.fetch(topic, p, offset, max_bytes=1 << 20)
                for o, v in zip(got.records.offsets, got.records.values, strict=True):
                    counts[v] += 1
                    where[v] = (p, o)
                offset = got.next_offset
    return where, counts


def test_a_streaming_idempotent_producer_writes_every_record_once_through_a_leader_kill(
    cluster: DevCluster,
) -> None:
    topic, partitions, records_max = "kill-under-stream", 2, 400_000
    retry = RetryPolicy(attempts_max=1000, backoff_max_ms=300, deadline_ms=60_000)
    with Client(cluster.bootstrap, retry=PATIENT) as admin:
        admin.create_topic(topic, partitions, 3, format="raw")
        leaders = [leader_of(admin, topic, p) for p in range(partitions)]
    acked: dict[bytes, tuple[int, int]] = {}
    failed: list[BaseException] = []
    stop = threading.Event()

    def produce() -> None:
        with (
            Client(cluster.bootstrap, retry=retry, timeout_s=5) as client,
            client.producer(topic, acks="all", linger_ms=2, batch_records_max=500) as producer,
        ):
            assert producer._pipeline is not None, "the producer streams"
            sent: list[tuple[bytes, int, object]] = []
            for i in range(records_max):
                if stop.is_set():
                    break
                value = b"r%d" % i
                p = i % partitions
                sent.append((value, p, producer.send(value, partition=p)))
                if len(sent) >= 20_000:
                    collect(sent)
            producer.flush()
            collect(sent)

    def collect(sent: list[tuple[bytes, int, object]]) -> None:
        for value, p, fut in sent:
            try:
                acked[value] = (p, fut.result(120).offset)  # type: ignore[attr-defined]
            except ReplogError as exc:
                failed.append(exc)
        sent.clear()

    worker = threading.Thread(target=produce, daemon=True)
    worker.start()
    wait_until(lambda: len(acked) >= 20_000, "the producer is under way", 120)
    victim = cluster.members[leaders[0]]
    victim.kill()
    acked_at_kill = len(acked)
    wait_until(lambda: len(acked) >= acked_at_kill + 40_000, "the producer goes on after", 120)
    victim.start()
    stop.set()
    worker.join(300)
    assert not worker.is_alive(), "the producer did not finish"
    assert not failed, f"{len(failed)} sends failed, e.g. {failed[:3]}"

    where, counts = read_back(cluster, topic, partitions)
    twice = [v for v, c in counts.items() if c > 1]
    assert not twice, f"{len(twice)} records written twice, e.g. {twice[:5]}"
    lost = [v for v in acked if v not in where]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
    moved = [v for v, at in acked.items() if where[v] != at]
    assert not moved, f"acknowledged offsets changed, e.g. {moved[:5]}"
    # Each partition holds its records in the order they were sent.
    for p in range(partitions):
        sent_order = sorted((o, int(v[1:])) for v, (q, o) in where.items() if q == p)
        numbers = [n for _, n in sent_order]
        assert numbers == sorted(numbers), f"partition {p} out of order"
    print(f"acked={len(acked)} at_kill={acked_at_kill} records={sum(counts.values())}")
