"""The `replog.v1.Admin` service: topics, offsets, and metadata for routing."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from replog.errors import InvalidArgumentError, LeaderUnknownError, NotLeaderError, ReplogError
from replog.server.cluster import FORWARDED, _remote
from replog.server.partition import Partition
from replog.server.replicated import ReplicatedPartition
from replog.server.rpc import Context, unary
from replog.v1 import admin_pb2, admin_pb2_grpc

if TYPE_CHECKING:
    from replog.server.node import Node

NO_LEADER = -1
REMOTE_TIMEOUT_S = 10.0
FORWARD = ((FORWARDED, "1"),)


def _forwarded(context: Context) -> bool:
    """Whether another node forwarded this call (it must not be forwarded again)."""
    return any(key == FORWARDED for key, _ in (context.invocation_metadata() or ()))


class AdminService(admin_pb2_grpc.AdminServicer):
    def __init__(self, node: Node) -> None:
        self.node = node
        self.metrics = node.metrics

    @unary("CreateTopic")
    async def CreateTopic(
        self, request: admin_pb2.CreateTopicRequest, context: Context
    ) -> admin_pb2.CreateTopicResponse:
        if request.replication_factor > len(self.node.nodes()):
            raise InvalidArgumentError(
                f"replication_factor {request.replication_factor} exceeds the "
                f"{len(self.node.nodes())} node(s) of the cluster",
                replication_factor=request.replication_factor,
            )
        await self.node.create_topic(request.name, request.partitions, request.replication_factor)
        return admin_pb2.CreateTopicResponse()

    @unary("DeleteTopic")
    async def DeleteTopic(
        self, request: admin_pb2.DeleteTopicRequest, context: Context
    ) -> admin_pb2.DeleteTopicResponse:
        await self.node.delete_topic(request.name)
        return admin_pb2.DeleteTopicResponse()

    @unary("ListTopics")
    async def ListTopics(
        self, request: admin_pb2.ListTopicsRequest, context: Context
    ) -> admin_pb2.ListTopicsResponse:
        topics = self.node.topics()
        return admin_pb2.ListTopicsResponse(
            topics=[admin_pb2.TopicSummary(name=n, partitions=c) for n, c in sorted(topics.items())]
        )

    async def _local(self, topic: str, p: int) -> Partition | None:
        """This node's replica of `topic/p`, or None when it holds none (cluster mode)."""
        try:
            return await self.node.partition_async(topic, p)
        except NotLeaderError:
            if self.node.cluster is None:
                raise
            return None

    async def _peer(self, topic: str, p: int) -> Any:
        """An Admin stub of a node that holds a replica of `topic/p`."""
        assert self.node.cluster is not None
        replica = self.node.replicas_of(topic, p)[0]
        return await self.node.cluster._forward(replica)

    @unary("DescribeTopic")
    async def DescribeTopic(
        self, request: admin_pb2.DescribeTopicRequest, context: Context
    ) -> admin_pb2.TopicDescription:
        count = await self.node.partition_count(request.name)
        out = admin_pb2.TopicDescription(name=request.name)
        remote: dict[int, admin_pb2.PartitionDescription] = {}
        forwarded = _forwarded(context)
        for p in range(count):
            part = await self._local(request.name, p)
            if part is None:
                if forwarded:
                    continue  # a forwarded call answers for its own replicas only
                if p not in remote:
                    stub = await self._peer(request.name, p)
                    desc = await _remote(
                        stub.DescribeTopic(request, timeout=REMOTE_TIMEOUT_S, metadata=FORWARD)
                    )
                    for d in desc.partitions:
                        remote.setdefault(d.partition, d)
                if p in remote:
                    out.partitions.append(remote[p])
                continue
            if isinstance(part, ReplicatedPartition) and not part.is_leader and not forwarded:
                leader_id = part.leader.leader_id
                if leader_id is not None and leader_id != self.node.node_id:
                    # The leader's answer carries every replica's progress.
                    stub = await self.node.cluster._forward(leader_id)  # type: ignore[union-attr]
                    with contextlib.suppress(ReplogError):
                        desc = await _remote(
                            stub.DescribeTopic(request, timeout=REMOTE_TIMEOUT_S, metadata=FORWARD)
                        )
                        found = [d for d in desc.partitions if d.partition == p]
                        if found:
                            out.partitions.append(found[0])
                            continue
            leader = part.leader
            plog = part.log
            status = part.driver.replica_status() if isinstance(part, ReplicatedPartition) else []
            out.partitions.append(
                admin_pb2.PartitionDescription(
                    replica_status=[
                        admin_pb2.ReplicaStatus(
                            replica_id=r, log_end_offset=leo, lag_records=lag, last_fetch_ms_ago=age
                        )
                        for r, leo, lag, age in status
                    ],
                    partition=p,
                    replicas=leader.replicas,
                    leader_id=NO_LEADER if leader.leader_id is None else leader.leader_id,
                    log_start_offset=plog.log_start_offset,
                    log_end_offset=plog.log_end_offset,
                    high_watermark=plog.high_watermark,
                    size_bytes=plog.size_bytes,
                    segment_count=plog.segment_count,
                    epoch=leader.epoch,
                )
            )
        return out

    @unary("GetMetadata")
    async def GetMetadata(
        self, request: admin_pb2.GetMetadataRequest, context: Context
    ) -> admin_pb2.Metadata:
        topics = self.node.topics()
        names = list(request.topics) or sorted(topics)
        out = admin_pb2.Metadata(
            node_id=self.node.node_id,
            nodes=[admin_pb2.Node(id=i, address=a) for i, a in self.node.nodes()],
        )
        for name in names:
            count = await self.node.partition_count(name)  # UNKNOWN_TOPIC if absent
            tmeta = out.topics.add(name=name)
            for p in range(count):
                part = await self._local(name, p)
                if part is None:  # not a replica here: the replicas know the leader
                    tmeta.partitions.append(
                        admin_pb2.PartitionMetadata(
                            partition=p,
                            leader_id=NO_LEADER,
                            replicas=self.node.replicas_of(name, p),
                        )
                    )
                    continue
                leader = part.leader
                tmeta.partitions.append(
                    admin_pb2.PartitionMetadata(
                        partition=p,
                        leader_id=NO_LEADER if leader.leader_id is None else leader.leader_id,
                        replicas=leader.replicas,
                        epoch=leader.epoch,
                    )
                )
        return out

    @unary("ListOffsets")
    async def ListOffsets(
        self, request: admin_pb2.ListOffsetsRequest, context: Context
    ) -> admin_pb2.ListOffsetsResponse:
        count = await self.node.partition_count(request.topic)
        wanted = list(request.partitions) or list(range(count))
        out = admin_pb2.ListOffsetsResponse()
        for p in wanted:
            part = await self._local(request.topic, p)
            if isinstance(part, ReplicatedPartition) and not part.is_leader:
                # "latest" is the leader's HW: a follower's may lag behind records already
                # acknowledged with acks=all, so a follower never answers with its own.
                leader_id = part.leader.leader_id
                if _forwarded(context) or leader_id in (None, self.node.node_id):
                    raise LeaderUnknownError(
                        f"{request.topic}/{p}: this replica does not lead it and knows no "
                        "leader; retry",
                        topic=request.topic,
                        partition=p,
                    )
                assert self.node.cluster is not None and leader_id is not None
                stub = await self.node.cluster._forward(leader_id)
                sub = admin_pb2.ListOffsetsRequest(topic=request.topic, partitions=[p])
                reply = await _remote(
                    stub.ListOffsets(sub, timeout=REMOTE_TIMEOUT_S, metadata=FORWARD)
                )
                out.partitions.extend(reply.partitions)
                continue
            if part is None:
                if _forwarded(context):
                    raise NotLeaderError(f"no replica of {request.topic}/{p} here")
                stub = await self._peer(request.topic, p)
                sub = admin_pb2.ListOffsetsRequest(topic=request.topic, partitions=[p])
                reply = await _remote(
                    stub.ListOffsets(sub, timeout=REMOTE_TIMEOUT_S, metadata=FORWARD)
                )
                out.partitions.extend(reply.partitions)
                continue
            plog = part.log
            out.partitions.append(
                admin_pb2.PartitionOffsets(
                    partition=p,
                    earliest=plog.log_start_offset,
                    latest=plog.high_watermark,
                    log_end_offset=plog.log_end_offset,
                )
            )
        return out
