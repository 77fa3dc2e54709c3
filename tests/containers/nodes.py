"""One `replog serve` container per node: start, health probe, kill, stop, pause, restart.

Every container runs the image with host networking (the only networking these machines
allow) and binds its own loopback address, so a node's gRPC address is `host:port` on the
test's host too. The data dir is a bind mount of a host directory, so a restarted container
(`docker start` of the same container) recovers the same log, and the test can read the
segment files. Every container carries the test label that `conftest.remove_labelled` uses.

TLS is on, as in deploy/k8s: `Pki` makes a throwaway CA in the test's tmp dir
(`replog.certs`) and, per node, a directory with `ca.pem`, `node<id>.pem` and
`node<id>-key.pem` (URI SAN replog://node/<id>, IP SAN of the node's loopback address; the
CA's key stays on the host). It is bind-mounted read-only at /etc/replog/tls. Each node has
three listeners: the client listener (TLS), the peer listener (mutual TLS with a member's
certificate; replication and forwarded calls) and a plaintext grpc.health.v1 listener, which
the readiness probe here uses as the kubelet's does. Clients use `Pki.client_tls`.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from testcontainers.core.container import DockerContainer

from replog import certs
from replog.tls import ClientTls
from tests.containers.conftest import LABEL

READY_S = 60.0
STOP_TIMEOUT_S = 30  # `docker stop` grace before SIGKILL: longer than the server's drain
DATA_DIR = "/var/lib/replog"
TLS_DIR = "/etc/replog/tls"  # as in deploy/k8s/statefulset.yaml
IMAGE_UID = 10001  # the image's `replog` user (Dockerfile)


def serving(address: str) -> bool:
    """Whether the node's plaintext gRPC health listener answers SERVING (one probe, 1 s at
    most)."""
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


def readable_by_the_image(path: Path) -> None:
    """Let the container's user read a file the test wrote (keys are written 0600): owned by
    that user when the test runs as root, else readable by all (a throwaway tmp file)."""
    if os.geteuid() == 0:
        os.chown(path, IMAGE_UID, IMAGE_UID)
    else:
        path.chmod(0o644)


class Pki:
    """A throwaway CA in `root` and, per node, the directory its container mounts."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ca = certs.create_ca(root / "ca", "replog container tests CA")
        # What a client needs: the CA that signs the nodes' certificates (the client
        # listener does not ask for client certificates, as in deploy/k8s).
        self.client_tls = ClientTls(self.ca.cert_file)

    def node_dir(self, node_id: int, host: str) -> Path:
        """`ca.pem`, `node<id>.pem`, `node<id>-key.pem` for node `node_id` reached at `host`."""
        directory = self.root / f"node{node_id}"
        issued = certs.issue_node(self.ca, directory, node_id, (host,))
        shutil.copyfile(self.ca.cert_file, directory / "ca.pem")
        for path in (issued.cert_file, issued.key_file, directory / "ca.pem"):
            readable_by_the_image(path)
        return directory


class Node:
    """One node in one container, TLS on; `env` adds `REPLOG_*` settings to the defaults
    below. `port`, `peer_port` and `health_port` are its three listeners on `host`."""

    def __init__(
        self,
        image: str,
        host: str,
        port: int,
        data_dir: Path,
        pki: Pki,
        peer_port: int,
        health_port: int,
        env: Mapping[str, str] | None = None,
        node_id: int = 0,
    ) -> None:
        self.image, self.host, self.port, self.data_dir = image, host, port, data_dir
        self.node_id = node_id
        self.address = f"{host}:{port}"
        self.peer_address = f"{host}:{peer_port}"
        self.health_address = f"{host}:{health_port}"
        self.tls_dir = pki.node_dir(node_id, host)
        self.client_tls = pki.client_tls
        self.env = {
            "REPLOG_LISTEN": self.address,
            "REPLOG_PEER_LISTEN": self.peer_address,
            "REPLOG_HEALTH_LISTEN": self.health_address,
            "REPLOG_TLS_CERT_FILE": f"{TLS_DIR}/node{node_id}.pem",
            "REPLOG_TLS_KEY_FILE": f"{TLS_DIR}/node{node_id}-key.pem",
            "REPLOG_TLS_CA_FILE": f"{TLS_DIR}/ca.pem",
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
        container.with_volume_mapping(str(self.tls_dir), TLS_DIR, "ro")
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
        while not serving(self.health_address):
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
