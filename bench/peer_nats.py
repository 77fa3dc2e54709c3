"""NATS JetStream as a `Target` of bench/peers.py: one `nats-server -js`, or a cluster of
three (`cluster {}` routes on 127.0.0.1, streams with 3 replicas), driven by nats-py.

A stream per run, file storage, one subject; a record's address is its stream sequence.

* produce: `JetStreamContext.publish_async` of every record with a window of 1000 pending
  acks (the size of the others' batches), then the wait for the last ack; the stream's
  message count is checked after.
* consume: an ordered consumer (`subscribe(ordered_consumer=True)`: push, no acks, flow
  control) from the stream's start, with a callback that counts the messages. The fastest
  nats-py path that keeps up on 1 M records: a push consumer without flow control ran ~1.25x
  faster on 200 k, but at 1 M the server cut the client off as a slow consumer; a pull
  consumer's `fetch` ran at ~0.25x.
* latency: `await publish()` (the ack) of one record at a time.

The client connects to the server that leads the stream (as replog's client goes to the
partition's leader): it keeps one connection per server and picks the leader's per stream.
nats-py is asyncio: one `asyncio.Runner` drives every call from the harness's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from importlib.metadata import version as package_version
from pathlib import Path

import nats
import nats.aio.msg
import nats.errors
import nats.js
import nats.js.errors
from nats.js.api import StorageType, StreamConfig
from peer_common import (
    BATCH_RECORDS,
    START_TIMEOUT_S,
    Deadline,
    PhaseTimeoutError,
    ServerProcess,
    batch_values,
    free_ports,
    require,
    version_output,
)

BINARY = "nats-server"


def server_config(index: int, port: int, store: Path, routes: list[int], route_port: int) -> str:
    lines = [
        f"server_name: s{index}",
        f"listen: 127.0.0.1:{port}",
        f'jetstream {{ store_dir: "{store}" }}',
    ]
    if routes:
        urls = ", ".join(f"nats-route://127.0.0.1:{p}" for p in routes)
        lines.append(f"cluster {{ name: bench, listen: 127.0.0.1:{route_port}, routes: [{urls}] }}")
    return "\n".join(lines) + "\n"


class NatsTarget:
    system = "NATS"

    def __init__(self, work: Path, nodes: int) -> None:
        require(BINARY)
        self.nodes = nodes
        self.values = batch_values()
        ports = free_ports(2 * nodes)
        self.ports, route_ports = ports[:nodes], ports[nodes:]
        self.servers: list[ServerProcess] = []
        self.runner = asyncio.Runner()
        self.connections: dict[str, nats.NATS] = {}  # server name -> connection
        self.leader = "s1"
        try:
            deadline = Deadline(START_TIMEOUT_S, "NATS start")
            for i, port in enumerate(self.ports, start=1):
                conf = work / f"nats{i}.conf"
                routes = route_ports if nodes > 1 else []
                store = work / f"nats{i}"
                conf.write_text(server_config(i, port, store, routes, route_ports[i - 1]))
                self.servers.append(
                    ServerProcess([BINARY, "-c", str(conf)], work / f"nats{i}.log").start()
                )
            for server, port in zip(self.servers, self.ports, strict=True):
                server.wait_port(port, deadline)
            for i, port in enumerate(self.ports, start=1):
                self.connections[f"s{i}"] = self.runner.run(
                    nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
                )
        except BaseException:
            self.close()
            raise

    def js(self) -> nats.js.JetStreamContext:
        return self.connections[self.leader].jetstream(publish_async_max_pending=BATCH_RECORDS)

    @staticmethod
    def version() -> str:
        server = version_output(BINARY).removeprefix("nats-server: ")
        return f"nats-server {server}, nats-py {package_version('nats-py')}"

    def pids(self) -> list[int]:
        return [s.pid for s in self.servers]

    def prepare(self, stream: str, deadline: Deadline) -> None:
        self.runner.run(self._prepare(stream, deadline))

    async def _prepare(self, stream: str, deadline: Deadline) -> None:
        js = self.connections["s1"].jetstream()
        config = StreamConfig(
            name=stream, subjects=[stream], storage=StorageType.FILE, num_replicas=self.nodes
        )
        while True:  # a new cluster answers only once its meta leader is elected
            try:
                await js.add_stream(config)
                break
            except (nats.errors.TimeoutError, nats.js.errors.APIError) as exc:
                if deadline.remaining() <= 0:
                    raise PhaseTimeoutError(f"NATS: no stream {stream}: {exc!r}") from exc
                await asyncio.sleep(0.2)
        while True:
            info = await js.stream_info(stream)
            if info.cluster is None or info.cluster.leader:
                self.leader = info.cluster.leader if info.cluster and info.cluster.leader else "s1"
                break
            deadline.check()
            await asyncio.sleep(0.05)
        await self.js().publish(stream, b"warm")

    def produce(self, stream: str, records: int, deadline: Deadline) -> float:
        return self.runner.run(self._produce(stream, records, deadline))

    async def _produce(self, stream: str, records: int, deadline: Deadline) -> float:
        js = self.js()
        before = (await js.stream_info(stream)).state.messages
        started = time.perf_counter()
        for i in range(records):
            await js.publish_async(stream, self.values[i % BATCH_RECORDS])
            if i % BATCH_RECORDS == 0:
                deadline.check()
        try:
            await asyncio.wait_for(js.publish_async_completed(), deadline.remaining())
        except TimeoutError as exc:
            raise PhaseTimeoutError("NATS produce: acks still pending") from exc
        elapsed = time.perf_counter() - started
        stored = (await js.stream_info(stream)).state.messages - before
        assert stored == records, f"NATS stored {stored} of {records} records"
        return elapsed

    def consume(self, stream: str, records: int, deadline: Deadline) -> float:
        return self.runner.run(self._consume(stream, records, deadline))

    async def _consume(self, stream: str, records: int, deadline: Deadline) -> float:
        js = self.js()
        done = asyncio.Event()
        got = 0
        last: list[nats.aio.msg.Msg] = []

        async def on_message(msg: nats.aio.msg.Msg) -> None:
            nonlocal got
            got += 1
            if got == records:
                last.append(msg)
                done.set()

        started = time.perf_counter()
        sub = await js.subscribe(
            stream,
            ordered_consumer=True,
            cb=on_message,
            pending_msgs_limit=records + BATCH_RECORDS,
            pending_bytes_limit=(records + BATCH_RECORDS) * 1024,
        )
        try:
            await asyncio.wait_for(done.wait(), deadline.remaining())
        except TimeoutError as exc:
            raise PhaseTimeoutError(f"NATS consume: {got} of {records} records") from exc
        finally:
            await sub.unsubscribe()  # an ordered consumer is ephemeral: the server drops it
        elapsed = time.perf_counter() - started
        assert last[0].metadata.sequence.stream == records, "delivered in stream order"
        return elapsed

    def latencies_ms(self, stream: str, samples: int, deadline: Deadline) -> list[float]:
        return self.runner.run(self._latencies_ms(stream, samples, deadline))

    async def _latencies_ms(self, stream: str, samples: int, deadline: Deadline) -> list[float]:
        js = self.js()
        value = self.values[0]
        for _ in range(20):
            await js.publish(stream, value)
        out = []
        for _ in range(samples):
            started = time.perf_counter()
            await js.publish(stream, value)
            out.append((time.perf_counter() - started) * 1000)
            deadline.check()
        return out

    def cleanup(self, stream: str) -> None:
        self.runner.run(self.connections["s1"].jetstream().delete_stream(stream))

    def close(self) -> None:
        for nc in self.connections.values():
            with contextlib.suppress(Exception):  # a server already gone: closed anyway
                self.runner.run(nc.close())
        self.connections.clear()
        self.runner.close()
        for server in self.servers:
            server.stop()
