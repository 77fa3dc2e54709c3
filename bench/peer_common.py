"""What bench/peers.py and its systems (peer_replog.py, peer_nats.py, peer_redis.py) share.

* `Target`: one system at one size (1 node, or 3 nodes replicated) that the harness drives
  through the same workloads: `prepare` a fresh stream, `produce` batches, `consume`,
  `latencies_ms` of single-record produces, `cleanup`; `pids` are its server processes,
  whose CPU the harness charges to each workload.
* `ServerProcess`: one server binary (nats-server, redis-server) started here on 127.0.0.1,
  its output in a log file, stopped by its pid (SIGTERM, then SIGKILL).
* `Deadline`: every loop of a workload is bounded in count and in time.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from e2e import BATCH_RECORDS, VALUE_BYTES

START_TIMEOUT_S = 60.0

__all__ = [
    "BATCH_RECORDS",
    "VALUE_BYTES",
    "Deadline",
    "PhaseTimeoutError",
    "ServerProcess",
    "Target",
    "batch_values",
    "free_ports",
    "require",
    "timed_loop_ms",
    "version_output",
]


class PhaseTimeoutError(RuntimeError):
    """A workload or a start-up went past its time bound."""


class Deadline:
    def __init__(self, seconds: float, what: str) -> None:
        self.seconds = seconds
        self.what = what
        self.at = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise PhaseTimeoutError(f"{self.what}: not done after {self.seconds:.0f} s")


def batch_values() -> list[bytes]:
    """One batch of random `VALUE_BYTES`-byte values (reused: no client builds its values)."""
    return [os.urandom(VALUE_BYTES) for _ in range(BATCH_RECORDS)]


def require(binary: str) -> None:
    if shutil.which(binary) is None:
        raise RuntimeError(f"{binary} not found: run scripts/install-peers.sh")


def version_output(binary: str) -> str:
    """What `binary --version` prints (stdout, or stderr if it prints there)."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).strip()


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports on 127.0.0.1 (all held open until all are chosen)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Target(Protocol):
    system: str  # "replog", "NATS", "Redis"
    nodes: int

    def pids(self) -> list[int]: ...
    def prepare(self, stream: str, deadline: Deadline) -> None: ...
    def produce(self, stream: str, records: int, deadline: Deadline) -> float: ...
    def consume(self, stream: str, records: int, deadline: Deadline) -> float: ...
    def latencies_ms(self, stream: str, samples: int, deadline: Deadline) -> list[float]: ...
    def cleanup(self, stream: str) -> None: ...
    def close(self) -> None: ...


@dataclass
class ServerProcess:
    """A server binary started with `cmd`, output to `log_file`; only its own pid is signalled."""

    cmd: list[str]
    log_file: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> ServerProcess:
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(
                self.cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def wait_port(self, port: int, deadline: Deadline) -> None:
        """Until 127.0.0.1:`port` accepts a connection (the process must stay alive)."""
        assert self.proc is not None, "not started"
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.cmd[0]} exited:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                pass
            if deadline.remaining() <= 0:
                raise PhaseTimeoutError(f"{self.cmd[0]} not listening:\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def log_tail(self, chars: int = 3000) -> str:
        if not self.log_file.exists():
            return ""
        return self.log_file.read_text(errors="replace")[-chars:]


def timed_loop_ms(call: Callable[[], object], samples: int, deadline: Deadline) -> list[float]:
    """Latency in ms of `samples` sequential calls of `call()` (after 20 unmeasured ones)."""
    for _ in range(20):
        call()
    out = []
    for _ in range(samples):
        started = time.perf_counter()
        call()
        out.append((time.perf_counter() - started) * 1000)
        deadline.check()
    return out
