"""The `replog.v1.Admin` service: topics, offsets, and metadata for routing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from replog.errors import InvalidArgumentError
from replog.server.rpc import Context, unary
from replog.v1 import admin_pb2, admin_pb2_grpc

if TYPE_CHECKING:
    from replog.server.node import Node

NO_LEADER = -1


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
        await self.node.create_topic(request.name, request.partitions)
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
        topics = self.node.registry.topics()
        return admin_pb2.ListTopicsResponse(
            topics=[admin_pb2.TopicSummary(name=n, partitions=c) for n, c in sorted(topics.items())]
        )

    @unary("DescribeTopic")
    async def DescribeTopic(
        self, request: admin_pb2.DescribeTopicRequest, context: Context
    ) -> admin_pb2.TopicDescription:
        count = self.node.registry.partition_count(request.name)
        out = admin_pb2.TopicDescription(name=request.name)
        for p in range(count):
            part = await self.node.partition_async(request.name, p)
            leader = part.leader
            plog = part.log
            out.partitions.append(
                admin_pb2.PartitionDescription(
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
        topics = self.node.registry.topics()
        names = list(request.topics) or sorted(topics)
        out = admin_pb2.Metadata(
            node_id=self.node.node_id,
            nodes=[admin_pb2.Node(id=i, address=a) for i, a in self.node.nodes()],
        )
        for name in names:
            count = self.node.registry.partition_count(name)  # UNKNOWN_TOPIC if absent
            tmeta = out.topics.add(name=name)
            for p in range(count):
                leader = (await self.node.partition_async(name, p)).leader
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
        count = self.node.registry.partition_count(request.topic)
        wanted = list(request.partitions) or list(range(count))
        out = admin_pb2.ListOffsetsResponse()
        for p in wanted:
            plog = (await self.node.partition_async(request.topic, p)).log
            out.partitions.append(
                admin_pb2.PartitionOffsets(
                    partition=p,
                    earliest=plog.log_start_offset,
                    latest=plog.high_watermark,
                    log_end_offset=plog.log_end_offset,
                )
            )
        return out
