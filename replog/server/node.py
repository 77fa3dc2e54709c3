"""The node: composition root of one server process (storage, partition roles, services).

`Node` owns the partition registry and one `Partition` role per partition (a `SoloLeader`
on a single node; replication swaps in its roles here). `serve(settings)` runs the gRPC
server until SIGTERM/SIGINT, then shuts down gracefully: health NOT_SERVING, long polls
and streams ended (UNAVAILABLE SHUTTING_DOWN), in-flight calls finished (up to
`shutdown_grace_ms`), every partition flushed, HW checkpointed, files closed.

Ready file (`--ready-file`), written atomically once serving::

    127.0.0.1:41234            line 1: the gRPC address clients use
    metrics=127.0.0.1:41235    the metrics address (absent when metrics are off)
    pid=12345
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from replog.errors import ReplogError, ShuttingDownError, TopicNotFoundError, UnavailableError
from replog.server import logs
from replog.server.admin_service import AdminService
from replog.server.cluster import Cluster
from replog.server.log_service import LogService
from replog.server.logs import log
from replog.server.metrics import Metrics
from replog.server.partition import Partition, SoloLeader
from replog.server.replicated import ReplicatedPartition
from replog.server.replication_transport import ReplicationService
from replog.server.settings import Settings
from replog.server.supervisor import EXIT_TASK_FAILED, Supervisor
from replog.storage import PartitionLog, PartitionRegistry
from replog.v1 import admin_pb2, admin_pb2_grpc, log_pb2, log_pb2_grpc, replication_pb2_grpc

_log = logging.getLogger("replog.server")

FAILED_CLOSE_TIMEOUT_S = 5.0
SERVICE_NAMES = (
    log_pb2.DESCRIPTOR.services_by_name["Log"].full_name,
    admin_pb2.DESCRIPTOR.services_by_name["Admin"].full_name,
)


class Node:
    def __init__(self, settings: Settings, supervisor: Supervisor) -> None:
        self.settings = settings
        self.supervisor = supervisor
        self.node_id = settings.node_id
        self.address = settings.advertised_address or settings.listen
        self.registry = PartitionRegistry(settings.data_dir, settings.storage_config())
        self.metrics = Metrics(self.registry.open_partitions)
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._shutting_down = False
        peers = settings.peer_map()
        self.cluster: Cluster | None = Cluster(self, peers) if peers else None
        if self.cluster is not None:
            self.metrics.watch_replicas(self.cluster.drivers)

    async def open(self) -> None:
        """Open every partition; a cluster of one commits what its own log holds (HW = LEO).
        In cluster mode, replaying the committed metadata log opens the hosted replicas."""
        if self.cluster is not None:
            await self.cluster.start()
            return
        for topic, count in self.registry.topics().items():
            for p in range(count):
                await self.partition_async(topic, p)

    # -- partitions -------------------------------------------------------------------------

    async def partition_async(self, topic: str, partition: int) -> Partition:
        """The partition's role; raises UNKNOWN_TOPIC / UNKNOWN_PARTITION / SHUTTING_DOWN
        (and NOT_LEADER, in cluster mode, for a partition this node holds no replica of)."""
        if self.cluster is not None:
            if self._shutting_down:
                raise ShuttingDownError("the server is shutting down")
            try:
                return self.cluster.partition(topic, partition)
            except TopicNotFoundError:
                await self.cluster.check_unknown(topic)
                raise
        part = self._partitions.get((topic, partition))
        if part is not None and not part.closed:
            return part
        if self._shutting_down:
            raise ShuttingDownError("the server is shutting down")
        plog = await asyncio.to_thread(self.registry.get, topic, partition)  # may recover files
        return self._wrap(plog)

    def _wrap(self, plog: PartitionLog) -> Partition:
        key = (plog.topic, plog.partition)
        part = self._partitions.get(key)
        if part is None or part.closed or part.log is not plog:
            part = SoloLeader(plog, self.node_id)
            self._partitions[key] = part
        return part

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count (the cluster's, in cluster mode)."""
        if self.cluster is not None:
            return {name: meta.partitions for name, meta in self.cluster.topics.items()}
        return self.registry.topics()

    async def partition_count(self, topic: str) -> int:
        if self.cluster is not None:
            try:
                return self.cluster.topic(topic).partitions
            except TopicNotFoundError:
                await self.cluster.check_unknown(topic)
                raise
        return self.registry.partition_count(topic)

    def replicas_of(self, topic: str, partition: int) -> tuple[int, ...]:
        if self.cluster is not None:
            return self.cluster.topic(topic).assignment[partition]
        return (self.node_id,)

    def leader_of(self, topic: str, partition: int) -> int | None:
        return self.node_id  # a cluster of one leads everything

    def nodes(self) -> list[tuple[int, str]]:
        if self.cluster is not None:
            return self.cluster.nodes()
        return [(self.node_id, self.address)]

    # -- topics -----------------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int, replication_factor: int = 0) -> None:
        if self.cluster is not None:
            await self.cluster.create_topic(name, partitions, replication_factor)
            return
        await asyncio.to_thread(self.registry.create_topic, name, partitions)
        for p in range(partitions):
            await self.partition_async(name, p)

    async def delete_topic(self, name: str) -> None:
        if self.cluster is not None:
            await self.cluster.delete_topic(name)
            return
        for key in [k for k in self._partitions if k[0] == name]:
            self._partitions.pop(key).close()
        await asyncio.to_thread(self.registry.delete_topic, name)

    # -- lifecycle --------------------------------------------------------------------------

    def begin_shutdown(self) -> None:
        """Refuse new work and wake every long poll and stream."""
        self._shutting_down = True
        for part in self._partitions.values():
            part.close()
        if self.cluster is not None:
            self.cluster.begin_shutdown()

    async def close(self) -> None:
        if self.cluster is not None:
            await self.cluster.close()
        await asyncio.to_thread(self.registry.close_all)

    async def run_retention(self) -> None:
        interval_s = self.settings.retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            now_ms = int(time.time() * 1000)
            parts = self.cluster.replicas.values() if self.cluster else self._partitions.values()
            for part in list(parts):
                if part.closed:
                    continue
                with contextlib.suppress(ReplogError):  # e.g. a disk error; a bug ends the node
                    if isinstance(part, ReplicatedPartition):  # the core must know its start
                        deleted = await part.driver.apply_retention(now_ms)
                    else:
                        deleted = await asyncio.to_thread(part.log.apply_retention, now_ms)
                    if deleted:
                        log(_log, "retention.deleted", topic=part.topic, segments=deleted)


def write_ready_file(path: Path, address: str, metrics_address: str | None) -> None:
    lines = [address]
    if metrics_address:
        lines.append(f"metrics={metrics_address}")
    lines.append(f"pid={os.getpid()}")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


def serve(settings: Settings) -> int:
    """Run a node until SIGTERM/SIGINT; returns the process exit code."""
    logs.configure(settings.log_format, settings.log_level)
    return asyncio.run(_serve(settings))


async def _serve(settings: Settings) -> int:
    # Handlers first: a SIGTERM that arrives while the node recovers its logs, or right after
    # the ready file appears, must drain and exit 0, not kill the process mid-write.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A background task that dies of a bug stops the node too, and the exit code says so.
    supervisor = Supervisor(on_fatal=lambda _exc: stop.set())
    node = Node(settings, supervisor)
    await node.open()
    limit = settings.message_bytes_max
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.so_reuseport", 0),
            # Clients and peers send keepalive pings (every 10 s while a call is open) to
            # notice a hung node; accept them even on a quiet long poll or stream.
            ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
            ("grpc.http2.max_ping_strikes", 0),
        ]
    )
    log_pb2_grpc.add_LogServicer_to_server(LogService(node), server)  # type: ignore[no-untyped-call]
    admin_pb2_grpc.add_AdminServicer_to_server(AdminService(node), server)  # type: ignore[no-untyped-call]
    if node.cluster is not None:
        replication_pb2_grpc.add_ReplicationServicer_to_server(  # type: ignore[no-untyped-call]
            ReplicationService(node.cluster.route), server
        )
    health_servicer = health.aio.HealthServicer()  # type: ignore[attr-defined]
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    try:
        port = server.add_insecure_port(settings.listen)
    except RuntimeError as exc:
        await node.close()
        raise UnavailableError(f"cannot listen on {settings.listen}: {exc}") from None
    host = settings.listen.rpartition(":")[0]
    bound = f"{host}:{port}"
    if not settings.advertised_address:
        node.address = bound
    await server.start()
    metrics_address = None
    if settings.metrics_listen:
        try:
            metrics_address = node.metrics.serve(settings.metrics_listen)
        except OSError as exc:
            await server.stop(0)
            await node.close()
            raise UnavailableError(
                f"cannot serve metrics on {settings.metrics_listen}: {exc}"
            ) from None
    for name in ("", *SERVICE_NAMES):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    if settings.ready_file is not None:
        write_ready_file(settings.ready_file, node.address, metrics_address)
    log(
        _log,
        "server.serving",
        address=bound,
        metrics=metrics_address,
        data_dir=settings.data_dir,
        flush=settings.flush,
        node_id=settings.node_id,
        topics=len(node.registry.topics()),
    )

    supervisor.spawn(node.run_retention(), "retention")
    await stop.wait()

    if supervisor.failure is not None:
        # A bug: stop serving at once, keep what is on disk consistent if that still works,
        # and exit non-zero (Kubernetes restarts the pod; recovery trusts only the disk).
        log(_log, "server.failed", logging.CRITICAL, error=repr(supervisor.failure))
        await health_servicer.enter_graceful_shutdown()
        node.begin_shutdown()
        await server.stop(0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(_close(node, supervisor), FAILED_CLOSE_TIMEOUT_S)
        return EXIT_TASK_FAILED

    log(_log, "server.stopping", grace_ms=settings.shutdown_grace_ms)
    await health_servicer.enter_graceful_shutdown()
    node.begin_shutdown()
    await server.stop(settings.shutdown_grace_ms / 1000)
    await _close(node, supervisor)
    if supervisor.failure is not None:  # a task failed during the drain
        return EXIT_TASK_FAILED
    log(_log, "server.stopped")
    return 0


async def _close(node: Node, supervisor: Supervisor) -> None:
    await supervisor.close()  # background work ends before the logs close under it
    await node.close()
