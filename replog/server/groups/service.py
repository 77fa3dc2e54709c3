"""The `replog.v1.Groups` service: wire checks, then the coordinator (proto/replog/v1/groups.proto).

Every request field is checked (`wire`) before anything else. FindCoordinator and
ListGroups answer on any node: FindCoordinator is forwarded once (metadata
`x-replog-forwarded`) to the metadata leader while `__consumer_offsets` does not exist (it
creates it) and to a replica of the group's partition when this node holds none;
ListGroups asks every node for the groups it coordinates and answers once every partition
of `__consumer_offsets` is covered (else UNAVAILABLE COORDINATOR_LOADING, retriable).
Every other call runs on the group's coordinator (`Coordinator.shard_for`).
"""

from __future__ import annotations

import uuid
from typing import Any

import grpc

from replog.errors import (
    CoordinatorLoadingError,
    LeaderUnknownError,
    PartitionNotFoundError,
    ReplogError,
    UnknownGroupError,
)
from replog.server.control.topics import OFFSETS_TOPIC
from replog.server.edge.listeners import Authenticate, MembersOnly
from replog.server.edge.rpc import Context, unary
from replog.server.groups import records, wire
from replog.server.groups.coordinator import Coordinator, Spawn
from replog.server.groups.lag import HighWatermarks, LagCollector
from replog.server.groups.shard import Shard
from replog.server.groups.state import Group, Member
from replog.server.metrics import Metrics
from replog.server.peering.peers import FORWARD_METADATA, FORWARDED, remote
from replog.v1 import groups_pb2, groups_pb2_grpc

REMOTE_TIMEOUT_S = 10.0
CLIENT_HOST_CHARS_MAX = 255
MEMBER_PREFIX_CHARS_MAX = 32


def _forwarded(context: Context) -> bool:
    return any(key == FORWARDED for key, _ in (context.invocation_metadata() or ()))


def _tps(items: Any) -> list[groups_pb2.TopicPartition]:
    return [groups_pb2.TopicPartition(topic=t, partition=p) for t, p in sorted(items)]


def new_member_id(client_id: str) -> str:
    prefix = "".join(c if c.isalnum() or c in "._-" else "_" for c in client_id)
    return f"{prefix[:MEMBER_PREFIX_CHARS_MAX] or 'member'}-{uuid.uuid4().hex}"


class GroupsService(groups_pb2_grpc.GroupsServicer):
    def __init__(self, coordinator: Coordinator, metrics: Metrics, hws: HighWatermarks) -> None:
        self.coordinator = coordinator
        self.config = coordinator.config
        self.peers = coordinator.peers
        self.node_id = coordinator.node_id
        self.metrics = metrics
        self.hws = hws

    def _stub(self, node: int) -> Any:
        """A Groups stub of another node, on the channel `Peers` keeps for it."""
        return groups_pb2_grpc.GroupsStub(self.peers._channel(node))  # type: ignore[no-untyped-call]

    # -- finding the coordinator -------------------------------------------------------------

    @unary("FindCoordinator")
    async def FindCoordinator(
        self, request: groups_pb2.FindCoordinatorRequest, context: Context
    ) -> groups_pb2.FindCoordinatorResponse:
        return await self.find_coordinator(request, forwarded=_forwarded(context))

    async def find_coordinator(
        self, request: groups_pb2.FindCoordinatorRequest, *, forwarded: bool
    ) -> groups_pb2.FindCoordinatorResponse:
        """FindCoordinator's work (the Kafka listener's FindCoordinator comes here too)."""
        group = wire.group_name(request.group)
        c = self.coordinator
        if c.offsets_meta() is None:
            if not c.metadata.ready:
                raise LeaderUnknownError(f"node {self.node_id} is catching up on the metadata")
            leader = c.metadata.leader()
            if leader == self.node_id:
                await c.create_offsets_topic()
            elif forwarded:
                raise LeaderUnknownError("the metadata leader moved; retry")
            else:
                return await self._forward(leader, request)
        found = await c.find(group)
        if isinstance(found, int):
            if forwarded:
                raise LeaderUnknownError(f"the coordinator of group {group!r} is not known yet")
            return await self._forward(found, request)
        node_id, address, p = found
        return groups_pb2.FindCoordinatorResponse(node_id=node_id, address=address, partition=p)

    async def _forward(
        self, node: int, request: groups_pb2.FindCoordinatorRequest
    ) -> groups_pb2.FindCoordinatorResponse:
        reply: groups_pb2.FindCoordinatorResponse = await remote(
            self._stub(node).FindCoordinator(
                request, timeout=REMOTE_TIMEOUT_S, metadata=FORWARD_METADATA
            )
        )
        return reply

    # -- membership --------------------------------------------------------------------------

    @unary("JoinGroup")
    async def JoinGroup(
        self, request: groups_pb2.JoinGroupRequest, context: Context
    ) -> groups_pb2.JoinGroupResponse:
        name = wire.group_name(request.group)
        topics = wire.topics(request.topics)
        session_ms = wire.session_timeout(request.session_timeout_ms, self.config)
        rebalance_ms = wire.rebalance_timeout(request.rebalance_timeout_ms, self.config)
        client_id = wire.client_id(request.client_id)
        c = self.coordinator
        shard = await c.shard_for(name)
        member = Member(
            new_member_id(client_id),
            client_id,
            (context.peer() or "")[:CLIENT_HOST_CHARS_MAX],
            topics,
            session_ms,
            rebalance_ms,
            last_heartbeat_ms=0,
        )
        answer = shard.groups.join(name, member, c.now_ms(), c.wall_ms(), c.counts)
        return groups_pb2.JoinGroupResponse(
            member_id=answer.member_id,
            generation=answer.generation,
            partitions=_tps(answer.partitions),
            heartbeat_interval_ms=self.config.heartbeat_interval_for(session_ms),
            session_timeout_ms=session_ms,
            reconciling=answer.reconciling,
        )

    @unary("Heartbeat")
    async def Heartbeat(
        self, request: groups_pb2.HeartbeatRequest, context: Context
    ) -> groups_pb2.HeartbeatResponse:
        name = wire.group_name(request.group)
        member_id = wire.member_id(request.member_id)
        wire.generation(request.generation, member_id)
        owned = wire.topic_partitions(
            ((o.topic, o.partition) for o in request.owned), len(request.owned), allow_empty=True
        )
        c = self.coordinator
        shard = await c.shard_for(name)
        answer = shard.groups.heartbeat(name, member_id, owned, c.now_ms(), c.counts)
        session_ms = shard.groups.groups[name].members[member_id].session_timeout_ms
        return groups_pb2.HeartbeatResponse(
            generation=answer.generation,
            partitions=_tps(answer.partitions),
            heartbeat_interval_ms=self.config.heartbeat_interval_for(session_ms),
            reconciling=answer.reconciling,
        )

    @unary("LeaveGroup")
    async def LeaveGroup(
        self, request: groups_pb2.LeaveGroupRequest, context: Context
    ) -> groups_pb2.LeaveGroupResponse:
        name = wire.group_name(request.group)
        member_id = wire.member_id(request.member_id)
        c = self.coordinator
        shard = await c.shard_for(name)
        shard.groups.leave(name, member_id, c.now_ms(), c.wall_ms(), c.counts)
        return groups_pb2.LeaveGroupResponse()

    # -- offsets -----------------------------------------------------------------------------

    @unary("CommitOffsets")
    async def CommitOffsets(
        self, request: groups_pb2.CommitOffsetsRequest, context: Context
    ) -> groups_pb2.CommitOffsetsResponse:
        return await self.commit_offsets(request)

    async def commit_offsets(
        self, request: groups_pb2.CommitOffsetsRequest
    ) -> groups_pb2.CommitOffsetsResponse:
        """CommitOffsets' work (the Kafka listener's OffsetCommit comes here too)."""
        name = wire.group_name(request.group)
        member_id = wire.member_id(request.member_id, allow_empty=True)
        generation = wire.generation(request.generation, member_id)
        wanted = wire.offsets(
            [(o.topic, o.partition, o.offset, o.metadata) for o in request.offsets], self.config
        )
        c = self.coordinator
        shard = await c.shard_for(name)
        topic_ids: dict[str, int] = {}
        for o in wanted:
            if o.topic not in topic_ids:
                meta = await c.router.topic(o.topic)  # UNKNOWN_TOPIC
                topic_ids[o.topic] = meta.topic_id
            count = c.counts(o.topic)
            if o.partition >= count:
                raise PartitionNotFoundError(
                    f"{o.topic} has no partition {o.partition}",
                    partition=o.partition,
                    partitions=count,
                )
        tps = [(o.topic, o.partition) for o in wanted]
        shard.groups.check_commit(name, member_id, generation, tps)
        if member_id and self._unchanged(shard, name, wanted, topic_ids):
            return groups_pb2.CommitOffsetsResponse()  # nothing new: no record
        now = c.wall_ms()
        entries = tuple(
            records.OffsetEntry(o.topic, topic_ids[o.topic], o.partition, o.offset, o.metadata, now)
            for o in wanted
        )
        await shard.write(records.Commit(name, now, entries))
        return groups_pb2.CommitOffsetsResponse()

    def _unchanged(
        self, shard: Shard, name: str, wanted: list[wire.OffsetToCommit], ids: dict[str, int]
    ) -> bool:
        group = shard.groups.groups.get(name)
        if group is None:
            return False
        for o in wanted:
            had = group.offsets.get((o.topic, o.partition))
            if had is None or (had.offset, had.metadata, had.topic_id) != (
                o.offset,
                o.metadata,
                ids[o.topic],
            ):
                return False
        return True

    @unary("FetchCommittedOffsets")
    async def FetchCommittedOffsets(
        self, request: groups_pb2.FetchCommittedOffsetsRequest, context: Context
    ) -> groups_pb2.FetchCommittedOffsetsResponse:
        return await self.fetch_committed_offsets(request)

    async def fetch_committed_offsets(
        self, request: groups_pb2.FetchCommittedOffsetsRequest
    ) -> groups_pb2.FetchCommittedOffsetsResponse:
        """FetchCommittedOffsets' work (the Kafka listener's OffsetFetch comes here too)."""
        name = wire.group_name(request.group)
        wanted = wire.topic_partitions(
            ((o.topic, o.partition) for o in request.partitions),
            len(request.partitions),
            allow_empty=True,
        )
        c = self.coordinator
        shard = await c.shard_for(name)
        found = shard.groups.committed(name, wanted, c.topic_id)
        out = groups_pb2.FetchCommittedOffsetsResponse()
        for t, p in wanted or sorted(found):
            entry = found.get((t, p))
            if entry is None:
                out.offsets.add(topic=t, partition=p, offset=-1)
            else:
                out.offsets.add(
                    topic=t,
                    partition=p,
                    offset=entry.offset,
                    metadata=entry.metadata,
                    commit_time_ms=entry.commit_time_ms,
                )
        return out

    # -- administration ----------------------------------------------------------------------

    @unary("ListGroups")
    async def ListGroups(
        self, request: groups_pb2.ListGroupsRequest, context: Context
    ) -> groups_pb2.ListGroupsResponse:
        local = self._local_groups()
        if _forwarded(context):
            return local
        c = self.coordinator
        meta = c.offsets_meta()
        if meta is None:
            return groups_pb2.ListGroupsResponse()  # no group has ever existed
        out = groups_pb2.ListGroupsResponse()
        answers = [local]
        for node, _address in self.peers.nodes():
            if node == self.node_id:
                continue
            try:
                answers.append(
                    await remote(
                        self._stub(node).ListGroups(
                            request, timeout=REMOTE_TIMEOUT_S, metadata=FORWARD_METADATA
                        )
                    )
                )
            except ReplogError:
                continue  # down: its partitions move to other leaders (checked below)
        covered: set[int] = set()
        for answer in answers:
            out.groups.extend(answer.groups)
            covered.update(answer.partitions)
        missing = sorted(set(range(meta.partitions)) - covered)
        if missing:
            raise CoordinatorLoadingError(
                f"{OFFSETS_TOPIC} partitions {missing} have no loaded coordinator right now "
                "(an election or a load is under way); retry"
            )
        out.partitions.extend(sorted(covered))
        out.groups.sort(key=lambda g: g.group)
        return out

    def _local_groups(self) -> groups_pb2.ListGroupsResponse:
        out = groups_pb2.ListGroupsResponse()
        for shard in self.coordinator.loaded_shards():
            out.partitions.append(shard.partition)
            for group in shard.groups.groups.values():
                out.groups.add(
                    group=group.name,
                    state=group.state,
                    members=len(group.members),
                    generation=group.generation,
                    coordinator_id=self.node_id,
                )
        return out

    @unary("DescribeGroup")
    async def DescribeGroup(
        self, request: groups_pb2.DescribeGroupRequest, context: Context
    ) -> groups_pb2.DescribeGroupResponse:
        name = wire.group_name(request.group)
        c = self.coordinator
        shard = await c.shard_for(name)
        group = shard.groups.groups.get(name)
        if group is None:
            raise UnknownGroupError(f"group {name!r} does not exist", group=name)
        out = groups_pb2.DescribeGroupResponse(
            group=name, state=group.state, generation=group.generation, coordinator_id=self.node_id
        )
        now = c.now_ms()
        for m in sorted(group.members.values(), key=lambda m: m.member_id):
            out.members.add(
                member_id=m.member_id,
                client_id=m.client_id,
                client_host=m.client_host,
                topics=m.topics,
                partitions=_tps(m.held),
                target=_tps(group.target.get(m.member_id, ())),
                generation=m.generation,
                session_timeout_ms=m.session_timeout_ms,
                last_heartbeat_ms_ago=max(0, now - m.last_heartbeat_ms),
            )
        await self._describe_partitions(group, out)
        return out

    async def _describe_partitions(
        self, group: Group, out: groups_pb2.DescribeGroupResponse
    ) -> None:
        c = self.coordinator
        committed = group.offsets
        tps = {tp for tp, e in committed.items() if e.topic_id == c.topic_id(tp[0])}
        for t in {t for m in group.members.values() for t in m.topics}:
            tps.update((t, p) for p in range(c.counts(t)))
        hws = {t: await self.hws.of(t) for t in sorted({t for t, _p in tps})}
        for t, p in sorted(tps):
            entry = committed.get((t, p))
            if entry is not None and entry.topic_id != c.topic_id(t):
                entry = None
            start_hw = hws[t].get(p)
            hw = -1 if start_hw is None else start_hw[1]
            if start_hw is None:
                lag = -1
            elif entry is None:
                lag = max(0, start_hw[1] - start_hw[0])
            else:
                lag = max(0, start_hw[1] - entry.offset)
            out.partitions.add(
                topic=t,
                partition=p,
                committed_offset=-1 if entry is None else entry.offset,
                metadata="" if entry is None else entry.metadata,
                commit_time_ms=0 if entry is None else entry.commit_time_ms,
                high_watermark=hw,
                lag=lag,
                member_id=group.holders.get((t, p), ""),
            )

    @unary("DeleteGroup")
    async def DeleteGroup(
        self, request: groups_pb2.DeleteGroupRequest, context: Context
    ) -> groups_pb2.DeleteGroupResponse:
        await self.delete_group(request.group)
        return groups_pb2.DeleteGroupResponse()

    async def delete_group(self, group: str) -> None:
        """DeleteGroup's work (the Kafka listener's DeleteGroups comes here too)."""
        name = wire.group_name(group)
        c = self.coordinator
        shard = await c.shard_for(name)
        shard.groups.check_delete(name)
        await shard.write(records.DeleteGroup(name, c.wall_ms(), "deleted"))


def register(
    coordinator: Coordinator,
    metrics: Metrics,
    server: grpc.aio.Server,
    peer_server: grpc.aio.Server | None,
    authenticate: Authenticate | None,
    spawn: Spawn,
) -> GroupsService:
    """Serve Groups on the client listener, and on the peer listener (members only) for the
    calls nodes forward to each other; export the lag metrics."""
    hws = HighWatermarks(coordinator)
    metrics.registry.register(LagCollector(coordinator, hws))
    spawn(hws.run(), "groups-lag")
    service = GroupsService(coordinator, metrics, hws)
    groups_pb2_grpc.add_GroupsServicer_to_server(service, server)  # type: ignore[no-untyped-call]
    if peer_server is not None:
        peer = service if authenticate is None else MembersOnly(service, authenticate)
        groups_pb2_grpc.add_GroupsServicer_to_server(peer, peer_server)  # type: ignore[no-untyped-call]
    return service
