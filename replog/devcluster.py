"""A local cluster of `replog serve` processes on 127.0.0.1, for people, demos and tests.

    replog dev-cluster --nodes 3 --data-dir ./dev-data

Node ids are 1..N; each node gets its own data dir (`{data_dir}/node{id}`), a free port
chosen up front (the peers list needs every address before the first node starts), a
ready-file, and a log file (`{data_dir}/node{id}.log`). Only processes started here are
ever signalled, by their pid.

With `tls=True` (the default of `replog dev-cluster` and `make run`) it makes a throwaway
CA in `{data_dir}/tls/` (`replog.certs`), a certificate per node (URI SAN
`replog://node/<id>`, IP SAN 127.0.0.1) and a client certificate `admin`; each node gets a
second port for its peer listener (mutual TLS), and `client_tls` is what a client needs.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from replog.tls import ClientTls

READY_TIMEOUT_S = 60.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class NodeProcess:
    node_id: int
    address: str
    data_dir: Path
    workdir: Path
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None
    metrics_address: str = ""
    peer_address: str = ""

    @property
    def ready_file(self) -> Path:
        return self.workdir / f"node{self.node_id}.ready"

    @property
    def log_file(self) -> Path:
        return self.workdir / f"node{self.node_id}.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, wait: bool = True) -> NodeProcess:
        assert not self.running, f"node {self.node_id} is already running"
        self.ready_file.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("REPLOG_")}
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "replog", "serve", *self.args],
                stdout=log,
                stderr=log,
                env=env,
            )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.ready_file.exists():
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"node {self.node_id} exited:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {self.node_id} not ready:\n{self.log_tail()}")
            time.sleep(0.02)
        lines = self.ready_file.read_text().splitlines()
        fields = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
        self.metrics_address = fields.get("metrics", "")
        self.peer_address = fields.get("peer", self.peer_address)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL and reap."""
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(30)

    def stop(self) -> int:
        """SIGTERM (graceful) and wait for the exit code."""
        self.signal(signal.SIGTERM)
        assert self.proc is not None
        return self.proc.wait(60)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_file.read_text(errors="replace")[-chars:] if self.log_file.exists() else ""


@dataclass
class DevCluster:
    data_dir: Path
    nodes: int = 3
    host: str = "127.0.0.1"
    extra_args: Sequence[str] = ()
    # How node `src` reaches node `dst` (default: directly); tests route it via a proxy.
    peer_address: Callable[[int, int, str], str] | None = None
    members: dict[int, NodeProcess] = field(default_factory=dict)
    tls: bool = False
    client_tls: ClientTls | None = None

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Hold every node's ports until the nodes start, so that nothing else picking a free
        # port meanwhile (e.g. a test's proxies, built by `peer_address`) can take it.
        self._reserved: list[socket.socket] = []
        for _ in range(self.nodes * (2 if self.tls else 1)):
            s = socket.socket()
            s.bind((self.host, 0))
            self._reserved.append(s)
        bound = [int(s.getsockname()[1]) for s in self._reserved]
        ports = {i + 1: bound[i] for i in range(self.nodes)}
        # With TLS, node i also has a peer listener: the address its peers dial.
        peer_ports = {i + 1: bound[self.nodes + i] for i in range(self.nodes)} if self.tls else {}
        real = {i: f"{self.host}:{port}" for i, port in ports.items()}
        dialed = {i: f"{self.host}:{port}" for i, port in (peer_ports or ports).items()}
        tls_args: dict[int, list[str]] = {i: [] for i in ports}
        if self.tls:
            tls_args = self._make_certificates(list(ports))
        route = self.peer_address or (lambda _src, _dst, address: address)
        for i, port in ports.items():
            dials = {j: dialed[j] if j == i else route(i, j, dialed[j]) for j in real}
            peers = ",".join(
                f"{j}={real[j]}/{dials[j]}" if self.tls else f"{j}={dials[j]}" for j in real
            )
            data = self.data_dir / f"node{i}"
            args = [
                "--node-id", str(i),
                "--listen", f"{self.host}:{port}",
                "--peers", peers,
                "--data-dir", str(data),
                "--metrics-listen", f"{self.host}:0",
                "--ready-file", str(self.data_dir / f"node{i}.ready"),
                *tls_args[i],
                *self.extra_args,
            ]  # fmt: skip
            if self.tls:
                args += ["--peer-listen", dialed[i]]
            node = NodeProcess(i, f"{self.host}:{port}", data, self.data_dir, args)
            node.peer_address = dialed[i] if self.tls else ""
            self.members[i] = node

    @property
    def tls_dir(self) -> Path:
        return self.data_dir / "tls"

    def _make_certificates(self, node_ids: list[int]) -> dict[int, list[str]]:
        from replog import certs

        ca = certs.create_ca(self.tls_dir, "replog dev-cluster CA")
        out: dict[int, list[str]] = {}
        for i in node_ids:
            issued = certs.issue_node(ca, self.tls_dir, i, (self.host, "localhost"))
            out[i] = [
                "--tls-cert-file", str(issued.cert_file),
                "--tls-key-file", str(issued.key_file),
                "--tls-ca-file", str(ca.cert_file),
            ]  # fmt: skip
        admin = certs.issue_client(ca, self.tls_dir, "admin")
        self.client_tls = ClientTls(ca.cert_file, admin.cert_file, admin.key_file)
        return out

    @property
    def addresses(self) -> dict[int, str]:
        return {i: n.address for i, n in self.members.items()}

    @property
    def bootstrap(self) -> str:
        return ",".join(self.addresses.values())

    def start(self) -> DevCluster:
        for s in self._reserved:
            s.close()
        self._reserved.clear()
        for node in self.members.values():
            node.start(wait=False)
        for node in self.members.values():
            node.wait_ready()
        return self

    def stop(self) -> None:
        for node in self.members.values():
            if node.running:
                node.stop()

    def kill_all(self) -> None:
        for node in self.members.values():
            node.kill()

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill_all()
