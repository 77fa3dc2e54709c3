"""Append, Fetch and StreamFrom against a real server process."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from replog import frames
from replog.client import Client
from replog.errors import TopicNotFoundError
from replog.v1 import log_pb2, log_pb2_grpc
from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration

WAIT_S = 30.0
# A single node is a cluster of one: a new topic's first leader writes its epoch marker (a
# control record consumers never see) at offset 0, so the first record lands at offset 1.
F = 1


def test_appended_records_come_back_from_fetch_with_their_offsets(
    client: Client, topic: str
) -> None:
    first = client.append(topic, 0, [b"a", b"bb", b""])
    second = client.append(topic, 0, [b"ccc"], acks="leader")
    assert (first.base_offset, first.last_offset) == (F, F + 2)
    assert (second.base_offset, second.last_offset, second.high_watermark) == (F + 3, F + 3, F + 4)
    res = client.fetch(topic, 0, 0)
    assert res.records.offsets == [F, F + 1, F + 2, F + 3]
    assert res.records.values == [b"a", b"bb", b"", b"ccc"]
    assert (res.high_watermark, res.log_start_offset, res.next_offset) == (F + 4, 0, F + 4)


def test_acks_none_returns_no_offsets_but_the_records_land(client: Client, topic: str) -> None:
    res = client.append(topic, 0, [b"x"] * 10, acks="none")
    assert res.base_offset == -1
    # the long poll at the first data offset waits for the batch to commit (an fsync away
    # under the default flush=always)
    fetched = client.fetch(topic, 0, F, max_wait_ms=int(WAIT_S * 1000))
    assert fetched.records.values[:1] == [b"x"]


def test_fetch_at_the_high_watermark_with_no_wait_answers_empty_at_once(
    client: Client, topic: str
) -> None:
    client.append(topic, 0, [b"a"])
    res = client.fetch(topic, 0, F + 1)
    assert len(res.records) == 0
    assert res.next_offset == F + 1
    assert res.high_watermark == F + 1


def test_fetch_long_poll_returns_early_when_a_record_is_committed(
    client: Client, topic: str
) -> None:
    # The poll may wait up to 10 minutes; it must come back with the record long before.
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(client.fetch, topic, 0, F, max_wait_ms=600_000)
        client.append(topic, 0, [b"wake up"])
        res = pending.result(timeout=WAIT_S)
    assert res.records.values == [b"wake up"]


def test_fetch_long_poll_times_out_empty_when_nothing_arrives(client: Client, topic: str) -> None:
    res = client.fetch(topic, 0, F, max_wait_ms=50)
    assert len(res.records) == 0
    assert res.high_watermark == F


def test_fetch_respects_max_bytes_but_returns_at_least_one_whole_record(
    client: Client, topic: str
) -> None:
    client.append(topic, 0, [b"v" * 1000] * 20)
    small = client.fetch(topic, 0, F, max_bytes=1)
    assert small.records.offsets == [F]
    frame = 12 + 20 + 1000  # frame header, envelope head (new topics' format), value
    some = client.fetch(topic, 0, F + 5, max_bytes=3 * frame)
    assert some.records.offsets == [F + 5, F + 6, F + 7]
    assert some.next_offset == F + 8


def test_stream_from_follows_the_tail_as_records_are_committed(client: Client, topic: str) -> None:
    client.append(topic, 0, [b"%d" % i for i in range(100)])
    consumer = client.consumer(topic, 0, 0)
    seen: list[int] = []
    done = threading.Event()

    def consume() -> None:
        for batch in consumer.batches():
            seen.extend(batch.offsets)
            if len(seen) >= 300:
                done.set()
                return

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    for start in (100, 200):
        client.append(topic, 0, [b"%d" % i for i in range(start, start + 100)])
    assert done.wait(WAIT_S)
    thread.join(WAIT_S)
    assert seen == list(range(F, F + 300))


def test_consumer_iterates_records_from_an_offset(client: Client, topic: str) -> None:
    client.append(topic, 0, [b"r%d" % i for i in range(50)])
    records = []
    for record in client.consumer(topic, 0, F + 45):
        records.append((record.offset, record.value))
        if record.offset == F + 49:
            break
    assert records == [(F + i, b"r%d" % i) for i in range(45, 50)]


def test_stream_replies_stay_under_the_grpc_message_limit(
    shared_server: ServerProcess, client: Client, topic: str
) -> None:
    # 6 MiB of committed data must arrive in several messages under the 4 MiB default.
    for _ in range(6):
        client.append(topic, 0, [b"z" * 4000] * 262)
    with grpc.insecure_channel(shared_server.address) as channel:
        stub = log_pb2_grpc.LogStub(channel)
        call = stub.StreamFrom(
            log_pb2.StreamFromRequest(topic=topic, partition=0, offset=F), timeout=WAIT_S
        )
        total = 0
        for batch in call:
            assert len(batch.SerializeToString()) < 4 * 1024 * 1024
            total += len(frames.decode(batch.frames))
            if total >= 6 * 262:
                break
        call.cancel()
    assert total == 6 * 262


def test_concurrent_appends_get_distinct_dense_offsets(client: Client, topic: str) -> None:
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: client.append(topic, 0, [b"%d" % i] * 10), range(40)))
    offsets = sorted(o for r in results for o in range(r.base_offset, r.last_offset + 1))
    assert offsets == list(range(F, F + 400))


@pytest.mark.parametrize("acks", ["leader", "all"])
def test_producer_batches_and_resolves_each_records_offset(
    client: Client, topic: str, acks: str
) -> None:
    with client.producer(topic, acks=acks, linger_ms=1, batch_records_max=100) as producer:
        futures = [producer.send(b"m%d" % i) for i in range(1000)]
        producer.flush(WAIT_S)
        offsets = [f.result(WAIT_S).offset for f in futures]
    assert offsets == list(range(F, F + 1000))
    requests = client.fetch(topic, 0, F + 990).records.values
    assert requests == [b"m%d" % i for i in range(990, 1000)]


def test_deleting_a_topic_ends_its_waiting_long_polls_and_streams_with_not_found(
    client: Client,
) -> None:
    client.create_topic("doomed", 1)
    stream = client.stream("doomed", 0, F)
    with ThreadPoolExecutor(2) as pool:
        poll = pool.submit(client.fetch, "doomed", 0, F, max_wait_ms=600_000)
        follow = pool.submit(next, stream)
        # Whether each call reached the server before or after the delete, it ends NOT_FOUND.
        client.delete_topic("doomed")
        with pytest.raises(TopicNotFoundError):
            poll.result(timeout=WAIT_S)
        with pytest.raises(TopicNotFoundError):
            follow.result(timeout=WAIT_S)
