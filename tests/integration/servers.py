"""Real `replog serve` processes for integration tests (127.0.0.1, port 0, a ready-file).

Only processes started here are ever signalled, by their pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

READY_TIMEOUT_S = 30.0
EXIT_TIMEOUT_S = 30.0


@dataclass
class ServerProcess:
    data_dir: Path
    workdir: Path
    args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    address: str = ""
    metrics_address: str = ""
    peer_address: str = ""  # the peer listener's, when started with --peer-listen
    module: str = "replog"  # what `python -m` runs; tests may run a wrapper with a fault

    @property
    def ready_file(self) -> Path:
        return self.workdir / "ready"

    @property
    def log_file(self) -> Path:
        return self.workdir / "server.log"

    def start(self) -> ServerProcess:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.ready_file.unlink(missing_ok=True)
        cmd = [
            sys.executable,
            "-m",
            self.module,
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--ready-file",
            str(self.ready_file),
            "--shutdown-grace-ms",
            "5000",
            *self.args,
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("REPLOG_")}
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.ready_file.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log_file.read_text()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"server not ready:\n{self.log_file.read_text()}")
            time.sleep(0.02)
        lines = self.ready_file.read_text().splitlines()
        self.address = lines[0]
        fields = dict(line.split("=", 1) for line in lines[1:])
        self.metrics_address = fields.get("metrics", "")
        self.peer_address = fields.get("peer", "")
        assert int(fields["pid"]) == self.proc.pid
        return self

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def terminate(self) -> int:
        """SIGTERM and wait for the exit code."""
        self.signal(signal.SIGTERM)
        assert self.proc is not None
        return self.proc.wait(EXIT_TIMEOUT_S)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(EXIT_TIMEOUT_S)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=10) as r:
            return str(r.read().decode())

    def log_text(self) -> str:
        return self.log_file.read_text() if self.log_file.exists() else ""
