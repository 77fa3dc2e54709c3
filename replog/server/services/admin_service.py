"""The `replog.v1.Admin` service: topics, offsets, and metadata for routing.

Each call asks the router where the partition is served: a replica here answers; a
partition with no replica here is forwarded to one that has (a forwarded call carries
`x-replog-forwarded` and answers for its own replicas only). Describe and ListOffsets of a
follower are forwarded to the leader, whose view of every replica's progress and of the HW
is the authoritative one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from replog.errors import (
    InvalidArgumentError,
    LeaderUnknownError,
    LogClosedError,
    MembershipChangeRefusedError,
    NodeRemovedError,
    NotLeaderError,
    PartitionNotFoundError,
    PermissionDeniedError,
    ReplogError,
    UnavailableError,
)
from replog.replication import Role
from replog.replication.driver import ReplicaDriver
from replog.server.cluster.membership import Members
from replog.server.cluster.reassignment import Progress, describe
from replog.server.control.answers import MetadataAnswers
from replog.server.control.routing import Here, Router
from replog.server.control.topics import (
    WIRE_FORMATS,
    WIRE_TIMESTAMP_TYPES,
    Topics,
    format_from_wire,
)
from replog.server.edge.rpc import Context, unary
from replog.server.meta.metadata import METADATA_TOPIC, TopicMeta
from replog.server.metrics import Metrics
from replog.server.partitions.handover import pick_target, wait_until
from replog.server.partitions.replicated import ReplicatedPartition
from replog.server.peering.peers import FORWARD_METADATA, FORWARDED, Peers, remote
from replog.v1 import admin_pb2, admin_pb2_grpc

NO_LEADER = -1
REMOTE_TIMEOUT_S = 10.0
FORWARD = FORWARD_METADATA


def _one_partition(request: admin_pb2.ListOffsetsRequest, p: int) -> admin_pb2.ListOffsetsRequest:
    """The part of a ListOffsets about partition `p` (to forward to its leader)."""
    sub = admin_pb2.ListOffsetsRequest(topic=request.topic, partitions=[p])
    if request.HasField("timestamp_ms"):
        sub.timestamp_ms = request.timestamp_ms
    return sub


@dataclass(slots=True)
class _Asked:
    """One DescribeTopic call: the request, whether it was forwarded here, and the answers
    of the nodes asked so far (each node is asked once per call)."""

    request: admin_pb2.DescribeTopicRequest
    forwarded: bool
    by_node: dict[int, dict[int, admin_pb2.PartitionDescription]] = field(default_factory=dict)


def _forwarded(context: Context) -> bool:
    """Whether another node forwarded this call (it must not be forwarded again)."""
    return any(key == FORWARDED for key, _ in (context.invocation_metadata() or ()))


class AdminService(admin_pb2_grpc.AdminServicer):
    def __init__(
        self,
        router: Router,
        topics: Topics,
        peers: Peers,
        metrics: Metrics,
        reassignments: Mapping[tuple[str, int], Progress] | None = None,
        member: Callable[[Context], int | None] | None = None,
        members: Members | None = None,
        nodes: Callable[[], list[admin_pb2.Node]] = list,
    ) -> None:
        """`reassignments`: the reassignment controller's progress of the partitions this
        node leads (`Reassigner.progress`), shown in DescribeTopic. `member`: the node id a
        call's TLS certificate proves (None: TLS is off, nothing is proven)."""
        self.reassignments = reassignments if reassignments is not None else {}
        self.member = member
        self.router = router
        self.topics = topics
        self.peers = peers
        self.metrics = metrics
        self.node_id = peers.node_id
        self.members = members  # AddNode / RemoveNode (None: refused, e.g. in unit tests)
        self.nodes = nodes  # the members, with their racks as known here (GetMetadata)
        self.answers = MetadataAnswers(
            router.metadata.image, router.replicas, self.node_id, router.leaders
        )  # GetMetadata, ListTopics: cached per change

    @unary("CreateTopic")
    async def CreateTopic(
        self, request: admin_pb2.CreateTopicRequest, context: Context
    ) -> admin_pb2.CreateTopicResponse:
        fmt, timestamp_type = format_from_wire(request)
        await self.topics.create(
            request.name,
            request.partitions,
            request.replication_factor,
            format=fmt,
            timestamp_type=timestamp_type,
            configs=dict(request.configs),
        )
        return admin_pb2.CreateTopicResponse()

    @unary("DescribeConfigs")
    async def DescribeConfigs(
        self, request: admin_pb2.DescribeConfigsRequest, context: Context
    ) -> admin_pb2.DescribeConfigsResponse:
        found = await self.topics.describe_configs(request.topic)
        entries = [
            admin_pb2.ConfigEntry(name=c.name, value=c.value, source=c.source) for c in found
        ]
        return admin_pb2.DescribeConfigsResponse(configs=entries)

    @unary("AlterConfigs")
    async def AlterConfigs(
        self, request: admin_pb2.AlterConfigsRequest, context: Context
    ) -> admin_pb2.AlterConfigsResponse:
        await self.topics.alter_configs(request.topic, dict(request.set), list(request.delete))
        return admin_pb2.AlterConfigsResponse()

    @unary("DeleteTopic")
    async def DeleteTopic(
        self, request: admin_pb2.DeleteTopicRequest, context: Context
    ) -> admin_pb2.DeleteTopicResponse:
        await self.topics.delete(request.name)
        return admin_pb2.DeleteTopicResponse()

    @unary("ListTopics")
    async def ListTopics(
        self, request: admin_pb2.ListTopicsRequest, context: Context
    ) -> admin_pb2.ListTopicsResponse:
        return self.answers.list_topics()  # (built again only after a topic changed)

    async def _local(self, topic: str, p: int) -> ReplicatedPartition | None:
        """This node's replica of `topic/p`, or None when it holds none."""
        route = await self.router.locate(topic, p)
        return route.replica if isinstance(route, Here) else None

    async def _peer(self, topic: str, p: int) -> Any:
        """An Admin stub of a node that holds a replica of `topic/p`."""
        meta = await self.router.topic(topic)
        return self.peers.admin(meta.assignment[p][0])

    @unary("DescribeTopic")
    async def DescribeTopic(
        self, request: admin_pb2.DescribeTopicRequest, context: Context
    ) -> admin_pb2.TopicDescription:
        meta = await self.router.topic(request.name)
        out = admin_pb2.TopicDescription(
            name=request.name,
            format=WIRE_FORMATS[meta.format],
            timestamp_type=WIRE_TIMESTAMP_TYPES[meta.timestamp_type],
            partition_count=meta.partitions,
            configs=meta.configs,
        )
        asked = _Asked(request, _forwarded(context))
        first = min(request.first_partition, meta.partitions)  # (paging: docs/api.md)
        end = meta.partitions if not request.partitions_max else first + request.partitions_max
        for p in range(first, min(end, meta.partitions)):
            desc = await self._describe_partition(asked, meta, p)
            if desc is not None:
                out.partitions.append(desc)
        return out

    async def _describe_partition(
        self, asked: _Asked, meta: TopicMeta, p: int
    ) -> admin_pb2.PartitionDescription | None:
        """Partition `p` as described here, or by the node that knows it best (its leader);
        None: a forwarded call about a partition with no replica here."""
        try:
            part = await self._local(meta.name, p)
        except UnavailableError:  # its replica here is starting, or failing (retried)
            return self._not_started(meta, p)
        if part is None:
            if asked.forwarded:
                return None  # a forwarded call answers for its own replicas only
            found = (await self._described_by(asked, meta.assignment[p][0])).get(p)
            # None: that node has not applied the partition yet (a topic just grown or
            # created): listed as this node's metadata has it, with no leader yet.
            return found if found is not None else self._not_started(meta, p)
        if not part.is_leader and not asked.forwarded:
            leader_id = part.leader.leader_id
            if leader_id is not None and leader_id != self.node_id:
                # The leader's answer carries every replica's progress.
                with contextlib.suppress(ReplogError):
                    found = (await self._described_by(asked, leader_id)).get(p)
                    if found is not None:
                        # ... and this replica's corrupt ranges, which the leader does
                        # not know.
                        found.corrupt_ranges.extend(self._corrupt_ranges(part))
                        return found
        return self._describe_here(meta, p, part)

    @staticmethod
    def _not_started(meta: TopicMeta, p: int) -> admin_pb2.PartitionDescription:
        return admin_pb2.PartitionDescription(
            partition=p,
            replicas=meta.assignment[p],
            leader_id=NO_LEADER,
            target_replicas=meta.targets.get(p, ()),
        )

    async def _described_by(
        self, asked: _Asked, node_id: int
    ) -> dict[int, admin_pb2.PartitionDescription]:
        """The partitions `node_id` describes (asked once per call, forwarded)."""
        known = asked.by_node.get(node_id)
        if known is None:
            stub = self.peers.admin(node_id)
            desc = await remote(
                stub.DescribeTopic(asked.request, timeout=REMOTE_TIMEOUT_S, metadata=FORWARD)
            )
            known = asked.by_node[node_id] = {}
            for d in desc.partitions:
                known.setdefault(d.partition, d)
        return known

    def _describe_here(
        self, meta: TopicMeta, p: int, part: ReplicatedPartition
    ) -> admin_pb2.PartitionDescription:
        leader = part.leader
        plog = part.log
        status = part.driver.replica_status()
        target, step, error = describe(meta, p, self.reassignments)
        return admin_pb2.PartitionDescription(
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
            corrupt_ranges=self._corrupt_ranges(part),
            target_replicas=target,
            reassignment_step=step,
            reassignment_error=error,
            observers=part.driver.membership.observers,
        )

    def _corrupt_ranges(self, part: ReplicatedPartition) -> list[admin_pb2.CorruptRange]:
        try:
            ranges = part.log.corrupt_ranges()
        except ReplogError:  # closed meanwhile: the replica stopped or the topic went
            return []
        return [
            admin_pb2.CorruptRange(
                replica_id=self.node_id,
                segment=i.segment,
                start_position=i.start_position,
                end_position=i.end_position,
                first_offset=i.first_offset,
                end_offset=i.end_offset,
                detail=i.detail,
            )
            for i in ranges
        ]

    @unary("GetMetadata")
    async def GetMetadata(
        self, request: admin_pb2.GetMetadataRequest, context: Context
    ) -> admin_pb2.Metadata:
        if self.members is not None and self.members.removed():
            raise NodeRemovedError(
                f"node {self.node_id} was removed from the cluster: ask another node "
                "(and stop this one: docs/operations.md, Scale)",
                node_id=self.node_id,
            )
        names = list(request.topics) or self.answers.names()
        driver = self.router.metadata.driver
        quorum = driver.membership
        out = admin_pb2.Metadata(
            node_id=self.node_id,
            nodes=self.nodes(),
            metadata_voters=sorted(quorum.voters),
            metadata_observers=sorted(quorum.observers),
            metadata_leader_id=driver.leader_id or 0,
        )
        for name in names:
            meta = await self.router.topic(name)  # UNKNOWN_TOPIC if absent
            out.topics.append(self.answers.topic(meta))  # (built again only after a change)
        return out

    @unary("ReassignPartition")
    async def ReassignPartition(
        self, request: admin_pb2.ReassignPartitionRequest, context: Context
    ) -> admin_pb2.ReassignPartitionResponse:
        replicas = tuple(request.replicas)
        if request.complete:
            # Completing makes the removed nodes delete their replicas: only the partition's
            # leader may say the membership got there, never a client (even an admin).
            if not self._from_a_node(context):
                raise PermissionDeniedError(
                    "only the partition's leader completes a reassignment (a call between "
                    "nodes); ask for a move with replicas alone"
                )
            assignment, target = await self.topics.complete_reassignment(
                request.topic, request.topic_id, request.partition, replicas
            )
        else:
            assignment, target = await self.topics.reassign(
                request.topic, request.partition, replicas
            )
        return admin_pb2.ReassignPartitionResponse(replicas=assignment, target_replicas=target)

    @unary("CreatePartitions")
    async def CreatePartitions(
        self, request: admin_pb2.CreatePartitionsRequest, context: Context
    ) -> admin_pb2.CreatePartitionsResponse:
        count = await self.topics.create_partitions(request.topic, request.partitions)
        return admin_pb2.CreatePartitionsResponse(partitions=count)

    @unary("AddNode")
    async def AddNode(
        self, request: admin_pb2.AddNodeRequest, context: Context
    ) -> admin_pb2.AddNodeResponse:
        nodes = await self._members().add(request.node_id, request.address, request.peer_address)
        return admin_pb2.AddNodeResponse(nodes=nodes)

    @unary("RemoveNode")
    async def RemoveNode(
        self, request: admin_pb2.RemoveNodeRequest, context: Context
    ) -> admin_pb2.RemoveNodeResponse:
        nodes = await self._members().remove(request.node_id)
        return admin_pb2.RemoveNodeResponse(nodes=nodes)

    def _members(self) -> Members:
        """Who changes the members (MEMBERSHIP_CHANGE_REFUSED on a server without one)."""
        if self.members is None:
            raise MembershipChangeRefusedError("this server does not change its members")
        return self.members

    def _from_a_node(self, context: Context) -> bool:
        """A call another node made: its certificate names a member (TLS on), or, in a
        plaintext cluster (which trusts its network, as its replication does), it carries
        the forwarded mark."""
        if self.member is not None:
            return self.member(context) is not None
        return _forwarded(context)

    @unary("TransferLeadership")
    async def TransferLeadership(
        self, request: admin_pb2.TransferLeadershipRequest, context: Context
    ) -> admin_pb2.TransferLeadershipResponse:
        topic, p = request.topic, request.partition
        if topic == METADATA_TOPIC:
            return await self._transfer_metadata(request, context)
        part = await self._local(topic, p)
        if part is None or not part.is_leader:
            # The leader does it: forward once (a forwarded call answers for itself only).
            leader_id = part.leader.leader_id if part is not None else None
            if _forwarded(context) or (part is not None and leader_id in (None, self.node_id)):
                raise LeaderUnknownError(
                    f"{topic}/{p}: no leader to hand over from right now; retry",
                    topic=topic,
                    partition=p,
                )
            stub = self.peers.admin(leader_id) if leader_id else await self._peer(topic, p)
            return await remote(  # type: ignore[no-any-return]
                stub.TransferLeadership(request, timeout=REMOTE_TIMEOUT_S, metadata=FORWARD)
            )
        return await self._transfer(part.driver, topic, p, request.target_node_id)

    async def _transfer_metadata(
        self, request: admin_pb2.TransferLeadershipRequest, context: Context
    ) -> admin_pb2.TransferLeadershipResponse:
        """TransferLeadership of `__cluster` (partition 0): the cluster metadata's leader."""
        if request.partition != 0:
            raise PartitionNotFoundError(
                f"{METADATA_TOPIC} has one partition", partition=request.partition, partitions=1
            )
        driver = self.router.metadata.driver
        if driver.role is not Role.LEADER:
            leader_id = driver.leader_id
            if _forwarded(context) or leader_id in (None, self.node_id):
                raise LeaderUnknownError(f"{METADATA_TOPIC}: no leader right now; retry")
            return await remote(  # type: ignore[no-any-return]
                self.peers.admin(leader_id).TransferLeadership(
                    request, timeout=REMOTE_TIMEOUT_S, metadata=FORWARD
                )
            )
        return await self._transfer(driver, METADATA_TOPIC, 0, request.target_node_id)

    async def _transfer(
        self, driver: ReplicaDriver, topic: str, p: int, target: int
    ) -> admin_pb2.TransferLeadershipResponse:
        voters = driver.membership.voters
        if target == 0:
            picked = pick_target(self.node_id, voters, driver.replica_status())
            if picked is None:
                raise UnavailableError(
                    f"{topic}/{p}: no other voter is caught up and alive to take over; retry"
                )
            target = picked
        elif target == self.node_id or target not in voters:
            raise InvalidArgumentError(
                f"target_node_id {target} is not another voter of {topic}/{p} "
                f"(voters {list(voters)}, leader {self.node_id})"
            )
        epoch = driver.epoch
        await driver.transfer_leadership(target)
        # The core gives up after election_timeout_ms_max; wait a little longer than that.
        timeout_s = 2 * driver.config.election_timeout_ms_max / 1000
        if not await wait_until(
            lambda: driver.epoch > epoch or driver.role is not Role.LEADER, timeout_s
        ):
            raise UnavailableError(
                f"{topic}/{p}: node {target} did not take over in time (it may lag); "
                "the leader leads on"
            )
        return admin_pb2.TransferLeadershipResponse(leader_id=target, previous_epoch=epoch)

    @unary("ListOffsets")
    async def ListOffsets(
        self, request: admin_pb2.ListOffsetsRequest, context: Context
    ) -> admin_pb2.ListOffsetsResponse:
        count = (await self.router.topic(request.topic)).partitions
        wanted = list(request.partitions) or list(range(count))
        out = admin_pb2.ListOffsetsResponse()
        for p in wanted:
            part = await self._local(request.topic, p)
            if part is not None and not part.is_leader:
                # "latest" is the leader's HW: a follower's may lag behind records already
                # acknowledged with acks=all, so a follower never answers with its own.
                leader_id = part.leader.leader_id
                if _forwarded(context) or leader_id is None or leader_id == self.node_id:
                    raise LeaderUnknownError(
                        f"{request.topic}/{p}: this replica does not lead it and knows no "
                        "leader; retry",
                        topic=request.topic,
                        partition=p,
                    )
                stub = self.peers.admin(leader_id)
                sub = _one_partition(request, p)
                reply = await remote(
                    stub.ListOffsets(sub, timeout=REMOTE_TIMEOUT_S, metadata=FORWARD)
                )
                out.partitions.extend(reply.partitions)
                continue
            if part is None:
                if _forwarded(context):
                    raise NotLeaderError(f"no replica of {request.topic}/{p} here")
                stub = await self._peer(request.topic, p)
                sub = _one_partition(request, p)
                reply = await remote(
                    stub.ListOffsets(sub, timeout=REMOTE_TIMEOUT_S, metadata=FORWARD)
                )
                out.partitions.extend(reply.partitions)
                continue
            plog = part.log
            found = None
            if request.HasField("timestamp_ms"):
                try:
                    found = await asyncio.to_thread(plog.offset_for_time, request.timestamp_ms)
                except LogClosedError as exc:
                    raise part.closed_error() from exc
            answer = admin_pb2.PartitionOffsets(
                partition=p,
                earliest=plog.log_start_offset,
                latest=plog.high_watermark,
                log_end_offset=plog.log_end_offset,
            )
            if request.HasField("timestamp_ms"):
                # The first committed record at or after the time; none: the HW (the end).
                answer.offset_for_timestamp = plog.high_watermark if found is None else found[0]
                if found is not None:
                    answer.found_timestamp_ms = found[1]
            out.partitions.append(answer)
        return out
