"""DeleteTopic while appends, StreamFrom streams and long-poll Fetches run on the topic, on
one node and on three; the topic is created again under the same name at once.

Every stream and long poll on the deleted topic ends with NOT_FOUND UNKNOWN_TOPIC (never
STORAGE_ERROR "Bad file descriptor", never SHUTTING_DOWN, never hanging until the client's
deadline); every append in flight either succeeded before the delete or gets NOT_FOUND; and
the topic created again works at once and holds only its own records. Bounded: a few rounds,
each with a deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.v1 import log_pb2, log_pb2_grpc
from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration

PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=200, deadline_ms=60_000)
ROUNDS = 3
LOAD_S = 0.5  # load runs this long before each delete
END_S = 20.0  # every operation on the deleted topic ends within this (the RPC deadline: 60 s)
RPC_TIMEOUT_S = 60.0
APPENDS_MAX = 100_000
TOPIC = "busy"
GONE = ("NOT_FOUND", "UNKNOWN_TOPIC")


def outcome(err: grpc.RpcError) -> tuple[str, str]:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    reason = ""
    if status is not None and status.details:
        info = error_details_pb2.ErrorInfo()
        status.details[0].Unpack(info)
        reason = info.reason
    return err.code().name, reason


@dataclass
class Load:
    """Threads on one round's topic; each records how it ended."""

    addresses: dict[int, str]  # partition -> its leader's address
    label: bytes
    deleting: threading.Event = field(default_factory=threading.Event)
    ends: dict[str, tuple[str, str]] = field(default_factory=dict)
    appended: int = 0
    threads: list[threading.Thread] = field(default_factory=list)
    channels: list[grpc.Channel] = field(default_factory=list)

    def stub(self, partition: int) -> log_pb2_grpc.LogStub:
        channel = grpc.insecure_channel(self.addresses[partition])
        self.channels.append(channel)
        return log_pb2_grpc.LogStub(channel)

    def run(self, name: str, body: Callable[[], None]) -> None:
        def wrapped() -> None:
            try:
                body()
                self.ends[name] = ("STOPPED", "")
            except grpc.RpcError as err:
                self.ends[name] = outcome(err)

        thread = threading.Thread(target=wrapped, name=name, daemon=True)
        self.threads.append(thread)
        thread.start()

    def start(self, hw_idle: int) -> None:
        busy, idle = self.stub(0), self.stub(1)

        def append() -> None:
            for i in range(APPENDS_MAX):
                if self.deleting.is_set():
                    return
                req = log_pb2.AppendRequest(
                    topic=TOPIC,
                    partition=0,
                    values=[self.label + b"-%d" % i],
                    acks=log_pb2.ACKS_ALL,
                )
                busy.Append(req, timeout=RPC_TIMEOUT_S)
                self.appended += 1

        def stream(partition: int, offset: int) -> Callable[[], None]:
            def body() -> None:
                stub = busy if partition == 0 else idle
                req = log_pb2.StreamFromRequest(topic=TOPIC, partition=partition, offset=offset)
                for _batch in stub.StreamFrom(req, timeout=RPC_TIMEOUT_S):
                    pass
                raise AssertionError("a stream ended without an error")

            return body

        def long_poll() -> None:
            for _ in range(1000):
                req = log_pb2.FetchRequest(
                    topic=TOPIC, partition=1, offset=hw_idle, max_wait_ms=30_000
                )
                idle.Fetch(req, timeout=RPC_TIMEOUT_S)  # nothing is appended there: it waits

        def fetch_busy() -> None:
            offset = 0
            for _ in range(APPENDS_MAX):
                if self.deleting.is_set():
                    return
                req = log_pb2.FetchRequest(
                    topic=TOPIC, partition=0, offset=offset, max_bytes=4096, max_wait_ms=500
                )
                offset = busy.Fetch(req, timeout=RPC_TIMEOUT_S).next_offset

        for k in range(2):
            self.run(f"append-{k}", append)
            self.run(f"stream-busy-{k}", stream(0, 0))
            self.run(f"stream-idle-{k}", stream(1, hw_idle))
            self.run(f"long-poll-{k}", long_poll)
            self.run(f"fetch-busy-{k}", fetch_busy)

    def wait_ended(self) -> None:
        deadline = time.monotonic() + END_S
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        hanging = [t.name for t in self.threads if t.is_alive()]
        assert not hanging, f"still running {END_S} s after the delete: {hanging}"
        for channel in self.channels:
            channel.close()


def round_trip(client: Client, addresses: Callable[[], dict[int, str]]) -> None:
    for round_ in range(ROUNDS):
        label = b"round%d" % round_
        client.create_topic(TOPIC, 2, replication_factor=0, format="raw")
        client.append(TOPIC, 0, [label + b"-first"])
        hw_idle = client.fetch(TOPIC, 1, 0).high_watermark
        load = Load(addresses(), label)
        load.start(hw_idle)
        deadline = time.monotonic() + 30
        while load.appended < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(LOAD_S)
        assert load.appended >= 20, load.ends
        load.deleting.set()
        client.delete_topic(TOPIC)
        client.create_topic(TOPIC, 2, replication_factor=0, format="raw")  # at once, same name
        load.wait_ended()
        for name, end in load.ends.items():
            if name.startswith(("stream", "long-poll")):
                assert end == GONE, (name, end)
            else:  # stopped between two calls, or its call in flight saw the delete
                assert end in (GONE, ("STOPPED", "")), (name, end)
        # The topic created again works at once and holds only its own records.
        fresh = [b"fresh-%d" % round_]
        for p in (0, 1):
            res = client.append(TOPIC, p, fresh)
            got = client.fetch(TOPIC, p, 0)
            assert got.records.values == fresh, (p, got.records.values)
            assert res.last_offset < 5, "the new partition starts over"
        client.delete_topic(TOPIC)


def test_delete_under_load_ends_everything_with_not_found_on_one_node(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", tmp_path).start()
    try:
        with Client(server.address, timeout_s=30, retry=PATIENT) as client:
            round_trip(client, lambda: {0: server.address, 1: server.address})
        assert "Bad file descriptor" not in server.log_text()
    finally:
        server.kill()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(tmp_path / "cluster", 3)
    c.start()
    yield c
    c.kill_all()


def test_delete_under_load_ends_everything_with_not_found_on_three_nodes(
    cluster: DevCluster,
) -> None:
    with Client(cluster.bootstrap, timeout_s=30, retry=PATIENT) as client:

        def leaders() -> dict[int, str]:
            out: dict[int, str] = {}
            deadline = time.monotonic() + 30
            while len(out) < 2 and time.monotonic() < deadline:
                for info in client.describe_topic(TOPIC):
                    if info.leader_id is not None:
                        out[info.partition] = cluster.members[info.leader_id].address
                time.sleep(0.05)
            return out

        round_trip(client, leaders)
    for node in cluster.members.values():
        assert "Bad file descriptor" not in node.log_tail(1_000_000)
