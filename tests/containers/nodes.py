"""One `replog serve` container per node: start, health probe, kill, stop, pause, restart.

Every container runs the image with host networking (the only networking these machines
allow) and binds its own loopback address, so a node's gRPC address is `host:port` on the
test's host too. The data dir is a bind mount of a host directory, so a restarted container
(`docker start` of the same container) recovers the same log, and the test can read the
segment files. Every container carries the test label that `conftest.remove_labelled` uses.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from testcontainers.core.container import DockerContainer

from tests.containers.conftest import LABEL

READY_S = 60.0
STOP_TIMEOUT_S = 30  # `docker stop` grace before SIGKILL: longer than the server's drain
DATA_DIR = "/var/lib/replog"


def serving(address: str) -> bool:
    """Whether the node's gRPC health service answers SERVING (one probe, 1 s at most)."""
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


def data_dir_for(path: Path) -> Path:
    """A host directory the container's user (uid 10001) may write."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o777)
    return path


class Node:
    """One node in one container; `env` adds `REPLOG_*` settings to the defaults below."""

    def __init__(
        self,
        image: str,
        host: str,
        port: int,
        data_dir: Path,
        env: Mapping[str, str] | None = None,
        node_id: int = 0,
    ) -> None:
        self.image, self.host, self.port, self.data_dir = image, host, port, data_dir
        self.node_id = node_id
        self.address = f"{host}:{port}"
        self.env = {
            "REPLOG_LISTEN": self.address,
            "REPLOG_METRICS_LISTEN": "",
            "REPLOG_FLUSH": "always",
            "REPLOG_LOG_FORMAT": "json",
            **(env or {}),
        }
        self.container: DockerContainer | None = None

    def __repr__(self) -> str:
        return f"Node({self.node_id}, {self.address})"

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, wait: bool = True) -> Node:
        """Create and start a new container (the data dir keeps whatever it holds)."""
        container = DockerContainer(self.image).with_kwargs(
            network_mode="host", labels={LABEL: "1"}, stop_signal="SIGTERM"
        )
        container.with_volume_mapping(str(self.data_dir), DATA_DIR, "rw")
        for key, value in self.env.items():
            container.with_env(key, value)
        self.container = container.start()
        if wait:
            self.wait_serving()
        return self

    def restart(self, wait: bool = True) -> Node:
        """`docker start` the same (exited) container again: same data dir, same logs."""
        self.wrapped.start()
        if wait:
            self.wait_serving()
        return self

    def wait_serving(self) -> None:
        deadline = time.monotonic() + READY_S
        while not serving(self.address):
            status = self.status()
            assert status in ("created", "running"), f"{self} is {status}:\n{self.logs()}"
            assert time.monotonic() < deadline, f"{self} not serving:\n{self.logs()}"
            time.sleep(0.1)

    def kill(self) -> None:
        """`docker kill` (SIGKILL) and wait until the container has exited."""
        self.wrapped.kill()
        self.wrapped.wait(timeout=STOP_TIMEOUT_S)

    def stop(self) -> int:
        """`docker stop` (SIGTERM, SIGKILL after the grace); returns the exit code."""
        self.wrapped.stop(timeout=STOP_TIMEOUT_S)
        return int(self.wrapped.wait(timeout=STOP_TIMEOUT_S)["StatusCode"])

    def pause(self) -> None:
        """`docker pause`: every process of the container frozen (a hung node)."""
        self.wrapped.pause()

    def unpause(self) -> None:
        self.wrapped.unpause()

    def remove(self) -> None:
        if self.container is not None:
            self.container.stop()  # testcontainers: remove, forced
            self.container = None

    # -- inspection -------------------------------------------------------------------------

    @property
    def wrapped(self) -> Any:
        """The docker-py `Container`."""
        assert self.container is not None, f"{self} was never started"
        return self.container.get_wrapped_container()

    def status(self) -> str:
        """created | running | paused | exited | ... (as `docker inspect` says now)."""
        self.wrapped.reload()
        return str(self.wrapped.status)

    def logs(self, chars: int = 6000) -> str:
        """The tail of the container's output (every run of it: `restart` keeps the logs)."""
        if self.container is None:
            return ""
        out, err = self.container.get_logs()
        return (out + err).decode(errors="replace")[-chars:]

    def events(self) -> list[dict[str, Any]]:
        """The server's structured log lines (REPLOG_LOG_FORMAT=json), oldest first."""
        out: list[dict[str, Any]] = []
        for line in self.logs(chars=1 << 30).splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # e.g. a traceback printed by Python itself
            if isinstance(event, dict) and "event" in event:
                out.append(event)
        return out
