"""The image runs a node that serves, survives `docker kill` and drains on `docker stop`.

Single node: the three-node failover scenarios of the container layer need replication and
are added with it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from testcontainers.core.container import DockerContainer

from replog.client import Client
from tests.containers.conftest import LABEL, free_port

HOST = "127.0.0.11"
READY_S = 60.0


def serving(address: str) -> bool:
    channel = grpc.insecure_channel(
        address,
        options=[
            ("grpc.initial_reconnect_backoff_ms", 50),
            ("grpc.max_reconnect_backoff_ms", 250),
        ],
    )
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
    except grpc.RpcError:
        return False
    finally:
        channel.close()


class Node:
    def __init__(self, image: str, data_dir: Path, port: int) -> None:
        self.image, self.data_dir, self.port = image, data_dir, port
        self.address = f"{HOST}:{port}"
        self.container: DockerContainer | None = None

    def start(self) -> Node:
        self.container = (
            DockerContainer(self.image)
            .with_kwargs(network_mode="host", labels={LABEL: "1"}, stop_signal="SIGTERM")
            .with_volume_mapping(str(self.data_dir), "/var/lib/replog", "rw")
            .with_env("REPLOG_LISTEN", self.address)
            .with_env("REPLOG_METRICS_LISTEN", "")
            .with_env("REPLOG_FLUSH", "always")
            .with_env("REPLOG_LOG_FORMAT", "json")
        )
        self.container.start()
        deadline = time.monotonic() + READY_S
        while not serving(self.address):
            self.wrapped.reload()
            assert self.wrapped.status in ("created", "running"), self.logs()
            assert time.monotonic() < deadline, self.logs()
            time.sleep(0.1)
        return self

    @property
    def wrapped(self):  # type: ignore[no-untyped-def]
        assert self.container is not None
        return self.container.get_wrapped_container()

    def logs(self) -> str:
        out, err = self.container.get_logs() if self.container else (b"", b"")
        return (out + err).decode(errors="replace")

    def kill(self) -> None:
        self.wrapped.kill()
        self.wrapped.wait(timeout=30)

    def stop(self) -> int:
        self.wrapped.stop(timeout=30)
        return int(self.wrapped.wait(timeout=30)["StatusCode"])


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "data"
    path.mkdir()
    path.chmod(0o777)  # the image runs as uid 10001
    yield path


def test_a_node_in_a_container_serves_and_keeps_acked_records_across_kill_and_stop(
    image: str, data_dir: Path
) -> None:
    port = free_port(HOST)
    node = Node(image, data_dir, port).start()
    values = [b"record-%05d" % i for i in range(5000)]
    with Client(node.address) as client:
        client.create_topic("c", 1)
        for i in range(0, len(values), 500):
            client.append("c", 0, values[i : i + 500], acks="all")
    node.kill()  # SIGKILL: flush=always means every acknowledged record is on disk

    node = Node(image, data_dir, port).start()
    with Client(node.address) as client:
        got: list[bytes] = []
        offset = 0
        while offset < len(values):
            fetched = client.fetch("c", 0, offset, max_bytes=64 * 1024)
            got.extend(fetched.records.values)
            offset = fetched.next_offset
        assert got == values
        client.append("c", 0, [b"after restart"], acks="all")
    assert node.stop() == 0, node.logs()  # SIGTERM: drained and flushed, clean exit
    assert (data_dir / "c" / "partition_0" / "high-watermark").read_text().strip() == "5001"
