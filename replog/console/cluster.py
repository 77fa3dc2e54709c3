"""The cluster as the console shows it: every node's health and metadata, merged.

A node answers `GetMetadata` with the leader of each partition it hosts (a partition it
does not host comes back without a leader), so one node's answer is not the cluster's
view when the replication factor is below the node count. `Prober.snapshot` therefore asks
the client's metadata for the node list, then every node, in parallel and with a short
deadline, for two things: `grpc.health.v1` `Check("replog.ready")` (SERVING: every
replica on the node has caught up; NOT_SERVING: catching up or shutting down; no answer:
down) and `GetMetadata` of every topic. `merge` keeps, per partition, the leader named
with the highest epoch. A partition is under-replicated when one of its replicas is on a
node that is down or not ready, and offline when no node names a leader.

The per-node channels use the client's TLS settings and token and reconnect quickly (a
restarted node shows up as ready within about a second of being so).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from replog.client import Client, ClientTls
from replog.client.formats import format_of
from replog.tls import channel
from replog.v1 import admin_pb2, admin_pb2_grpc

READY = "ready"
NOT_READY = "not ready"
DOWN = "down"
READINESS_SERVICE = "replog.ready"
NO_LEADER = -1  # GetMetadata's leader_id when the answering node knows none (ids start at 0)
PROBE_TIMEOUT_S = 2.0
PROBE_THREADS_MAX = 8
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),  # metadata of many topics
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


@dataclass(frozen=True, slots=True)
class NodeStatus:
    node_id: int
    address: str
    state: str  # READY | NOT_READY | DOWN
    detail: str  # why, for a node that is not ready or down
    leads: int = 0  # partitions this node leads (merged view)
    replicas: int = 0  # partitions with a replica on this node


@dataclass(frozen=True, slots=True)
class PartitionView:
    topic: str
    partition: int
    leader_id: int | None
    replicas: tuple[int, ...]
    epoch: int
    missing: tuple[int, ...]  # replicas on nodes that are down or not ready


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    format: str
    partitions: tuple[PartitionView, ...]

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def leaders(self) -> tuple[int, ...]:
        return tuple(sorted({p.leader_id for p in self.partitions if p.leader_id is not None}))

    @property
    def offline(self) -> int:
        return sum(p.leader_id is None for p in self.partitions)

    @property
    def under_replicated(self) -> int:
        return sum(bool(p.missing) for p in self.partitions)

    @property
    def internal(self) -> bool:
        return self.name.startswith("__")


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[NodeStatus, ...]
    topics: tuple[TopicView, ...]  # sorted by name
    asked_node_id: int  # the node whose metadata named the nodes
    taken_at: float = field(default_factory=time.time)  # seconds since the epoch

    @property
    def partitions(self) -> Iterable[PartitionView]:
        for t in self.topics:
            yield from t.partitions

    @property
    def under_replicated(self) -> list[PartitionView]:
        return [p for p in self.partitions if p.missing]

    @property
    def offline(self) -> list[PartitionView]:
        return [p for p in self.partitions if p.leader_id is None]

    def topic(self, name: str) -> TopicView | None:
        for t in self.topics:
            if t.name == name:
                return t
        return None


def merge(
    nodes: list[tuple[int, str, str, str]], answers: Iterable[admin_pb2.Metadata]
) -> tuple[tuple[NodeStatus, ...], tuple[TopicView, ...]]:
    """Merge nodes' metadata answers: `nodes` is (id, address, state, detail) per node;
    each partition's leader is the one named with the highest epoch."""
    best: dict[tuple[str, int], tuple[int, int, tuple[int, ...]]] = {}  # epoch, leader, replicas
    formats: dict[str, str] = {}
    counts: dict[str, int] = {}
    for meta in answers:
        for t in meta.topics:
            formats[t.name] = format_of(t.format)
            counts[t.name] = max(counts.get(t.name, 0), len(t.partitions))
            for p in t.partitions:
                key = (t.name, p.partition)
                leader = p.leader_id if p.leader_id >= 0 else NO_LEADER
                seen = best.get(key)
                candidate = (p.epoch if leader >= 0 else -1, leader, tuple(p.replicas))
                if seen is None or candidate[:2] > seen[:2]:
                    best[key] = candidate
    unhealthy = {node_id for node_id, _a, state, _d in nodes if state != READY}
    leads: dict[int, int] = {}
    hosts: dict[int, int] = {}
    topics = []
    for name in sorted(formats):
        parts = []
        for partition in range(counts[name]):
            epoch, leader, replicas = best.get((name, partition), (-1, NO_LEADER, ()))
            for r in replicas:
                hosts[r] = hosts.get(r, 0) + 1
            if leader >= 0:
                leads[leader] = leads.get(leader, 0) + 1
            parts.append(
                PartitionView(
                    name,
                    partition,
                    leader if leader >= 0 else None,
                    replicas,
                    max(epoch, 0),
                    tuple(r for r in replicas if r in unhealthy),
                )
            )
        topics.append(TopicView(name, formats[name], tuple(parts)))
    statuses = tuple(
        NodeStatus(i, a, s, d, leads.get(i, 0), hosts.get(i, 0)) for i, a, s, d in sorted(nodes)
    )
    return statuses, tuple(topics)


class Prober:
    """Asks every node of the cluster for its health and metadata (see the module doc)."""

    def __init__(self, tls: ClientTls | None, token: str | None) -> None:
        self.tls = tls
        self.token = token
        self._lock = threading.Lock()
        self._channels: dict[str, Any] = {}
        self._pool = ThreadPoolExecutor(PROBE_THREADS_MAX, thread_name_prefix="console-probe")

    def _channel(self, address: str) -> Any:
        with self._lock:
            ch = self._channels.get(address)
            if ch is None:
                ch = self._channels[address] = channel(
                    address, self.tls, CHANNEL_OPTIONS, self.token
                )
            return ch

    def probe(self, address: str) -> tuple[str, str, admin_pb2.Metadata | None]:
        """(state, detail, metadata or None) of the node at `address`."""
        ch = self._channel(address)
        health = health_pb2_grpc.HealthStub(ch)
        admin = admin_pb2_grpc.AdminStub(ch)  # type: ignore[no-untyped-call]
        try:
            reply = health.Check(
                health_pb2.HealthCheckRequest(service=READINESS_SERVICE), timeout=PROBE_TIMEOUT_S
            )
        except grpc.RpcError as exc:
            return DOWN, _rpc_detail(exc), None
        state = READY if reply.status == health_pb2.HealthCheckResponse.SERVING else NOT_READY
        detail = "" if state == READY else "catching up with its leaders, or shutting down"
        try:
            meta = admin.GetMetadata(admin_pb2.GetMetadataRequest(), timeout=PROBE_TIMEOUT_S)
        except grpc.RpcError as exc:
            return state, detail or f"metadata: {_rpc_detail(exc)}", None
        return state, detail, meta

    def snapshot(self, client: Client) -> Snapshot:
        """The merged view of the cluster now (one metadata call through the client, then
        one probe per node in parallel)."""
        known = client.refresh_metadata()
        nodes = [(n.id, n.address) for n in known.nodes]
        results = list(self._pool.map(lambda n: self.probe(n[1]), nodes))
        rows = [
            (i, a, state, detail)
            for (i, a), (state, detail, _m) in zip(nodes, results, strict=True)
        ]
        answers = [m for _s, _d, m in results if m is not None] or [known]
        statuses, topics = merge(rows, answers)
        return Snapshot(statuses, topics, int(known.node_id))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for ch in self._channels.values():
                ch.close()
            self._channels.clear()


def _rpc_detail(exc: grpc.RpcError) -> str:
    code = exc.code() if hasattr(exc, "code") else None
    name = code.name if code is not None else "ERROR"
    details = exc.details() if hasattr(exc, "details") else ""
    return f"{name}: {(details or '')[:200]}".rstrip(": ")
