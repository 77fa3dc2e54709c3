"""Redis Streams as a `Target` of bench/peers.py: one `redis-server`, or a primary with two
replicas (`--replicaof`) where each write is followed by `WAIT 2` (both replicas have it).

Every server keeps an append-only file fsynced every second (`appendonly yes`,
`appendfsync everysec`: the durability of replog's `--flush interval`), no RDB snapshots.
A stream (key) per run; a record is one `XADD` entry with one field `v`, its address the
entry ID. Client: redis-py with the hiredis parser.

* produce: pipelines of 1000 `XADD` (one round trip each), plus `WAIT 2 <ms>` at the end
  of each pipeline on the replicated set; the stream's length is checked after.
* consume: `XRANGE key (last-id + COUNT 1000` from the start (1000 measured fastest here,
  ahead of 5000 and 10000), decoded into (ID, {field: value}) by redis-py.
* latency: one `XADD` per round trip (`XADD` + `WAIT 2` in one pipeline when replicated).
"""

from __future__ import annotations

import time
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import redis
from peer_common import (
    BATCH_RECORDS,
    START_TIMEOUT_S,
    Deadline,
    PhaseTimeoutError,
    ServerProcess,
    batch_values,
    free_ports,
    require,
    timed_loop_ms,
    version_output,
)

BINARY = "redis-server"
WAIT_MS = 10_000  # WAIT's own timeout; a shorter answer than 2 replicas fails the run
FIELD = b"v"


class RedisTarget:
    system = "Redis"

    def __init__(self, work: Path, nodes: int) -> None:
        require(BINARY)
        self.nodes = nodes
        self.replicas = nodes - 1
        self.values = batch_values()
        self.ports = free_ports(nodes)
        self.servers: list[ServerProcess] = []
        self.primary = redis.Redis(host="127.0.0.1", port=self.ports[0])  # connects on use
        try:
            deadline = Deadline(START_TIMEOUT_S, "Redis start")
            for i, port in enumerate(self.ports):
                data = work / f"redis{i}"
                data.mkdir()
                cmd = [
                    BINARY, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data),
                    "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
                    "--daemonize", "no", "--loglevel", "warning",
                ]  # fmt: skip
                if i > 0:
                    cmd += ["--replicaof", "127.0.0.1", str(self.ports[0])]
                self.servers.append(ServerProcess(cmd, work / f"redis{i}.log").start())
            for server, port in zip(self.servers, self.ports, strict=True):
                server.wait_port(port, deadline)
            self._wait_replicas(deadline)
        except BaseException:
            self.close()
            raise

    def _wait_replicas(self, deadline: Deadline) -> None:
        """Until every replica has finished its first sync (and the AOF rewrite that follows
        it): writes measured during a full sync run at a tenth of their speed."""
        for port in self.ports[1:]:
            with redis.Redis(host="127.0.0.1", port=port) as replica:
                while True:
                    info = replica.info()
                    synced = (
                        info.get("master_link_status") == "up"
                        and not info.get("master_sync_in_progress")
                        and not info.get("aof_rewrite_in_progress")
                        and not info.get("aof_rewrite_scheduled")
                        and not info.get("loading")
                    )
                    if synced:
                        break
                    if deadline.remaining() <= 0:
                        raise PhaseTimeoutError(f"Redis replica on {port} not in sync: {info}")
                    time.sleep(0.05)

    @staticmethod
    def version() -> str:
        words = version_output(BINARY).split()
        server = next((w[2:] for w in words if w.startswith("v=")), "?")
        return f"redis-server {server}, redis-py {package_version('redis')} (hiredis)"

    def pids(self) -> list[int]:
        return [s.pid for s in self.servers]

    def _pipeline_end(self, pipe: Any) -> None:
        if self.replicas:
            pipe.execute_command("WAIT", self.replicas, WAIT_MS)

    def _check_replies(self, replies: list[Any]) -> None:
        if self.replicas:
            assert replies[-1] >= self.replicas, f"WAIT: {replies[-1]} of {self.replicas}"

    def _append(self, stream: str, values: list[bytes]) -> None:
        pipe = self.primary.pipeline(transaction=False)
        for value in values:
            pipe.xadd(stream, {FIELD: value})
        self._pipeline_end(pipe)
        self._check_replies(pipe.execute())

    def prepare(self, stream: str, deadline: Deadline) -> None:
        self.primary.delete(stream)
        self._append(stream, [b"warm"])

    def produce(self, stream: str, records: int, deadline: Deadline) -> float:
        before = int(self.primary.xlen(stream))
        started = time.perf_counter()
        for _ in range(records // BATCH_RECORDS):
            self._append(stream, self.values)
            deadline.check()
        elapsed = time.perf_counter() - started
        stored = int(self.primary.xlen(stream)) - before
        assert stored == records, f"Redis stored {stored} of {records} records"
        return elapsed

    def consume(self, stream: str, records: int, deadline: Deadline) -> float:
        got = 0
        start: bytes = b"-"
        started = time.perf_counter()
        while got < records:
            rows = self.primary.xrange(stream, start, "+", count=BATCH_RECORDS)
            assert rows, f"Redis stream {stream} ended after {got} of {records} records"
            got += len(rows)
            start = b"(" + rows[-1][0]
            deadline.check()
        return time.perf_counter() - started

    def latencies_ms(self, stream: str, samples: int, deadline: Deadline) -> list[float]:
        if self.replicas:
            value = self.values[:1]
            return timed_loop_ms(lambda: self._append(stream, value), samples, deadline)
        fields = {FIELD: self.values[0]}  # no pipeline: a plain call, redis-py's fastest
        return timed_loop_ms(lambda: self.primary.xadd(stream, fields), samples, deadline)

    def cleanup(self, stream: str) -> None:
        self.primary.delete(stream)

    def close(self) -> None:
        self.primary.close()
        for server in self.servers:
            server.stop()
