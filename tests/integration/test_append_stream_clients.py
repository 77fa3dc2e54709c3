"""Both clients over AppendStream and around it: the asyncio client pipelines a partition's
batches over the stream (and `streaming=False` keeps unary Appends), a node without
AppendStream (an older server: UNIMPLEMENTED) gets unary Appends from the sync and the
asyncio client alike, `Client.close()` with a batch in flight to a dead node returns
after about `timeout_s`, not the whole retry deadline, failing that batch, and the asyncio
client's streamed appends land once each, in order, through a leader kill."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from replog.client import AsyncClient, Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import (
    OutOfOrderSequenceError,
    ReplogError,
    ShuttingDownError,
    UnavailableError,
)
from replog.server.edge.status import to_status
from replog.v1 import admin_pb2, admin_pb2_grpc, log_pb2
from tests.integration.servers import ServerProcess
from tests.integration.test_append_stream import read_back
from tests.integration.test_cluster import PATIENT, leader_of
from tests.integration.waiting import wait_until

pytestmark = [pytest.mark.integration]

_names = itertools.count()


def requests_of(server: ServerProcess, method: str) -> float:
    """`replog_requests_total` of `method`, all codes (Append counts each call; AppendStream
    each stream, once it ends)."""
    total = 0.0
    prefix = f'replog_requests_total{{code="OK",method="{method}"}} '
    for line in server.metrics().splitlines():
        if line.startswith(prefix):
            total += float(line[len(prefix) :])
    return total


def raw_topic(server: ServerProcess, partitions: int) -> str:
    name = f"aio-stream-{next(_names)}"
    with Client(server.address, idempotent=False) as c:
        c.create_topic(name, partitions, format="raw")
    return name


# -- the asyncio client over AppendStream --------------------------------------------------


@pytest.mark.parametrize("streaming", [True, False])
def test_the_async_client_pipelines_concurrent_appends_each_partition_in_order(
    shared_server: ServerProcess, streaming: bool
) -> None:
    topic = raw_topic(shared_server, 2)
    unary_before = requests_of(shared_server, "Append")

    async def scenario() -> list[tuple[int, int, int]]:
        async with AsyncClient(shared_server.address, streaming=streaming) as client:

            async def one(i: int) -> tuple[int, int, int]:
                values = [b"%d-%d" % (i, j) for j in range(3)]
                result = await client.append(topic, i % 2, values, acks="leader")
                return i, result.base_offset, result.last_offset

            return await asyncio.gather(*(one(i) for i in range(40)))

    results = asyncio.run(asyncio.wait_for(scenario(), 60))
    with Client(shared_server.address, idempotent=False) as c:
        for i, base, last in results:  # each batch whole, at the offsets it was answered with
            assert last - base == 2
            got = c.fetch(topic, i % 2, base).records
            assert got.offsets[:3] == [base, base + 1, last]
            assert got.values[:3] == [b"%d-%d" % (i, j) for j in range(3)]
        for partition in (0, 1):  # and once: the partition holds the 20 batches, no more
            (offsets,) = c.list_offsets(topic, [partition])
            assert len(c.fetch(topic, partition, 0).records.data_records()) == 60
            assert offsets.latest >= 60
    unary = requests_of(shared_server, "Append") - unary_before
    assert (unary == 0) if streaming else (unary >= 40)


# -- a node without AppendStream -------------------------------------------------------------


class LegacyLog:
    """A Log service from before AppendStream: unary Append and InitProducer only (the
    server does not know the method: grpc answers UNIMPLEMENTED, as an older replog does)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.offsets: dict[tuple[str, int], int] = {}
        self.sequences: dict[tuple[str, int], int] = {}  # the next base sequence expected
        self.appends = 0
        self.streams = 0

    def Append(self, request: log_pb2.AppendRequest, context: Any) -> log_pb2.AppendResponse:
        key = (request.topic, request.partition)
        with self.lock:
            # As an older replog does: an idempotent batch is taken only in sequence order
            # (unary calls in flight together may arrive in another order; the client resends)
            expected = self.sequences.get(key, 0)
            if request.producer_id and request.base_sequence != expected:
                err = OutOfOrderSequenceError("out of order", expected_sequence=expected)
                context.abort_with_status(to_status(err))
            if request.producer_id:
                self.sequences[key] = expected + len(request.values)
            self.appends += 1
            base = self.offsets.get(key, 0)
            self.offsets[key] = base + len(request.values)
        last = base + len(request.values) - 1
        return log_pb2.AppendResponse(base_offset=base, last_offset=last, high_watermark=last + 1)

    def InitProducer(self, request: Any, context: Any) -> log_pb2.InitProducerResponse:
        return log_pb2.InitProducerResponse(producer_id=7, producer_epoch=0)

    def handler(self) -> grpc.GenericRpcHandler:
        def unary(fn: Any, request: Any, response: Any) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                fn,
                request_deserializer=request.FromString,
                response_serializer=response.SerializeToString,
            )

        return grpc.method_handlers_generic_handler(
            "replog.v1.Log",
            {
                "Append": unary(self.Append, log_pb2.AppendRequest, log_pb2.AppendResponse),
                "InitProducer": unary(
                    self.InitProducer, log_pb2.InitProducerRequest, log_pb2.InitProducerResponse
                ),
            },
        )


class CountStreams(grpc.ServerInterceptor):  # type: ignore[misc]
    """Counts the AppendStream calls the legacy server refuses."""

    def __init__(self, log: LegacyLog) -> None:
        self.log = log

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        if details.method.endswith("/AppendStream"):
            with self.log.lock:
                self.log.streams += 1
        return continuation(details)


class LegacyAdmin(admin_pb2_grpc.AdminServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.address = ""

    def GetMetadata(self, request: Any, context: Any) -> admin_pb2.Metadata:
        """Each topic asked: raw, 4 partitions, led by this server (node 0)."""
        meta = admin_pb2.Metadata(nodes=[admin_pb2.Node(id=0, address=self.address)])
        for name in request.topics:
            topic = meta.topics.add(name=name, format=admin_pb2.TOPIC_FORMAT_RAW)
            topic.partitions.extend(admin_pb2.PartitionMetadata(partition=p) for p in range(4))
        return meta


@pytest.fixture
def legacy() -> Iterator[tuple[str, LegacyLog]]:
    # one worker: calls are handled in the order they arrive, as replog's event loop does
    log, admin = LegacyLog(), LegacyAdmin()
    server = grpc.server(futures.ThreadPoolExecutor(1), interceptors=[CountStreams(log)])
    server.add_generic_rpc_handlers((log.handler(),))
    admin_pb2_grpc.add_AdminServicer_to_server(admin, server)
    port = server.add_insecure_port("127.0.0.1:0")
    admin.address = f"127.0.0.1:{port}"
    server.start()
    yield admin.address, log
    server.stop(None)


def test_the_sync_client_sends_unary_appends_to_a_node_without_append_stream(
    legacy: tuple[str, LegacyLog],
) -> None:
    address, log = legacy
    with Client(address, retry=RetryPolicy(attempts_max=5)) as client:
        first = client.append("t", 0, [b"a", b"b"], acks="leader")
        producer = client.producer("t", acks="leader", partitions=2)
        batches = [producer.send_batch([b"x"] * 10, i % 2) for i in range(20)]
        results = [f.result(timeout=30) for f in batches]
        producer.close()
        after = client.append("t", 0, [b"c"], acks="leader")
    assert (first.base_offset, first.last_offset) == (0, 1)
    for partition, start in ((0, 2), (1, 0)):  # each partition's batches in the order sent
        bases = [r.base_offset for i, r in enumerate(results) if i % 2 == partition]
        assert bases == list(range(start, start + 100, 10))
    assert after.base_offset == 102
    assert log.appends == 2 + 20
    assert log.streams == 1  # remembered: the node gets unary Appends from then on


def test_the_async_client_sends_unary_appends_to_a_node_without_append_stream(
    legacy: tuple[str, LegacyLog],
) -> None:
    address, log = legacy

    async def scenario() -> list[int]:
        async with AsyncClient(address, retry=RetryPolicy(attempts_max=5)) as client:
            first = await client.append("t", 1, [b"a"], acks="leader")
            rest = await asyncio.gather(
                *(client.append("t", 1, [b"x", b"y"], acks="leader") for _ in range(10))
            )
            return [first.base_offset, *sorted(r.base_offset for r in rest)]

    bases = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert bases == [0, *range(1, 21, 2)]
    assert log.appends == 11
    # remembered: the node gets unary Appends from then on (a second call when grpc.aio
    # reported the refusal as INTERNAL: the probe, see aio_append_stream)
    assert 1 <= log.streams <= 2


# -- Client.close with a batch in flight to a dead node --------------------------------------


def test_close_with_a_batch_for_a_dead_node_returns_after_timeout_s_and_fails_the_batch(
    server_factory: Any,
) -> None:
    server: ServerProcess = server_factory().start()
    topic = raw_topic(server, 1)
    patient = RetryPolicy(attempts_max=100_000, deadline_ms=600_000)  # retries for 10 min
    client = Client(server.address, retry=patient, timeout_s=2.0)
    client.append(topic, 0, [b"before"], acks="leader")  # stream open, producer id known
    server.kill()
    outcome: list[object] = []

    def append() -> None:
        try:
            outcome.append(client.append(topic, 0, [b"lost"], acks="leader"))
        except ReplogError as exc:
            outcome.append(exc)

    writer = threading.Thread(target=append, daemon=True)
    writer.start()
    # the batch is in the client's pipeline, failing and retrying (a look inside: no API
    # says "a batch is pending")
    wait_until(
        lambda: client._pipeline is not None and client._pipeline._busy(),
        "the batch is in the pipeline",
        30,
    )
    closer = threading.Thread(target=client.close, daemon=True)
    closer.start()
    closer.join(60)  # timeout_s is 2 s; the retry deadline 10 min
    assert not closer.is_alive(), "close waited for the retry deadline"
    writer.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], ShuttingDownError | UnavailableError)


# -- the asyncio client through a leader kill ----------------------------------------------


@pytest.mark.slow
def test_async_streamed_appends_land_once_each_and_in_order_through_a_leader_kill(
    cluster: DevCluster,
) -> None:
    topic, partitions, workers, batch = "aio-kill", 2, 8, 50
    with Client(cluster.bootstrap, retry=PATIENT) as admin:
        admin.create_topic(topic, partitions, 3, format="raw")
        victim = cluster.members[leader_of(admin, topic, 0)]
    retry = RetryPolicy(attempts_max=1000, backoff_max_ms=300, deadline_ms=60_000)
    acked: dict[bytes, tuple[int, int]] = {}  # value -> (partition, offset)
    failed: list[ReplogError] = []

    async def scenario() -> None:
        stop = asyncio.Event()
        async with AsyncClient(cluster.bootstrap, retry=retry, timeout_s=5) as client:

            async def worker(w: int) -> None:
                p = w % partitions
                for n in range(10_000):  # bounded; stopped long before
                    if stop.is_set():
                        return
                    values = [b"w%d-%d-%d" % (w, n, j) for j in range(batch)]
                    try:
                        result = await client.append(topic, p, values, acks="all")
                    except ReplogError as exc:
                        failed.append(exc)
                        return
                    for j, value in enumerate(values):
                        acked[value] = (p, result.base_offset + j)

            async def until(count: int, what: str) -> None:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 120
                while len(acked) < count:
                    assert loop.time() < deadline, what
                    await asyncio.sleep(0.05)

            tasks = [asyncio.ensure_future(worker(w)) for w in range(workers)]
            await until(5_000, "the writers are under way")
            await asyncio.to_thread(victim.kill)
            await until(len(acked) + 10_000, "the writers go on after the kill")
            await asyncio.to_thread(victim.start)
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 180)

    asyncio.run(scenario())
    assert not failed, f"{len(failed)} appends failed, e.g. {failed[:3]}"
    where, counts = read_back(cluster, topic, partitions)
    assert not [v for v, c in counts.items() if c > 1], "records written twice"
    assert not [v for v in acked if v not in where], "acknowledged records lost"
    assert not [v for v, at in acked.items() if where[v] != at], "acknowledged offsets moved"
    for w in range(workers):  # each writer's batches in the order it sent them
        mine = sorted((o, v) for v, (_, o) in where.items() if v.startswith(b"w%d-" % w))
        numbers = [tuple(int(x) for x in v.split(b"-")[1:]) for _, v in mine]
        assert numbers == sorted(numbers), f"writer {w}'s records out of order"
