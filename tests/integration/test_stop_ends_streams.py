"""SIGTERM ends every stream at once with UNAVAILABLE SHUTTING_DOWN (and its ErrorInfo): an
idle and a pipelined AppendStream, an idle StreamFrom, a health Watch, a reflection stream
and a peer's replication stream. The node exits long before its (30 s) grace would expire:
nothing waits for the grace, which grpc would end with a bare "Cancelling all calls".
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from replog.client import Client
from replog.devcluster import DevCluster
from replog.server.peering.replication_transport import NODE_ID_HEADER
from replog.v1 import log_pb2, log_pb2_grpc, replication_pb2, replication_pb2_grpc
from tests.integration.test_cluster import PATIENT, leader_of, read_all
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration

GRACE_S = 30.0  # far above what a stop takes: reaching it would mean a stream held it
TOPIC = "streams"
IN_FLIGHT_MAX = 32  # the pipelined stream's unanswered requests
PIPELINE_S_MAX = 120.0  # the pipelined writer gives up after this long in any case
SHUTTING_DOWN = ("UNAVAILABLE", "SHUTTING_DOWN")


def outcome(err: grpc.RpcError) -> tuple[str, str]:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    reason = ""
    if status is not None and status.details:
        info = error_details_pb2.ErrorInfo()
        status.details[0].Unpack(info)
        reason = info.reason
    return err.code().name, reason


class Stream:
    """One call run in a thread: `opened` once it answered first, `end` how it ended."""

    def __init__(self, name: str, run: Callable[[Stream], None]) -> None:
        self.name = name
        self.opened = threading.Event()
        self.done = threading.Event()
        self.end: tuple[str, str] | None = None
        self.answers: list[object] = []
        self._thread = threading.Thread(target=self._main, args=(run,), daemon=True)
        self._thread.start()

    def _main(self, run: Callable[[Stream], None]) -> None:
        try:
            run(self)
            self.end = ("OK", "")
        except grpc.RpcError as err:
            self.end = outcome(err)
        finally:
            self.done.set()

    def until_done(self) -> Iterator[None]:
        """A request iterator's wait: returns (half-closes) only once the call has ended."""
        while not self.done.wait(0.1):
            pass
        yield from ()


def idle_after(first: object, stream: Stream) -> Iterator[object]:
    yield first
    yield from stream.until_done()  # type: ignore[misc]


def node_credentials(cluster: DevCluster, node: int) -> grpc.ChannelCredentials:
    """Node `node`'s own certificate: a peer's channel to another node's peer listener."""
    args = cluster.members[node].args
    arg = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--tls-")}
    return grpc.ssl_channel_credentials(
        Path(arg["--tls-ca-file"]).read_bytes(),
        Path(arg["--tls-key-file"]).read_bytes(),
        Path(arg["--tls-cert-file"]).read_bytes(),
    )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(
        tmp_path / "cluster",
        3,
        tls=True,
        extra_args=["--shutdown-grace-ms", str(int(GRACE_S * 1000))],
    )
    c.start()
    yield c
    c.kill_all()


# length: one scenario told top to bottom (setup, faults, checks); split, it would hide the story
def test_sigterm_ends_every_stream_with_shutting_down_and_exits_before_the_grace(
    cluster: DevCluster,
) -> None:
    assert cluster.client_tls is not None
    tls = cluster.client_tls
    with Client(cluster.bootstrap, retry=PATIENT, tls=tls) as client:
        client.create_topic(TOPIC, 1, 3, format="raw")
        client.append(TOPIC, 0, [b"first"], acks="all")
        stopped = leader_of(client, TOPIC)
        node = cluster.members[stopped]
        channel = grpc.secure_channel(node.address, tls.credentials(), tls.options())
        log_stub = log_pb2_grpc.LogStub(channel)  # type: ignore[no-untyped-call]
        peer = next(i for i in cluster.members if i != stopped)
        peer_channel = grpc.secure_channel(node.peer_address, node_credentials(cluster, peer))
        acked: dict[int, bytes] = {}

        def peer_exchange(s: Stream) -> None:  # a peer's replication stream, idle
            stub = replication_pb2_grpc.ReplicationStub(peer_channel)  # type: ignore[no-untyped-call]
            hello = replication_pb2.Envelope(topic="not-hosted", partition=0, from_id=peer)
            s.opened.set()
            stub.Exchange(idle_after(hello, s), metadata=((NODE_ID_HEADER, str(peer)),))

        def idle_append(s: Stream) -> None:
            request = log_pb2.AppendRequest(topic=TOPIC, partition=0, values=[b"idle"])
            for answer in log_stub.AppendStream(idle_after(request, s)):
                s.answers.append(answer)
                s.opened.set()

        def pipelined_append(s: Stream) -> None:
            room = threading.Semaphore(IN_FLIGHT_MAX)
            sent: queue.Queue[bytes] = queue.Queue()

            def requests() -> Iterator[log_pb2.AppendRequest]:
                deadline = time.monotonic() + PIPELINE_S_MAX
                n = 0
                while not s.done.is_set() and time.monotonic() < deadline:
                    if room.acquire(timeout=0.1):
                        n += 1
                        value = b"pipelined-%d" % n
                        sent.put(value)
                        yield log_pb2.AppendRequest(
                            topic=TOPIC, partition=0, values=[value], acks=log_pb2.ACKS_ALL
                        )

            for answer in log_stub.AppendStream(requests()):
                value = sent.get_nowait()  # answers come in request order
                room.release()
                s.answers.append(answer)
                if not answer.HasField("error"):
                    acked[answer.base_offset] = value
                if len(s.answers) >= 2 * IN_FLIGHT_MAX:
                    s.opened.set()

        def idle_stream_from(s: Stream) -> None:
            request = log_pb2.StreamFromRequest(topic=TOPIC, partition=0, offset=0)
            for batch in log_stub.StreamFrom(request):
                s.answers.append(batch)
                s.opened.set()

        def health_watch(s: Stream) -> None:
            stub = health_pb2_grpc.HealthStub(channel)  # type: ignore[no-untyped-call]
            for answer in stub.Watch(health_pb2.HealthCheckRequest(service="")):
                s.answers.append(answer.status)
                s.opened.set()

        def reflection(s: Stream) -> None:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)  # type: ignore[no-untyped-call]
            ask = reflection_pb2.ServerReflectionRequest(list_services="")
            for answer in stub.ServerReflectionInfo(idle_after(ask, s)):
                s.answers.append(answer)
                s.opened.set()

        streams = [
            Stream("exchange", peer_exchange),
            Stream("idle AppendStream", idle_append),
            Stream("pipelined AppendStream", pipelined_append),
            Stream("StreamFrom", idle_stream_from),
            Stream("health Watch", health_watch),
            Stream("reflection", reflection),
        ]
        for s in streams:
            wait_until(lambda s=s: s.opened.is_set() or s.done.is_set(), f"{s.name} is open")
            assert not s.done.is_set(), (s.name, s.end, node.log_tail())
        # the peer's stream has been read (its connection serves calls after it)
        grpc.channel_ready_future(peer_channel).result(timeout=60)

        began = time.monotonic()
        assert node.stop() == 0, node.log_tail()
        took_s = time.monotonic() - began
        for s in streams:
            assert s.done.wait(60), s.name
        ends = {s.name: s.end for s in streams}
        assert ends == {s.name: SHUTTING_DOWN for s in streams}, (ends, node.log_tail())
        # the process exited well before the grace: no call waited for it
        assert took_s < GRACE_S, (took_s, node.log_tail())
        lines = node.log_tail(1_000_000).splitlines()
        assert any("handover.done" in ln for ln in lines), node.log_tail()
        assert any("event=server.stopped" in ln for ln in lines), node.log_tail()
        assert streams[4].answers[-1] == health_pb2.HealthCheckResponse.NOT_SERVING
        pipelined = streams[2]
        assert len(pipelined.answers) >= 2 * IN_FLIGHT_MAX
        # every append the stream acknowledged is in the log, where its answer said
        assert acked, "the pipelined stream got no append acknowledged"
        records = dict(read_all(client, TOPIC))
        missing = [o for o, v in acked.items() if records.get(o) != v]
        assert not missing, f"{len(missing)} acknowledged records lost"
        for ch in (channel, peer_channel):
            ch.close()
