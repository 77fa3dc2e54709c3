"""ListOffsets by time against real servers: envelope timestamps, raw topics dated by their
idempotent batch headers, consumers and the CLI starting from a time, a restart, and a
3-node cluster where followers forward the question (issue 13 item 2)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from replog.client import Client, Record, RetryPolicy
from replog.devcluster import DevCluster
from replog.v1 import admin_pb2, admin_pb2_grpc
from tests.integration.servers import ServerProcess
from tests.integration.test_cli import replog
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration

PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=90_000)


@pytest.fixture
def idem(shared_server: ServerProcess) -> Iterator[Client]:
    with Client(shared_server.address, timeout_s=30, retry=RetryPolicy(attempts_max=3)) as c:
        yield c


def test_envelope_topics_answer_the_first_record_at_or_after_a_time(idem: Client) -> None:
    idem.create_topic("by-time", 1, format="envelope")
    stamps = [1_000, 3_000, 2_000, 5_000, 4_000]  # producers' clocks need not agree
    res = idem.append("by-time", 0, [Record(b"%d" % t, timestamp_ms=t) for t in stamps])
    base = res.base_offset
    ask = idem.offsets_for_times
    assert ask("by-time", {0: 0}) == {0: base}
    assert ask("by-time", {0: 2_500}) == {0: base + 1}  # 3000: the first at or after
    assert ask("by-time", {0: 4_500}) == {0: base + 3}
    (offsets,) = idem.list_offsets("by-time", timestamp_ms=4_500)
    assert (offsets.offset_for_timestamp, offsets.found_timestamp_ms) == (base + 3, 5_000)
    end = ask("by-time", {0: 9_000})  # none that new: the end, where a reader waits
    assert end == {0: offsets.latest}
    consumer = idem.consumer("by-time", 0, from_time_ms=2_500)
    first = next(iter(consumer))
    consumer.close()
    assert (first.offset, first.value) == (base + 1, b"3000")


def test_a_raw_topic_is_dated_by_its_idempotent_batch_headers(idem: Client) -> None:
    idem.create_topic("raw-by-time", 1, format="raw")
    before = int(time.time() * 1000)
    idem.append("raw-by-time", 0, [b"first batch"])
    wait_until(lambda: int(time.time() * 1000) > before + 5 or None, "the clock moves on")
    middle = int(time.time() * 1000)
    second = idem.append("raw-by-time", 0, [b"second batch", b"more"])
    start = idem.offsets_for_times("raw-by-time", {0: middle})[0]
    assert start == second.base_offset - 1  # the batch's header, which readers skip
    consumer = idem.consumer("raw-by-time", 0, from_time_ms=middle)
    values = []
    for record in consumer:
        values.append(record.value)
        if len(values) == 2:
            break
    consumer.close()
    assert values == [b"second batch", b"more"]


def test_the_cli_consumes_from_a_time_given_in_iso_8601_or_milliseconds(
    shared_server: ServerProcess, idem: Client
) -> None:
    addr = shared_server.address
    idem.create_topic("cli-time", 1, format="envelope")
    day = 1_764_064_800_000  # 2025-11-25T10:00:00Z
    early, on_time = Record(b"early", timestamp_ms=day - 1), Record(b"on time", timestamp_ms=day)
    idem.append("cli-time", 0, [early, on_time])
    iso = replog("consume", "cli-time", "--from-time", "2025-11-25T10:00:00Z", address=addr)
    assert iso.returncode == 0, iso.stderr
    assert iso.stdout == b"on time\n"
    ms = replog("consume", "cli-time", "--from-time", str(day - 1), address=addr)
    assert ms.stdout == b"early\non time\n"
    bad = replog("consume", "cli-time", "--from-time", "yesterday", address=addr)
    assert bad.returncode != 0 and b"--from-time" in bad.stderr


def test_answers_survive_a_restart(server_factory: object) -> None:
    server = server_factory("--segment-bytes-max", "4096")  # type: ignore[operator]
    server.start()
    stamps = list(range(0, 300_000, 1_000))  # many segments
    with Client(server.address, timeout_s=30, retry=PATIENT) as client:
        client.create_topic("restart-time", 1, format="envelope")
        for i in range(0, len(stamps), 50):
            client.append(
                "restart-time", 0, [Record(b"x" * 50, timestamp_ms=t) for t in stamps[i : i + 50]]
            )
        asked = {
            t: client.offsets_for_times("restart-time", {0: t})[0] for t in (0, 123_456, 250_000)
        }
    server.terminate()
    server.start()
    with Client(server.address, timeout_s=30, retry=PATIENT) as client:
        again = {
            t: client.offsets_for_times("restart-time", {0: t})[0] for t in (0, 123_456, 250_000)
        }
    assert again == asked
    assert asked[123_456] < asked[250_000]


def _list_offsets_retrying(
    address: str, request: admin_pb2.ListOffsetsRequest, deadline_s: float = 60.0
) -> admin_pb2.ListOffsetsResponse:
    """ListOffsets on one node, retried on UNAVAILABLE as docs/api.md tells clients to: a
    follower forwards the question to the leader, and its channel to a leader that started
    a moment after it may still be waiting out a reconnect backoff (clean-clone CI)."""
    deadline = time.monotonic() + deadline_s
    with grpc.insecure_channel(address) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        while True:
            try:
                reply: admin_pb2.ListOffsetsResponse = admin.ListOffsets(request, timeout=30)
                return reply
            except grpc.RpcError as exc:
                code = exc.code()  # type: ignore[attr-defined]
                if code != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                    raise
            time.sleep(0.1)


@pytest.mark.slow
def test_followers_forward_a_time_question_to_the_leader(tmp_path: Path) -> None:
    cluster = DevCluster(tmp_path / "cluster", 3)
    cluster.start()
    try:
        with Client(cluster.bootstrap, timeout_s=30, retry=PATIENT) as client:
            client.create_topic("cluster-time", 1, replication_factor=3, format="envelope")
            res = client.append(
                "cluster-time", 0, [Record(b"a", timestamp_ms=10), Record(b"b", timestamp_ms=20)]
            )
        for address in cluster.addresses.values():  # the leader and both followers
            reply = _list_offsets_retrying(
                address, admin_pb2.ListOffsetsRequest(topic="cluster-time", timestamp_ms=15)
            )
            (p,) = reply.partitions
            assert (p.offset_for_timestamp, p.found_timestamp_ms) == (res.base_offset + 1, 20)
    finally:
        cluster.kill_all()
