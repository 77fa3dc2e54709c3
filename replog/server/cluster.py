"""Cluster mode: the `__cluster` metadata partition, topic assignment, and replica lifecycles.

Membership is static (`--peers id=host:port,...`). The cluster's topics live in one more
replicated partition, `__cluster`, whose voters are the first five nodes by id; any further
nodes are its observers (they fetch and apply the log but never vote, and never count
toward its majority). Its records are JSON commands::

    {"op": "create_topic", "name": "orders", "partitions": 3, "assignment": [[1,2,3], ...]}
    {"op": "delete_topic", "name": "orders"}

Every node applies them in offset order once they are committed (below the `__cluster`
HW), creating or removing the replicas assigned to it; on restart it replays the log, so
the cluster's topics are a pure function of the committed metadata log. Admin calls go to
the `__cluster` leader; another node (voter or observer) forwards them. The leader decides
the assignment: partition p gets `rf` consecutive nodes starting at `(p + seed) % n` (even
spread over all nodes, observers of `__cluster` included; the first replica is the
preferred leader).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from replog import frames
from replog.errors import (
    InvalidArgumentError,
    LeaderUnknownError,
    NotLeaderError,
    PartitionNotFoundError,
    ReplogError,
    TopicExistsError,
    TopicNotFoundError,
)
from replog.replication import Acks, Message, ReplicaConfig, Role
from replog.replication.driver import ReplicaDriver
from replog.server.replicated import ReplicatedPartition
from replog.server.replication_transport import PeerLinks
from replog.storage import FlushPolicy, PartitionLog, validate_topic_name
from replog.storage.names import PARTITIONS_MAX
from replog.v1 import admin_pb2, admin_pb2_grpc

if TYPE_CHECKING:
    from replog.server.node import Node

_log = logging.getLogger("replog.cluster")

METADATA_TOPIC = "__cluster"
METADATA_VOTERS_MAX = 5
FORWARDED = "x-replog-forwarded"


@dataclass(frozen=True, slots=True)
class TopicMeta:
    name: str
    partitions: int
    assignment: tuple[tuple[int, ...], ...]


def assign(
    name: str, partitions: int, replication_factor: int, nodes: list[int]
) -> list[list[int]]:
    """Spread replicas evenly: partition p starts at node (p + crc32(name)) % n."""
    ordered = sorted(nodes)
    n = len(ordered)
    seed = zlib.crc32(name.encode())
    return [
        [ordered[(p + seed + k) % n] for k in range(replication_factor)] for p in range(partitions)
    ]


class Cluster:
    def __init__(self, node: Node, peers: dict[int, str]) -> None:
        settings = node.settings
        self.node = node
        self.node_id = node.node_id
        self.peers = peers
        self.links = PeerLinks(self.node_id, peers)
        self.topics: dict[str, TopicMeta] = {}
        self.replicas: dict[tuple[str, int], ReplicatedPartition] = {}
        self._applied = 0  # next metadata offset to apply
        self._applied_changed = asyncio.Event()
        self._apply_wanted = asyncio.Event()
        self._admin_lock = asyncio.Lock()
        self._apply_task: asyncio.Task[None] | None = None
        self._channels: dict[str, grpc.aio.Channel] = {}
        members = tuple(sorted(peers))
        voters, observers = members[:METADATA_VOTERS_MAX], members[METADATA_VOTERS_MAX:]
        self.meta_log = PartitionLog(
            settings.data_dir / METADATA_TOPIC / "partition_0",
            METADATA_TOPIC,
            0,
            settings.storage_config(),
        )
        self.meta = ReplicaDriver(
            self.meta_log,
            self.replica_config(voters, observers),
            self.links.transport(METADATA_TOPIC, 0),
            fetch_bytes_max=settings.fetch_bytes_max,
            on_high_watermark=lambda _hw: self._apply_wanted.set(),
        )

    def drivers(self) -> list[tuple[str, int, ReplicaDriver]]:
        """Every replica this node hosts, the metadata partition included (for metrics)."""
        out = [(t, p, part.driver) for (t, p), part in list(self.replicas.items())]
        out.append((METADATA_TOPIC, 0, self.meta))
        return out

    def replica_config(
        self, voters: tuple[int, ...], observers: tuple[int, ...] = ()
    ) -> ReplicaConfig:
        s = self.node.settings
        return ReplicaConfig(
            self.node_id,
            voters,
            observers,
            election_timeout_ms_min=s.election_timeout_ms,
            election_timeout_ms_max=2 * s.election_timeout_ms,
            fetch_wait_ms_max=s.replica_fetch_wait_ms,
            fetch_retry_ms=min(s.election_timeout_ms - 1, s.replica_fetch_wait_ms * 2),
            begin_epoch_retry_ms=max(10, s.election_timeout_ms // 5),
            flush_always=s.flush == FlushPolicy.ALWAYS.value,
        )

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        self.links.start()
        await self.meta.start()
        self._apply_wanted.set()  # replay what is already committed
        self._apply_task = asyncio.create_task(self._apply_loop(), name="cluster-apply")

    async def close(self) -> None:
        if self._apply_task is not None:
            self._apply_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._apply_task
        for part in list(self.replicas.values()):
            await part.stop()
        await self.meta.close()
        await self.links.close()
        for channel in self._channels.values():
            await channel.close(None)
        await asyncio.to_thread(self.meta_log.close)

    def begin_shutdown(self) -> None:
        for part in self.replicas.values():
            part.close()

    def route(self, topic: str, partition: int) -> Callable[[Message], Awaitable[None]] | None:
        """The replica an incoming replication message is for (None: not hosted here)."""
        if topic == METADATA_TOPIC:
            return self.meta.deliver
        part = self.replicas.get((topic, partition))
        return part.driver.deliver if part is not None else None

    # -- applying the metadata log ---------------------------------------------------------

    async def _apply_loop(self) -> None:
        while True:
            await self._apply_wanted.wait()
            self._apply_wanted.clear()
            try:
                await self._apply_committed()
            except Exception:
                _log.exception("applying cluster metadata failed; retrying")
                await asyncio.sleep(0.5)
                self._apply_wanted.set()

    async def _apply_committed(self) -> None:
        while self._applied < self.meta_log.high_watermark:
            data = await asyncio.to_thread(self.meta_log.read, self._applied, 1 << 20)
            decoded = frames.decode(data)
            control = decoded.control or [False] * len(decoded)
            for offset, value, is_control in zip(
                decoded.offsets, decoded.values, control, strict=True
            ):
                if not is_control:
                    await self._apply(json.loads(value))
                self._applied = offset + 1
            old, self._applied_changed = self._applied_changed, asyncio.Event()
            old.set()

    async def _apply(self, command: dict[str, Any]) -> None:
        op = command.get("op")
        if op == "create_topic":
            meta = TopicMeta(
                command["name"],
                int(command["partitions"]),
                tuple(tuple(int(r) for r in reps) for reps in command["assignment"]),
            )
            self.topics[meta.name] = meta
            hosted = [p for p, reps in enumerate(meta.assignment) if self.node_id in reps]
            if not hosted:
                return
            registry = self.node.registry
            if meta.name not in registry.topics():
                await asyncio.to_thread(registry.create_topic, meta.name, meta.partitions)
            for p in hosted:
                await self._start_replica(meta, p)
        elif op == "delete_topic":
            name = command["name"]
            self.topics.pop(name, None)
            for key in [k for k in self.replicas if k[0] == name]:
                await self.replicas.pop(key).stop()
            if name in self.node.registry.topics():
                await asyncio.to_thread(self.node.registry.delete_topic, name)
        else:
            _log.warning("unknown cluster metadata command %r: skipped", op)

    async def _start_replica(self, meta: TopicMeta, p: int) -> None:
        key = (meta.name, p)
        if key in self.replicas:
            return
        plog = await asyncio.to_thread(self.node.registry.get, meta.name, p)
        part = ReplicatedPartition(
            plog,
            self.node_id,
            self.replica_config(meta.assignment[p]),
            self.links.transport(meta.name, p),
            self.peers,
            fetch_bytes_max=self.node.settings.fetch_bytes_max,
        )
        self.replicas[key] = part
        await part.start()

    async def wait_applied(self, offset: int, timeout_s: float) -> None:
        """Wait until metadata offset `offset` is applied on this node."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._applied <= offset:
            event = self._applied_changed
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise LeaderUnknownError("the cluster metadata did not apply in time")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)

    # -- lookups ---------------------------------------------------------------------------

    @property
    def metadata_ready(self) -> bool:
        """Whether everything in this node's metadata log is committed and applied (a node
        that just restarted may hold commands it cannot apply until the leader says)."""
        return self._applied >= self.meta_log.log_end_offset

    def topic(self, name: str) -> TopicMeta:
        meta = self.topics.get(name)
        if meta is None:
            validate_topic_name(name)
            if not self.metadata_ready:
                raise LeaderUnknownError(
                    f"node {self.node_id} is still catching up on the cluster metadata",
                    topic=name,
                )
            raise TopicNotFoundError(f"topic {name!r} does not exist", topic=name)
        return meta

    def partition(self, topic: str, partition: int) -> ReplicatedPartition:
        meta = self.topic(topic)
        if not 0 <= partition < meta.partitions:
            raise PartitionNotFoundError(
                f"partition {partition} does not exist (the topic has {meta.partitions})",
                partition=partition,
            )
        part = self.replicas.get((topic, partition))
        if part is not None:
            return part
        replicas = meta.assignment[partition]
        hint = replicas[0]
        raise NotLeaderError(
            f"node {self.node_id} holds no replica of {topic}/{partition}; its replicas are "
            f"{list(replicas)}",
            leader_id=hint,
            leader_address=self.peers.get(hint),
        )

    async def check_unknown(self, name: str) -> None:
        """`name` is unknown here. If the metadata leader knows it, the create has simply not
        reached this node yet: raise LEADER_UNKNOWN (retriable) instead of UNKNOWN_TOPIC."""
        leader = self._meta_leader()  # LEADER_UNKNOWN (retriable) during an election
        if leader == self.node_id:
            return  # this node's metadata is the authority
        stub = await self._forward(leader)
        try:
            reply = await stub.ListTopics(admin_pb2.ListTopicsRequest(), timeout=2.0)
        except grpc.RpcError:
            return
        if any(t.name == name for t in reply.topics):
            raise LeaderUnknownError(
                f"topic {name!r} is still being created on node {self.node_id}", topic=name
            )

    def nodes(self) -> list[tuple[int, str]]:
        return sorted(self.peers.items())

    # -- admin (on the __cluster leader; others forward) -------------------------------------

    def _meta_leader(self) -> int:
        """The `__cluster` leader this node knows of (an observer knows it too, from the
        BeginEpoch or the fetch answers of the leader); LEADER_UNKNOWN when none."""
        if self.meta.role is Role.LEADER:
            return self.node_id
        leader = self.meta.leader_id
        if leader is None or leader == self.node_id:
            raise LeaderUnknownError("the cluster metadata has no leader right now")
        return leader

    async def _forward(self, leader: int) -> Any:
        address = self.peers[leader]
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = grpc.aio.insecure_channel(address)
        return admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]

    async def create_topic(self, name: str, partitions: int, replication_factor: int) -> None:
        validate_topic_name(name)
        if name == METADATA_TOPIC:
            raise InvalidArgumentError(f"{METADATA_TOPIC} is reserved")
        if not 1 <= partitions <= PARTITIONS_MAX:
            raise InvalidArgumentError(f"partitions must be in [1, {PARTITIONS_MAX}]")
        nodes = len(self.peers)
        rf = replication_factor or min(self.node.settings.default_replication_factor, nodes)
        if rf > nodes:
            raise InvalidArgumentError(
                f"replication_factor {rf} exceeds the {nodes} node(s) of the cluster",
                replication_factor=rf,
            )
        leader = self._meta_leader()
        if leader != self.node_id:
            stub = await self._forward(leader)
            await _remote(
                stub.CreateTopic(
                    admin_pb2.CreateTopicRequest(
                        name=name, partitions=partitions, replication_factor=rf
                    ),
                    timeout=self._timeout_s(),
                )
            )
            return
        async with self._admin_lock:
            if name in self.topics:
                raise TopicExistsError(f"topic {name!r} already exists", topic=name)
            command = {
                "op": "create_topic",
                "name": name,
                "partitions": partitions,
                "assignment": assign(name, partitions, rf, list(self.peers)),
            }
            await self._commit(command)

    async def delete_topic(self, name: str) -> None:
        self.topic(name)
        leader = self._meta_leader()
        if leader != self.node_id:
            stub = await self._forward(leader)
            await _remote(
                stub.DeleteTopic(admin_pb2.DeleteTopicRequest(name=name), timeout=self._timeout_s())
            )
            return
        async with self._admin_lock:
            self.topic(name)
            await self._commit({"op": "delete_topic", "name": name})

    def _timeout_s(self) -> float:
        return self.node.settings.ack_timeout_ms / 1000

    async def _commit(self, command: dict[str, Any]) -> None:
        value = json.dumps(command, sort_keys=True).encode()
        _, last = await self.meta.append([value], Acks.ALL, self._timeout_s())
        await self.wait_applied(last, self._timeout_s())


async def _remote(call: Awaitable[Any]) -> Any:
    """Await a forwarded call, turning its failure back into the typed error."""
    from replog.rpc_errors import from_rpc_error

    try:
        return await call
    except grpc.RpcError as exc:
        err: ReplogError = from_rpc_error(exc)
        raise err from None
