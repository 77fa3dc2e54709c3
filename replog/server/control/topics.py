"""Creating and deleting topics: checked, then proposed on the metadata leader.

Any node accepts CreateTopic/DeleteTopic: the router names the `__cluster` leader; another
node forwards the call there (`peers`). On the leader the command is built from the
caught-up image, which validates it (INVALID_ARGUMENT, TOPIC_EXISTS, UNKNOWN_TOPIC) before
anything is proposed, and checks that the leader's disk has room for its replicas
(STORAGE_FULL otherwise: nothing is proposed, nothing is written); the call returns once the
command is committed and applied to the leader's image. A create also gives this node's
reconciler a short moment to open its replicas, so that a single node serves the topic as
soon as the call returns; the replicas elsewhere follow on their own (callers retry
LEADER_UNKNOWN meanwhile).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

from replog.errors import InvalidArgumentError
from replog.server.control.routing import Router
from replog.server.meta import topic_configs
from replog.server.meta.metadata import (
    CREATE_TIME,
    ENVELOPE,
    FORMATS,
    METADATA_TOPIC,
    RAW,
    TIMESTAMP_TYPES,
    Command,
    CreatePartitions,
    CreateTopic,
    MetadataImage,
    ReassignPartition,
)
from replog.server.meta.metadata_log import MetadataLog
from replog.server.partitions import replica_dirs
from replog.server.partitions.replica_manager import ReplicaManager
from replog.server.peering.peers import FORWARD_METADATA, Peers, remote
from replog.storage import validate_topic_name
from replog.storage.names import PARTITIONS_MAX
from replog.v1 import admin_pb2

LOCAL_OPEN_WAIT_S = 5.0
WIRE_FORMATS = {"raw": admin_pb2.TOPIC_FORMAT_RAW, "envelope": admin_pb2.TOPIC_FORMAT_ENVELOPE}
WIRE_TIMESTAMP_TYPES = {
    "create_time": admin_pb2.TIMESTAMP_TYPE_CREATE_TIME,
    "log_append_time": admin_pb2.TIMESTAMP_TYPE_LOG_APPEND_TIME,
}


def format_from_wire(request: admin_pb2.CreateTopicRequest) -> tuple[str, str]:
    """(format, timestamp_type) of a CreateTopic; unset fields: envelope (Kafka's record
    model, the default for new topics), create time; INVALID_ARGUMENT for a value this
    server lacks. A client that wants the seed's raw values asks for TOPIC_FORMAT_RAW."""
    formats: dict[int, str] = {0: ENVELOPE, **{v: k for k, v in WIRE_FORMATS.items()}}
    types: dict[int, str] = {0: CREATE_TIME, **{v: k for k, v in WIRE_TIMESTAMP_TYPES.items()}}
    found = formats.get(request.format), types.get(request.timestamp_type)
    if found[0] is None or found[1] is None:
        raise InvalidArgumentError(
            f"unknown format {request.format} or timestamp_type {request.timestamp_type}"
        )
    return found[0], found[1]


# Consumer groups' committed offsets (server/groups/): created by the node itself, never by
# a client's CreateTopic, and never deleted by one.
OFFSETS_TOPIC = "__consumer_offsets"


class Topics:
    def __init__(
        self,
        router: Router,
        metadata: MetadataLog,
        replicas: ReplicaManager,
        peers: Peers,
        *,
        default_replication_factor: int,
        timeout_s: float,
        racks: Callable[[], Awaitable[Mapping[int, str]]] | None = None,
    ) -> None:
        """`racks()`: every node's rack (node -> rack, "" unknown), asked when a topic is
        created (rack-aware placement, `metadata.assign`)."""
        self.racks = racks
        self.router = router
        self.metadata = metadata
        self.replicas = replicas
        self.peers = peers
        self.default_replication_factor = default_replication_factor
        self.timeout_s = timeout_s

    async def create(
        self,
        name: str,
        partitions: int,
        replication_factor: int = 0,
        *,
        internal: bool = False,
        format: str = RAW,
        timestamp_type: str = CREATE_TIME,
        configs: Mapping[str, str] | None = None,
    ) -> None:
        """`internal`: the node creates an internal topic, on the metadata leader only.
        `format`, `timestamp_type`: see `metadata` (raw, create time by default);
        `configs`: see `topic_configs` (validated here, before anything is proposed)."""
        configs = topic_configs.checked(configs or {})
        topic_configs.check_node_limits(configs, self.replicas.config)
        topic_configs.check_format(configs, format == ENVELOPE)
        nodes = [i for i, _ in self.peers.nodes()]
        # Checks that need no metadata, so that a bad request fails on any node at once.
        validate_topic_name(name)
        if name == METADATA_TOPIC or (name == OFFSETS_TOPIC and not internal):
            raise InvalidArgumentError(f"{name} is reserved", topic=name)
        if not 1 <= partitions <= PARTITIONS_MAX:
            raise InvalidArgumentError(
                f"partitions must be in [1, {PARTITIONS_MAX}]", partitions=partitions
            )
        if format not in FORMATS or timestamp_type not in TIMESTAMP_TYPES:
            raise InvalidArgumentError(
                f"format must be one of {list(FORMATS)}, timestamp_type one of "
                f"{list(TIMESTAMP_TYPES)}"
            )
        rf = replication_factor or min(self.default_replication_factor, len(nodes))
        if rf > len(nodes):
            raise InvalidArgumentError(
                f"replication_factor {rf} exceeds the {len(nodes)} node(s) of the cluster",
                replication_factor=rf,
            )
        leader = self.router.metadata_leader()
        if leader != self.peers.node_id and not internal:  # (internal: propose refuses)
            request = admin_pb2.CreateTopicRequest(
                name=name,
                partitions=partitions,
                replication_factor=rf,
                format=WIRE_FORMATS[format],
                timestamp_type=WIRE_TIMESTAMP_TYPES[timestamp_type],
                configs=configs,
            )
            await remote(self.peers.admin(leader).CreateTopic(request, timeout=self.timeout_s))
            # read your writes on this node too (bounded: the command is committed already)
            await self.metadata.wait_until(lambda image: name in image.topics, LOCAL_OPEN_WAIT_S)
            return

        racks = await self.racks() if self.racks is not None else None

        def make(image: MetadataImage) -> CreateTopic:
            command = image.create_topic(
                name, partitions, rf, nodes, format, timestamp_type, racks, configs
            )
            hosted = sum(self.peers.node_id in replicas for replicas in command.assignment)
            replica_dirs.check_space(self.replicas.data_dir, hosted, self.replicas.config)
            self.replicas.check_capacity(command.assignment)
            return command

        await self.metadata.propose(make, self.timeout_s)
        # A pass under way may have started before the command applied: wait for the next.
        await self.replicas.wait_passes(2, LOCAL_OPEN_WAIT_S)

    async def delete(self, name: str) -> None:
        if name == OFFSETS_TOPIC:
            raise InvalidArgumentError(f"{name} is internal: delete groups instead", topic=name)
        await self.router.topic(name)  # UNKNOWN_TOPIC (or LEADER_UNKNOWN) before forwarding
        leader = self.router.metadata_leader()
        if leader != self.peers.node_id:
            request = admin_pb2.DeleteTopicRequest(name=name)
            await remote(self.peers.admin(leader).DeleteTopic(request, timeout=self.timeout_s))
            await self.metadata.wait_until(lambda i: name not in i.topics, LOCAL_OPEN_WAIT_S)
            return
        await self.metadata.propose(lambda image: image.delete_topic(name), self.timeout_s)

    async def create_partitions(
        self, name: str, partitions: int, *, validate_only: bool = False
    ) -> int:
        """Grow `name` to `partitions` (validated on the metadata leader, forwarded there
        from another node; TOO_MANY_PARTITIONS as for a create); returns the count once
        the command is applied there. Internal topics keep their count. `validate_only`:
        the command is checked against this node's metadata image, not proposed."""
        if name in (OFFSETS_TOPIC, METADATA_TOPIC):
            raise InvalidArgumentError(f"{name} is internal: its count is fixed", topic=name)
        await self.router.topic(name)  # UNKNOWN_TOPIC (or LEADER_UNKNOWN) before forwarding
        if validate_only:
            nodes = [i for i, _ in self.peers.nodes()]
            self.metadata.image.create_partitions(name, partitions, nodes)
            return partitions
        leader = self.router.metadata_leader()
        if leader != self.peers.node_id:
            request = admin_pb2.CreatePartitionsRequest(topic=name, partitions=partitions)
            reply = await remote(
                self.peers.admin(leader).CreatePartitions(request, timeout=self.timeout_s)
            )
            return int(reply.partitions)
        nodes = [i for i, _ in self.peers.nodes()]
        racks = await self.racks() if self.racks is not None else None

        def make(image: MetadataImage) -> CreatePartitions:
            command = image.create_partitions(name, partitions, nodes, racks)
            hosted = sum(self.peers.node_id in replicas for replicas in command.assignment)
            replica_dirs.check_space(self.replicas.data_dir, hosted, self.replicas.config)
            self.replicas.check_capacity(command.assignment)
            return command

        await self.metadata.propose(make, self.timeout_s)
        await self.replicas.wait_passes(2, LOCAL_OPEN_WAIT_S)  # as a create (above)
        return self.metadata.image.topic(name).partitions

    async def describe_configs(self, name: str) -> list[topic_configs.ConfigValue]:
        """Every config of topic `name`: its own values, and this node's defaults."""
        meta = await self.router.topic(name)
        return topic_configs.describe(meta.configs, meta.timestamp_type, self.replicas.config)

    async def alter_configs(
        self,
        name: str,
        set_: Mapping[str, str],
        delete: Sequence[str],
        *,
        validate_only: bool = False,
    ) -> None:
        """Set configs `set_` of topic `name` and reset `delete` to their defaults: checked
        here, proposed on the metadata leader (forwarded there); returns once applied
        there. A refusal records nothing. `validate_only`: checked, not proposed."""
        set_, deletes = topic_configs.checked_alter(set_, delete)
        topic_configs.check_node_limits(set_, self.replicas.config)
        if name in (OFFSETS_TOPIC, METADATA_TOPIC):
            raise InvalidArgumentError(f"{name} is internal: its configs are the node's")
        meta = await self.router.topic(name)  # UNKNOWN_TOPIC (or LEADER_UNKNOWN) first
        after, _ = topic_configs.altered(meta.configs, meta.timestamp_type, set_, deletes)
        topic_configs.check_format(after, meta.format == ENVELOPE)
        if validate_only:
            self.metadata.image.alter_topic_configs(name, set_, deletes)
            return
        leader = self.router.metadata_leader()
        if leader != self.peers.node_id:
            request = admin_pb2.AlterConfigsRequest(topic=name, set=set_, delete=deletes)
            await remote(self.peers.admin(leader).AlterConfigs(request, timeout=self.timeout_s))
            return
        await self.metadata.propose(
            lambda image: image.alter_topic_configs(name, set_, deletes), self.timeout_s
        )

    async def reassign(
        self, name: str, partition: int, replicas: tuple[int, ...]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Record `replicas` as the target of `name`/`partition` (validated on the metadata
        leader, forwarded there from another node, and refused with TOO_MANY_PARTITIONS when
        a node it adds hosts `partitions_max` replicas already, as for a create); returns
        (assignment, target) once the command is applied there."""
        await self.router.topic(name)  # UNKNOWN_TOPIC (or LEADER_UNKNOWN) before forwarding
        request = admin_pb2.ReassignPartitionRequest(
            topic=name, partition=partition, replicas=replicas
        )
        nodes = [i for i, _ in self.peers.nodes()]

        def make(image: MetadataImage) -> ReassignPartition:
            command = image.reassign_partition(name, partition, replicas, nodes)
            # The nodes that get a new replica must have room for it (TOO_MANY_PARTITIONS);
            # a cancel or the same target again adds none.
            hosts = image.topic(name).hosts(partition)
            self.replicas.check_capacity([[n for n in command.replicas if n not in hosts]])
            return command

        return await self._reassignment(name, partition, request, make)

    async def complete_reassignment(
        self, name: str, topic_id: int, partition: int, replicas: tuple[int, ...]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The partition's leader found its membership equal to the target `replicas`:
        make them the assignment (`reassignment`)."""
        request = admin_pb2.ReassignPartitionRequest(
            topic=name, partition=partition, replicas=replicas, complete=True, topic_id=topic_id
        )
        return await self._reassignment(
            name,
            partition,
            request,
            lambda image: image.complete_reassignment(name, topic_id, partition, replicas),
        )

    async def _reassignment(
        self,
        name: str,
        partition: int,
        request: admin_pb2.ReassignPartitionRequest,
        make: Callable[[MetadataImage], Command],
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        leader = self.router.metadata_leader()
        if leader != self.peers.node_id:
            reply = await remote(
                self.peers.admin(leader).ReassignPartition(
                    request, timeout=self.timeout_s, metadata=FORWARD_METADATA
                )
            )
            return tuple(reply.replicas), tuple(reply.target_replicas)
        await self.metadata.propose(make, self.timeout_s)
        meta = self.metadata.image.topic(name)
        return meta.assignment[partition], tuple(meta.targets.get(partition, ()))
