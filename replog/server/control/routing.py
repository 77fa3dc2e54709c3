"""Where a request is served: the one place that decides it, from the metadata image.

Every RPC about a topic asks here first, then runs:

* `topic(name)`: the topic, or UNKNOWN_TOPIC; LEADER_UNKNOWN (retriable) while this node's
  metadata is behind (still replaying after a restart, or a create the metadata leader
  knows has not reached this node yet).
* `locate(topic, p)`: `Here(replica)` when this node runs a replica of the partition,
  `Elsewhere(replicas)` when it holds none (admin calls forward there; data calls answer
  NOT_LEADER with a hint), UNKNOWN_PARTITION (with `partitions`) when out of range, and
  a retriable UNAVAILABLE while a replica assigned here is not running yet (being created,
  or failing locally: the reconciler retries it).
* `leader_replica(topic, p)`: the replica, if it leads; otherwise NOT_LEADER with the
  leader's id and address, or LEADER_UNKNOWN during an election. While leadership is
  changing (a hand-over, an election, a new leader's first commit) the answer waits,
  briefly, until it has settled (`ReplicatedPartition.wait_leadership`).
* `metadata_leader()`: the node that accepts metadata commands (this one or a peer).
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from replog.errors import (
    LeaderUnknownError,
    NotLeaderError,
    PartitionNotFoundError,
    ShuttingDownError,
    UnavailableError,
)
from replog.server.meta.metadata import TopicMeta
from replog.server.meta.metadata_log import MetadataLog
from replog.server.partitions.replica_manager import ReplicaManager
from replog.server.partitions.replicated import ReplicatedPartition
from replog.server.peering.leader_directory import LeaderDirectory
from replog.server.peering.peers import Peers
from replog.storage import validate_topic_name
from replog.v1 import admin_pb2

UNKNOWN_CHECK_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class Here:
    replica: ReplicatedPartition


@dataclass(frozen=True, slots=True)
class Elsewhere:
    replicas: tuple[int, ...]  # preferred leader first


Route = Here | Elsewhere


class Router:
    def __init__(self, metadata: MetadataLog, replicas: ReplicaManager, peers: Peers) -> None:
        self.metadata = metadata
        self.replicas = replicas
        self.peers = peers
        self.node_id = peers.node_id
        self.shutting_down = False
        # every partition's leader as heard from peers (a hint: leader_news.py fills it)
        self.leaders = LeaderDirectory(metadata.image)

    # -- topics ----------------------------------------------------------------------------

    async def topic(self, name: str) -> TopicMeta:
        if self.shutting_down:
            raise ShuttingDownError("the server is shutting down")
        meta = self.metadata.image.topics.get(name)
        if meta is not None:
            return meta
        validate_topic_name(name)
        if not self.metadata.ready:
            raise LeaderUnknownError(
                f"node {self.node_id} is still catching up on the cluster metadata", topic=name
            )
        await self._check_unknown(name)
        return self.metadata.image.topic(name)  # UNKNOWN_TOPIC (or it arrived meanwhile)

    async def _check_unknown(self, name: str) -> None:
        """`name` is unknown here. If the metadata leader knows it, the create has simply not
        reached this node yet: raise LEADER_UNKNOWN (retriable) instead of UNKNOWN_TOPIC."""
        leader = self.metadata_leader()
        if leader == self.node_id:
            return  # this node's metadata is the authority
        try:
            reply = await self.peers.admin(leader).ListTopics(
                admin_pb2.ListTopicsRequest(), timeout=UNKNOWN_CHECK_TIMEOUT_S
            )
        except grpc.RpcError:
            return
        if any(t.name == name for t in reply.topics):
            raise LeaderUnknownError(
                f"topic {name!r} is still being created on node {self.node_id}", topic=name
            )

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count."""
        return {name: meta.partitions for name, meta in self.metadata.image.topics.items()}

    # -- partitions ------------------------------------------------------------------------

    async def locate(self, topic: str, partition: int) -> Route:
        meta = await self.topic(topic)
        if not 0 <= partition < meta.partitions:
            raise PartitionNotFoundError(
                f"partition {partition} does not exist (the topic has {meta.partitions})",
                partition=partition,
                partitions=meta.partitions,
            )
        replicas = meta.hosts(partition)  # a reassignment's new replicas too
        if self.node_id not in replicas:
            return Elsewhere(replicas)
        part = self.replicas.replica(meta, partition)
        if part is not None and not part.closed:
            return Here(part)
        where = f"{topic}/{partition}"
        failure = self.replicas.failure(topic, partition)
        if failure is not None:
            raise UnavailableError(
                f"the replica of {where} on node {self.node_id} failed to {failure.action} "
                f"({failure.error}); retrying",
                topic=topic,
                partition=partition,
            )
        raise LeaderUnknownError(
            f"the replica of {where} on node {self.node_id} is starting", topic=topic
        )

    async def leader_replica(self, topic: str, partition: int) -> ReplicatedPartition:
        route = await self.locate(topic, partition)
        if isinstance(route, Elsewhere):
            hint = self._heard_leader(topic, partition, route.replicas)
            raise NotLeaderError(
                f"node {self.node_id} holds no replica of {topic}/{partition}; its replicas "
                f"are {list(route.replicas)}",
                leader_id=hint,
                leader_address=self.peers.address(hint),
            )
        await route.replica.wait_leadership()
        route.replica.check_leader()
        return route.replica

    def _heard_leader(self, topic: str, partition: int, replicas: tuple[int, ...]) -> int:
        """The leader the directory has heard of, if still a replica; else the first
        replica (a hint either way: it answers NOT_LEADER with what it knows)."""
        meta = self.metadata.image.topics.get(topic)
        heard = self.leaders.leader(meta, partition) if meta is not None else None
        return heard[1] if heard is not None and heard[1] in replicas else replicas[0]

    # -- metadata --------------------------------------------------------------------------

    def metadata_leader(self) -> int:
        """The node that accepts metadata commands; LEADER_UNKNOWN during an election."""
        return self.metadata.leader()
