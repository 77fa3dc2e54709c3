"""A local cluster of `replog serve` processes on 127.0.0.1, for people, demos and tests.

    replog dev-cluster --nodes 3 --data-dir ./dev-data

Node ids are 1..N; each node gets its own data dir (`{data_dir}/node{id}`), a free port
chosen up front (the peers list needs every address before the first node starts), a
ready-file, and a log file (`{data_dir}/node{id}.log`). Only processes started here are
ever signalled, by their pid.

Each node has a second port for its peer listener (replication and forwarded calls; with
TLS, mutual). Without TLS the nodes run with `--insecure` (plaintext on purpose, warned).
With `tls=True` it makes a throwaway CA in `{data_dir}/tls/` (`replog.certs`), a
certificate per node (URI SAN `replog://node/<id>`, IP SAN 127.0.0.1) and a client
certificate `admin`; `client_tls` is what a client needs. With `acl=True` too (the default
of `replog dev-cluster` and `make run`), clients must present a certificate
(`--tls-client-auth require`), `--authorization acl` decides, and `admin` (`OPERATOR`) is
the super-user.

With `kafka=True` (`replog dev-cluster` and `make run`) each node serves Kafka's protocol
too (docs/kafka.md) on a third port of its own, advertised as that same 127.0.0.1 address
(`kafka_addresses`, `kafka_bootstrap`); with TLS it is served over TLS, and with ACLs a
Kafka client presents a certificate as gRPC clients do (`kafka_client_config()`).

`client_env()` is what its clients need (`REPLOG_ADDRESS`, `REPLOG_TLS_*`);
`env_file_text` makes it a file a shell sources (`replog dev-cluster --env-file F`).

`Supervisor` keeps a started cluster's nodes running (`replog dev-cluster` uses it): a node
that exits is restarted with the same data dir and ports, so that `kill -9 <pid>` of one
node is a failover to watch locally; a node that died `RestartBudget.deaths_max` times
within `window_s` is left down (the rest keep running).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from replog.tls import ClientTls

OPERATOR = "User:admin"  # the super-user of a cluster with acl=True (client_tls is its)
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
STOP_LOG_CHARS = 40_000  # the log shown for a stop that did not end (its stack dump too)


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
        """SIGTERM (graceful) and wait for the exit code. A node still running after
        `STOP_TIMEOUT_S` has its log's tail (with the stacks it dumps: supervisor.py)
        written to stderr before `subprocess.TimeoutExpired` is raised."""
        self.signal(signal.SIGTERM)
        assert self.proc is not None
        try:
            return self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(f"node {self.node_id} still running {STOP_TIMEOUT_S:.0f} s after SIGTERM; "
                  f"its log ends:\n{self.log_tail(STOP_LOG_CHARS)}", file=sys.stderr)  # fmt: skip
            raise

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
    # With TLS: clients authenticate with a certificate, ACLs decide; the operator
    # super-user's certificate is `client_tls` (needs tls=True).
    acl: bool = False
    client_tls: ClientTls | None = None
    # Each node serves Kafka's protocol too, on its own port (docs/kafka.md).
    kafka: bool = False
    kafka_addresses: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.tls or not self.acl, "acl=True needs tls=True"
        self.data_dir = Path(self.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Hold every node's ports until the nodes start, so that nothing else picking a free
        # port meanwhile (e.g. a test's proxies, built by `peer_address`) can take it.
        self._reserved: list[socket.socket] = []
        for _ in range(self.nodes * (3 if self.kafka else 2)):
            s = socket.socket()
            s.bind((self.host, 0))
            self._reserved.append(s)
        bound = [int(s.getsockname()[1]) for s in self._reserved]
        ports = {i + 1: bound[i] for i in range(self.nodes)}
        # Node i also has a peer listener: the address its peers dial (peer messages are
        # never served on the client listener).
        peer_ports = {i + 1: bound[self.nodes + i] for i in range(self.nodes)}
        if self.kafka:  # advertised as bound: clients on this machine dial it
            self.kafka_addresses = {
                i + 1: f"{self.host}:{bound[2 * self.nodes + i]}" for i in range(self.nodes)
            }
        real = {i: f"{self.host}:{port}" for i, port in ports.items()}
        dialed = {i: f"{self.host}:{port}" for i, port in peer_ports.items()}
        # Plaintext only on purpose (`--insecure`); with TLS, optionally users and ACLs.
        tls_args: dict[int, list[str]] = {i: ["--insecure"] for i in ports}
        if self.tls:
            tls_args = self._make_certificates(list(ports))
        route = self.peer_address or (lambda _src, _dst, address: address)
        for i, port in ports.items():
            dials = {j: dialed[j] if j == i else route(i, j, dialed[j]) for j in real}
            peers = ",".join(f"{j}={real[j]}/{dials[j]}" for j in real)
            data = self.data_dir / f"node{i}"
            args = [
                "--node-id", str(i),
                "--listen", f"{self.host}:{port}",
                "--peers", peers,
                "--peer-listen", dialed[i],
                "--data-dir", str(data),
                "--metrics-listen", f"{self.host}:0",
                "--ready-file", str(self.data_dir / f"node{i}.ready"),
                *tls_args[i],
                *(["--kafka-listen", self.kafka_addresses[i]] if self.kafka else []),
                *self.extra_args,
            ]  # fmt: skip
            node = NodeProcess(i, f"{self.host}:{port}", data, self.data_dir, args)
            node.peer_address = dialed[i]
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
            if self.acl:
                out[i] += [
                    "--tls-client-auth", "require",
                    "--authorization", "acl",
                    "--super-users", OPERATOR,
                ]  # fmt: skip
        admin = certs.issue_client(ca, self.tls_dir, OPERATOR.removeprefix("User:"))
        self.client_tls = ClientTls(ca.cert_file, admin.cert_file, admin.key_file)
        return out

    @property
    def addresses(self) -> dict[int, str]:
        return {i: n.address for i, n in self.members.items()}

    @property
    def bootstrap(self) -> str:
        return ",".join(self.addresses.values())

    @property
    def kafka_bootstrap(self) -> str:
        return ",".join(self.kafka_addresses.values())

    def kafka_client_config(self) -> dict[str, str]:
        """librdkafka's settings for the operator (the super-user with ACLs) to reach the
        Kafka listeners: `bootstrap.servers` and, with TLS, the CA and its certificate."""
        assert self.kafka, "the nodes serve no Kafka (kafka=False)"
        config = {"bootstrap.servers": self.kafka_bootstrap}
        if self.client_tls is not None:
            t = self.client_tls
            assert t.cert_file is not None and t.key_file is not None
            config |= {
                "security.protocol": "SSL",
                "ssl.ca.location": str(t.ca_file.resolve()),
                "ssl.certificate.location": str(t.cert_file.resolve()),
                "ssl.key.location": str(t.key_file.resolve()),
            }
        return config

    def client_env(self) -> dict[str, str]:
        """What a client of this cluster needs, as the CLI's and `Client.from_env()`'s
        variables: `REPLOG_ADDRESS` (every node) and, with TLS, the operator's
        `REPLOG_TLS_CA`/`_CERT`/`_KEY` (absolute paths: a client may run elsewhere)."""
        env = {"REPLOG_ADDRESS": self.bootstrap}
        if self.client_tls is not None:
            t = self.client_tls
            assert t.cert_file is not None and t.key_file is not None
            env["REPLOG_TLS_CA"] = str(t.ca_file.resolve())
            env["REPLOG_TLS_CERT"] = str(t.cert_file.resolve())
            env["REPLOG_TLS_KEY"] = str(t.key_file.resolve())
        return env

    def release_ports(self) -> None:
        """Let go of the reserved ports, so that nodes can bind them (`start` does it; a
        test that starts some nodes itself calls it first)."""
        for s in self._reserved:
            s.close()
        self._reserved.clear()

    def start(self) -> DevCluster:
        self.release_ports()
        for node in self.members.values():
            node.start(wait=False)
        for node in self.members.values():
            node.wait_ready()
        return self

    def stop(self) -> None:
        """SIGTERM the running nodes one by one and wait for each (SIGKILL after
        `STOP_TIMEOUT_S`): every node this cluster started has exited and is reaped."""
        for node in self.members.values():
            if node.running:
                try:
                    node.stop()
                except subprocess.TimeoutExpired:
                    node.kill()

    def kill_all(self) -> None:
        for node in self.members.values():
            node.kill()

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill_all()


# Variables a stale shell may hold that would point a client elsewhere, or add to what
# `client_env` says: an env file unsets those it does not set.
CLIENT_ENV_NAMES = (
    "REPLOG_ADDRESS",
    "REPLOG_TLS_CA",
    "REPLOG_TLS_CERT",
    "REPLOG_TLS_KEY",
    "REPLOG_TLS_SERVER_NAME",
    "REPLOG_TOKEN",
)


def env_file_text(env: dict[str, str], pid: int) -> str:
    """A shell file that exports `env` (and unsets the other `CLIENT_ENV_NAMES`), headed by
    a comment naming the dev-cluster's `pid`."""
    lines = [
        f"# replog dev-cluster (pid {pid}): source this file to point replog and "
        f"replog.Client.from_env() at the cluster; `kill {pid}` stops it",
        *(f"export {name}={shlex.quote(value)}" for name, value in env.items()),
    ]
    unset = [name for name in CLIENT_ENV_NAMES if name not in env]
    if unset:
        lines.append(f"unset {' '.join(unset)}")
    return "\n".join(lines) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """`text` to `path` so that a reader sees no file or all of it (a temporary file in the
    same directory, renamed)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def describe_exit(code: int) -> str:
    """`-9` -> "killed by SIGKILL"; `1` -> "exit code 1" (as `Popen.returncode` has it)."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclass
class RestartBudget:
    """How often a node may die before it is left down: `deaths_max` deaths within
    `window_s` seconds (the last of them is not restarted)."""

    deaths_max: int = 3
    window_s: float = 30.0
    deaths: list[float] = field(default_factory=list)

    def restart_after_death(self, now: float) -> bool:
        """Count a death at `now` (monotonic seconds); True when the node may restart."""
        self.deaths = [t for t in self.deaths if now - t < self.window_s]
        self.deaths.append(now)
        return len(self.deaths) < self.deaths_max


class NodeState(Enum):
    SERVING = "serving"
    STARTING = "starting"  # restarted, not ready yet
    GIVEN_UP = "given up"  # died too often: left down


class Supervisor:
    """Keeps the nodes of a started `DevCluster` running; `check()` once in a while (it
    never blocks). What happens is told through `say` (one line each)."""

    def __init__(
        self,
        cluster: DevCluster,
        say: Callable[[str], None],
        budget: Callable[[], RestartBudget] = RestartBudget,
    ) -> None:
        self.cluster = cluster
        self.say = say
        self.states = {i: NodeState.SERVING for i in cluster.members}
        self.budgets = {i: budget() for i in cluster.members}

    @property
    def any_up(self) -> bool:
        """Whether some node runs or is coming back."""
        return any(s is not NodeState.GIVEN_UP for s in self.states.values())

    def check(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for i, node in self.cluster.members.items():
            state = self.states[i]
            if state is NodeState.GIVEN_UP:
                continue
            assert node.proc is not None, f"node {i} was never started"
            code = node.proc.poll()
            if code is not None:
                self._died(i, node, code, now)
            elif state is NodeState.STARTING and node.ready_file.exists():
                node.wait_ready()  # reads the ready-file (new metrics port)
                self.states[i] = NodeState.SERVING
                self.say(f"node {i} is back: pid {node.proc.pid}, serving on {node.address}")

    def _died(self, i: int, node: NodeProcess, code: int, now: float) -> None:
        assert node.proc is not None
        budget = self.budgets[i]
        what = f"node {i} (pid {node.proc.pid}) died: {describe_exit(code)}"
        if not budget.restart_after_death(now):
            self.states[i] = NodeState.GIVEN_UP
            self.say(
                f"{what}; it died {len(budget.deaths)} times within {budget.window_s:g}s: "
                f"NOT restarting it again (see {node.log_file}); the other nodes keep running"
            )
            return
        node.start(wait=False)  # same args: same data dir and ports
        self.states[i] = NodeState.STARTING
        self.say(f"{what}; restarting it as pid {node.proc.pid} (log: {node.log_file})")
