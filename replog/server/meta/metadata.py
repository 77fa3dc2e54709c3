"""Cluster metadata: typed, versioned commands and the in-memory image they build.

The `__cluster` partition's records are commands. Each is validated against the image on
the metadata leader BEFORE it is proposed (`MetadataImage.create_topic` /
`delete_topic` return the command or raise a typed `ReplogError`); once committed, applying
it (`MetadataImage.apply`) cannot fail: it is a pure change of in-memory state. Local side
effects (directories, replicas) are not part of applying: the reconciler
(`replica_manager`) moves local state towards the image and may retry; the image never
waits for it.

Record value, JSON (UTF-8), version 1 (written)::

    {"kind": "create_topic", "version": 1, "name": "orders", "partitions": 3,
     "assignment": [[1, 2, 3], [2, 3, 1], [3, 1, 2]]}
    {"kind": "create_topic", "version": 2, ..., "format": "envelope",
     "timestamp_type": "log_append_time"}     (version 2: a topic that is not raw)
    {"kind": "create_topic", "version": 3, ..., "configs": {"retention.ms": "60000"}}
                                          (version 3: a topic with configs, `topic_configs`)
    {"kind": "alter_topic_configs", "version": 1, "name": "orders", "topic_id": 17,
     "set": {"retention.bytes": "1048576"}, "delete": ["segment.bytes"]}
    {"kind": "delete_topic", "version": 1, "name": "orders"}
    {"kind": "add_acl", "version": 1, "acl": {"principal": "User:alice",
     "resource_type": "topic", "resource_name": "orders.", "prefix": true,
     "operation": "write"}}
    {"kind": "remove_acl", "version": 1, "acl": {...the same fields...}}
    {"kind": "init_producer", "version": 1, "name": "spark-query-7"}   ("" : anonymous)
    {"kind": "reassign_partition", "version": 1, "name": "orders", "topic_id": 17,
     "partition": 0, "replicas": [2, 3, 4]}
    {"kind": "complete_reassignment", "version": 1, "name": "orders", "topic_id": 17,
     "partition": 0, "replicas": [2, 3, 4]}
    {"kind": "add_node", "version": 1, "node_id": 4, "address": "10.0.0.4:7070",
     "peer_address": ""}                  (peer_address "": peers call `address`)
    {"kind": "remove_node", "version": 1, "node_id": 4}
    {"kind": "create_partitions", "version": 1, ...}   (`partition_growth`: grow a topic)

Nodes: the cluster's members are the nodes of the settings' `peers` (the bootstrap list,
the same on every node) changed by the `add_node` and `remove_node` commands in log order
(`MetadataImage.nodes`). A node added this way is reached by every node without a restart
(`server/cluster/membership.py` keeps the peer links and the `__cluster` quorum in step with it).
Validation: `add_node` needs an id in [1, 2**31-1] and host:port addresses that no other
member uses; a member added again at the same address changes nothing, at another address
is NODE_ALREADY_EXISTS.
`remove_node` needs a member (UNKNOWN_NODE) that hosts no replica, reassignment targets
included (NODE_NOT_EMPTY: decommission it first), and not the last one.

Reassignment (moving a partition's replicas to other nodes): `reassign_partition` records a
partition's target replicas (preferred leader first) beside its assignment; while it is in
force the partition is hosted by the nodes of both (`TopicMeta.hosts`; a cancelled target's
nodes too, until the completion). The partition's leader drives its membership towards the
target (`server/cluster/reassignment.py`) and, once the membership is the target, proposes
`complete_reassignment`, which makes the target the assignment. A node of an earlier
release stops at either command (an unknown kind), as below: upgrade every node first.
A `reassign_partition` whose replicas are the current assignment cancels one in progress
(the leader drives the membership back, then completes). Validation
(`MetadataImage.reassign_partition`): the topic exists (with that `topic_id`), the partition
is in range, the replicas are 1 or more distinct known node ids, and no other reassignment
of the partition is in progress; the metadata leader also refuses a move that would make a
node host more than `partitions_max` replicas (`Topics.reassign`, TOO_MANY_PARTITIONS).
Applying either command to a topic that is gone or was created again (another
`topic_id`), or a completion whose replicas are not the target in force, changes nothing.

A topic's `format` ("raw": values are the producer's bytes; "envelope": `replog.records`)
and `timestamp_type` ("create_time" or "log_append_time") are absent from version 1 (raw,
create time). A topic that is not raw is written as version 2, so that a node of an older
release stops ("upgrade this node") rather than lead it as raw (accepting values that are
not envelopes, or keeping producers' timestamps): raw topics stay version 1, readable by
every release.

A producer id is 1 + the `__cluster` offset of the `init_producer` command that first
made it: unique in the cluster, never reused. A named producer keeps its id; each further
`init_producer` of its name raises its epoch by one (fencing the older instances). An
anonymous `init_producer` a node proposes to reserve a block of ids also stands for the
block `control/producer_ids.block_of(offset)` (from 2^48 up), which only that node hands
out; the image reads it like any anonymous one.

ACLs (`AclEntry`) allow a principal an operation on a resource: a topic or a consumer
group (by name, or by prefix), or the cluster. `MetadataImage.allowed` is the authorizer's
question; a cluster ACL of an operation covers every topic and group too. Principals are
"User:<name>" ("User:*": any authenticated user) and "Node:<id>".
Quotas (`set_quota`: rates per principal and a default) are kept in `quotas.py`.

Version 0 (read, never written) is the untyped format of earlier releases, with "op" in
place of "kind" and no "version". A record whose kind or version this node does not know,
or whose fields do not have the shape above, raises `UnknownCommandError`: the node stops
with that error rather than skip a command the rest of the cluster applied.

A topic's identity is its name plus `topic_id`, the `__cluster` offset of the command that
created it: a topic deleted and created again under the same name is a new topic, and the
reconciler never mistakes the old one's files for the new one's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from replog.errors import (
    InvalidArgumentError,
    LimitExceededError,
    NodeExistsError,
    NodeNotEmptyError,
    NotFoundError,
    PartitionNotFoundError,
    ReassignmentInProgressError,
    TopicExistsError,
    TopicNotFoundError,
    UnknownNodeError,
)
from replog.server.meta import partition_growth
from replog.server.meta.acls import ANY_USER as ANY_USER
from replog.server.meta.acls import OPERATIONS as OPERATIONS
from replog.server.meta.acls import PRINCIPAL_BYTES_MAX as PRINCIPAL_BYTES_MAX
from replog.server.meta.acls import RESOURCE_TYPES as RESOURCE_TYPES
from replog.server.meta.acls import AclEntry as AclEntry
from replog.server.meta.partition_growth import CreatePartitions as CreatePartitions
from replog.server.meta.placement import assign as assign
from replog.server.meta.quotas import QuotaEntry, apply_quota
from replog.server.meta.topic_configs import altered, checked, checked_alter, split_timestamp_type
from replog.storage import validate_topic_name
from replog.storage.names import PARTITIONS_MAX

METADATA_TOPIC = "__cluster"
COMMAND_VERSION = 1
KNOWN_VERSIONS = (0, 1, 2, 3)
RAW = "raw"
ENVELOPE = "envelope"
FORMATS = (RAW, ENVELOPE)
CREATE_TIME = "create_time"
LOG_APPEND_TIME = "log_append_time"
TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)


class UnknownCommandError(Exception):
    """A metadata record this node cannot apply (newer kind or version, or malformed).
    Not a `ReplogError`: it is not a request's outcome but a reason to stop the node."""


@dataclass(frozen=True, slots=True)
class CreateTopic:
    name: str
    partitions: int
    assignment: tuple[tuple[int, ...], ...]  # partition -> its replicas, preferred leader first
    format: str = RAW
    timestamp_type: str = CREATE_TIME
    configs: Mapping[str, str] = field(default_factory=dict)  # `topic_configs`, canonical

    KIND = "create_topic"


@dataclass(frozen=True, slots=True)
class AlterTopicConfigs:
    """Set some of a topic's configs and reset others to their defaults (incremental)."""

    name: str
    topic_id: int
    set: Mapping[str, str]  # canonical (message.timestamp.type: the topic's timestamp_type)
    delete: tuple[str, ...]

    KIND = "alter_topic_configs"


@dataclass(frozen=True, slots=True)
class _PartitionTarget:
    name: str
    topic_id: int
    partition: int
    replicas: tuple[int, ...]  # the target, preferred leader first


@dataclass(frozen=True, slots=True)
class ReassignPartition(_PartitionTarget):
    """Start moving the partition to `replicas` (or cancel: the current assignment)."""

    KIND = "reassign_partition"


@dataclass(frozen=True, slots=True)
class CompleteReassignment(_PartitionTarget):
    """The partition's membership is `replicas`, its target: they become its assignment."""

    KIND = "complete_reassignment"


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    name: str

    KIND = "delete_topic"


@dataclass(frozen=True, slots=True)
class AddAcl:
    acl: AclEntry

    KIND = "add_acl"


@dataclass(frozen=True, slots=True)
class RemoveAcl:
    acl: AclEntry

    KIND = "remove_acl"


@dataclass(frozen=True, slots=True)
class InitProducer:
    name: str  # "": anonymous

    KIND = "init_producer"


@dataclass(frozen=True, slots=True)
class NodeAddress:
    """Where a member is reached: `address` (clients, and peers without a peer listener)
    and `peer_address` ("": the same)."""

    address: str
    peer_address: str = ""

    @property
    def dial(self) -> str:
        return self.peer_address or self.address


NODE_ID_MAX = 2**31 - 1
NODES_MAX = 256
ADDRESS_BYTES_MAX = 255


def is_address(value: str) -> bool:
    """host:port, port in [0, 65535], at most ADDRESS_BYTES_MAX bytes."""
    host, sep, port = value.rpartition(":")
    return bool(
        sep
        and host
        and port.isdigit()
        and len(port) <= 5
        and int(port) <= 65535
        and len(value.encode()) <= ADDRESS_BYTES_MAX
    )


@dataclass(frozen=True, slots=True)
class AddNode:
    node_id: int
    address: str
    peer_address: str = ""

    KIND = "add_node"


@dataclass(frozen=True, slots=True)
class RemoveNode:
    node_id: int

    KIND = "remove_node"


PRODUCER_NAME_BYTES_MAX = 255
PRODUCER_NAMES_MAX = 100_000
PRODUCER_EPOCH_MAX = 2**31 - 1

Command = (
    CreateTopic
    | DeleteTopic
    | AddAcl
    | RemoveAcl
    | InitProducer
    | ReassignPartition
    | CompleteReassignment
    | AddNode
    | RemoveNode
    | CreatePartitions
    | AlterTopicConfigs
    | QuotaEntry  # kind set_quota (quotas.py)
)


@dataclass(frozen=True, slots=True)
class TopicMeta:
    name: str
    partitions: int
    assignment: tuple[tuple[int, ...], ...]
    topic_id: int  # the __cluster offset of the CreateTopic that made it
    format: str = RAW
    timestamp_type: str = CREATE_TIME
    # partition -> target replicas of a reassignment in progress (preferred leader first)
    targets: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    # partition -> the nodes outside its assignment that any target of the reassignment in
    # progress named (a cancelled target's too: they may hold a voter until it completes)
    joining: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    configs: Mapping[str, str] = field(default_factory=dict)  # what the topic set (canonical)

    def hosts(self, partition: int) -> tuple[int, ...]:
        """The nodes with a replica of `partition`: its assignment, then, while a
        reassignment is in progress, the nodes its targets added."""
        return self.assignment[partition] + tuple(self.joining.get(partition, ()))

    def hosted_by(self, node_id: int) -> list[int]:
        """The partitions with a replica on `node_id` (reassignment targets included)."""
        return [p for p in range(self.partitions) if node_id in self.hosts(p)]


# -- the image ------------------------------------------------------------------------------


class MetadataImage:
    """The cluster's topics as the committed commands up to `applied_offset` describe them."""

    def __init__(self, bootstrap: Mapping[int, NodeAddress] | None = None) -> None:
        """`bootstrap`: the nodes of the settings' `peers` (this node alone without)."""
        # the cluster's members: the bootstrap nodes, as add_node/remove_node changed them
        self.nodes: dict[int, NodeAddress] = dict(bootstrap or {})
        self.topics: dict[str, TopicMeta] = {}
        self.acls: set[AclEntry] = set()
        self.quotas: dict[str, QuotaEntry] = {}  # principal -> its quotas (quotas.py)
        self.producer_names: dict[str, tuple[int, int]] = {}  # name -> (id, epoch)
        self.producers_made: dict[int, tuple[int, int]] = {}  # offset -> (id, epoch), recent
        self.applied_offset = 0  # the next __cluster offset to apply
        # Indexes kept by `apply`, so that no question costs a pass over every topic:
        self.hosted: Counter[int] = Counter()  # node -> partitions with a replica there
        self.moving: set[tuple[str, int]] = set()  # (topic, partition) with a target
        self.topics_version = 0  # one more each time a command changes a topic (caches)
        self._watchers: list[set[str]] = []  # change sets (`watch`)

    # -- validation (before proposing) -------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        nodes: Sequence[int],
        format: str = RAW,
        timestamp_type: str = CREATE_TIME,
        racks: Mapping[int, str] | None = None,
        configs: Mapping[str, str] | None = None,
    ) -> CreateTopic:
        """The command that creates `name`, or the typed error a client should get
        (`racks`: see `assign`; `configs`: `topic_configs`, message.timestamp.type, when
        given, sets `timestamp_type`)."""
        validate_topic_name(name)
        kept, kafka_type = split_timestamp_type(checked(configs or {}))
        timestamp_type = kafka_type or timestamp_type
        if name == METADATA_TOPIC:
            raise InvalidArgumentError(f"{METADATA_TOPIC} is reserved", topic=name)
        if not 1 <= partitions <= PARTITIONS_MAX:
            raise InvalidArgumentError(
                f"partitions must be in [1, {PARTITIONS_MAX}], got {partitions}",
                partitions=partitions,
            )
        if not 1 <= replication_factor <= len(nodes):
            raise InvalidArgumentError(
                f"replication_factor {replication_factor} must be in [1, {len(nodes)}] "
                f"(the cluster has {len(nodes)} node(s))",
                replication_factor=replication_factor,
            )
        if format not in FORMATS or timestamp_type not in TIMESTAMP_TYPES:
            raise InvalidArgumentError(
                f"format must be one of {list(FORMATS)} and timestamp_type one of "
                f"{list(TIMESTAMP_TYPES)}"
            )
        if name in self.topics:
            raise TopicExistsError(f"topic {name!r} already exists", topic=name)
        assignment = assign(name, partitions, replication_factor, nodes, racks)
        return CreateTopic(name, partitions, assignment, format, timestamp_type, kept)

    def alter_topic_configs(
        self, name: str, set_: Mapping[str, str], delete: Sequence[str]
    ) -> AlterTopicConfigs:
        """The command that sets configs `set_` of `name` and resets `delete` to their
        defaults, or INVALID_ARGUMENT / UNKNOWN_TOPIC."""
        meta = self.topic(name)
        if name == METADATA_TOPIC:
            raise InvalidArgumentError(f"{METADATA_TOPIC} has no configs", topic=name)
        return AlterTopicConfigs(name, meta.topic_id, *checked_alter(set_, delete))

    def create_partitions(
        self,
        name: str,
        partitions: int,
        nodes: Sequence[int],
        racks: Mapping[int, str] | None = None,
    ) -> CreatePartitions:
        """The command that grows `name` to `partitions` (`partition_growth.check`), or
        the typed error a client should get (UNKNOWN_TOPIC, INVALID_ARGUMENT)."""
        meta = self.topic(name)
        if name == METADATA_TOPIC:
            raise InvalidArgumentError(f"{METADATA_TOPIC} keeps one partition", topic=name)
        return partition_growth.check(meta, partitions, nodes, racks)

    def delete_topic(self, name: str) -> DeleteTopic:
        self.topic(name)
        return DeleteTopic(name)

    def add_acl(self, acl: AclEntry) -> AddAcl:
        return AddAcl(acl)  # adding one that exists changes nothing: idempotent

    def remove_acl(self, acl: AclEntry) -> RemoveAcl:
        if acl not in self.acls:
            raise NotFoundError("no such ACL")
        return RemoveAcl(acl)

    def init_producer(self, name: str) -> InitProducer:
        if len(name.encode()) > PRODUCER_NAME_BYTES_MAX:
            raise InvalidArgumentError(
                f"a producer name has at most {PRODUCER_NAME_BYTES_MAX} bytes",
                name=name[:64],
            )
        known = self.producer_names.get(name) if name else None
        if name and known is None and len(self.producer_names) >= PRODUCER_NAMES_MAX:
            raise LimitExceededError(
                f"the cluster holds {PRODUCER_NAMES_MAX} named producers already",
                limit="producer_names_max",
                limit_value=PRODUCER_NAMES_MAX,
            )
        if known is not None and known[1] >= PRODUCER_EPOCH_MAX:
            raise InvalidArgumentError(f"producer {name!r} has used every epoch")
        return InitProducer(name)

    def reassign_partition(
        self, name: str, partition: int, replicas: Sequence[int], nodes: Sequence[int]
    ) -> ReassignPartition:
        """The command that moves `name`/`partition` to `replicas` (preferred leader first),
        or the typed error a client should get. `nodes`: the cluster's node ids. Replicas
        equal to the current assignment cancel a reassignment in progress."""
        meta = self.topic(name)
        if name == METADATA_TOPIC:
            raise InvalidArgumentError(f"{METADATA_TOPIC} is not reassigned", topic=name)
        if not 0 <= partition < meta.partitions:
            raise PartitionNotFoundError(
                f"partition {partition} does not exist (the topic has {meta.partitions})",
                partition=partition,
                partitions=meta.partitions,
            )
        target = tuple(replicas)
        if not target or len(set(target)) != len(target):
            raise InvalidArgumentError(
                f"replicas {list(target)[:16]} must be one or more distinct node ids"
            )
        unknown = sorted(set(target) - set(nodes))
        if unknown:
            raise InvalidArgumentError(
                f"replicas {unknown[:16]} are not nodes of the cluster (nodes {sorted(nodes)})"
            )
        current = meta.targets.get(partition)
        cancel = target == meta.assignment[partition]
        if current is not None and not cancel and current != target:
            raise ReassignmentInProgressError(
                f"{name}/{partition} is being reassigned to {list(current)}; wait for it, or "
                f"cancel it by reassigning to {list(meta.assignment[partition])}",
                topic=name,
                partition=partition,
            )
        if current is None and cancel:
            raise InvalidArgumentError(
                f"{name}/{partition} already has replicas {list(target)}", topic=name
            )
        return ReassignPartition(name, meta.topic_id, partition, target)

    def complete_reassignment(
        self, name: str, topic_id: int, partition: int, replicas: Sequence[int]
    ) -> CompleteReassignment:
        """The command that ends the reassignment of `name`/`partition` to `replicas`
        (its leader found the membership equal to them), or FAILED_PRECONDITION when that is
        not the reassignment in force (completed already, cancelled, another incarnation)."""
        meta = self.topics.get(name)
        target = tuple(replicas)
        if meta is None or meta.topic_id != topic_id or meta.targets.get(partition) != target:
            raise ReassignmentInProgressError(
                f"{name}/{partition} is not being reassigned to {list(target)[:16]}",
                topic=name,
                partition=partition,
            )
        return CompleteReassignment(name, topic_id, partition, target)

    def add_node(self, node_id: int, address: str, peer_address: str = "") -> AddNode:
        """The command that makes `node_id` a member reached at `address` (`peer_address`:
        its peer listener, "" none), or the typed error a client should get."""
        if not 1 <= node_id <= NODE_ID_MAX:
            raise InvalidArgumentError(f"node_id must be in [1, {NODE_ID_MAX}], got {node_id}")
        if not is_address(address) or not (peer_address == "" or is_address(peer_address)):
            raise InvalidArgumentError(
                f"address and peer_address must be host:port (at most {ADDRESS_BYTES_MAX} "
                f"bytes), got {address[:64]!r}, {peer_address[:64]!r}"
            )
        wanted = NodeAddress(address, peer_address)
        known = self.nodes.get(node_id)
        if known is not None and known != wanted:
            raise NodeExistsError(
                f"node {node_id} is a member already, at {known.address}"
                + (f" (peer {known.peer_address})" if known.peer_address else ""),
                node_id=node_id,
            )
        taken = {
            where: other
            for other, member in self.nodes.items()
            if other != node_id
            for where in {member.address, member.dial}
        }
        clash = taken.get(address) or taken.get(wanted.dial)
        if clash is not None:
            raise InvalidArgumentError(
                f"node {clash} is reached at {wanted.dial if wanted.dial in taken else address} "
                "already: every member needs its own addresses",
                node_id=node_id,
            )
        if known is None and len(self.nodes) >= NODES_MAX:
            raise LimitExceededError(
                f"the cluster has {NODES_MAX} nodes already",
                limit="nodes_max",
                limit_value=NODES_MAX,
            )
        return AddNode(node_id, address, peer_address)

    def remove_node(self, node_id: int) -> RemoveNode:
        """The command that ends `node_id`'s membership, or the typed error a client should
        get: UNKNOWN_NODE, NODE_NOT_EMPTY while a partition has a replica there."""
        if node_id not in self.nodes:
            raise UnknownNodeError(
                f"node {node_id} is not a member (members {sorted(self.nodes)[:32]})",
                node_id=node_id,
            )
        if len(self.nodes) == 1:
            raise InvalidArgumentError(f"node {node_id} is the cluster's last member")
        hosted = self.replicas_on(node_id)
        if hosted:
            raise NodeNotEmptyError(
                f"node {node_id} still hosts {hosted} replica(s): move them away first "
                f"(replog node decommission {node_id}), then remove it",
                node_id=node_id,
                replicas=hosted,
            )
        return RemoveNode(node_id)

    def replicas_on(self, node_id: int) -> int:
        """How many partitions have a replica on `node_id` (reassignment targets included)."""
        return self.hosted[node_id]

    def allowed(self, principal: str, operation: str, resource_type: str, name: str = "") -> bool:
        """Whether an ACL grants `principal` `operation` on the resource."""
        return any(a.grants(principal, operation, resource_type, name) for a in self.acls)

    def topic(self, name: str) -> TopicMeta:
        meta = self.topics.get(name)
        if meta is None:
            validate_topic_name(name)
            raise TopicNotFoundError(f"topic {name!r} does not exist", topic=name)
        return meta

    # -- applying (after commit) -------------------------------------------------------------

    def watch(self) -> set[str]:
        """A change set: every later `apply` that changes a topic adds its name to it; its
        owner (the reconciler) takes names out as it acts on them. A set, so that a topic
        changed many times before its owner looks is acted on once."""
        changed: set[str] = set()
        self._watchers.append(changed)
        return changed

    def apply(self, offset: int, command: Command | None) -> str | None:
        """Apply the committed record at `offset` (None: a control record); returns the
        name of the topic it changed (None: none). Total: a command that lost a race (a
        create of a name that exists, a delete of one that does not, both possible across
        a leader change) changes nothing. Costs the partitions of the topic it names, never
        a pass over every topic."""
        name = _topic_of(command)
        before = self.topics.get(name) if name is not None else None
        self._apply(offset, command)
        after = self.topics.get(name) if name is not None else None
        if name is None or after is before:
            return None
        self._reindex(before, -1)
        self._reindex(after, 1)
        self.topics_version += 1
        for changed in self._watchers:
            changed.add(name)
        return name

    def _reindex(self, meta: TopicMeta | None, sign: int) -> None:
        """Take a topic's replicas and targets out of the indexes (-1) or put them in (1)."""
        if meta is None:
            return
        for p in range(meta.partitions):
            for node in meta.hosts(p):
                self.hosted[node] += sign
                if not self.hosted[node]:
                    del self.hosted[node]
        for p in meta.targets:
            if sign > 0:
                self.moving.add((meta.name, p))
            else:
                self.moving.discard((meta.name, p))

    def _apply(self, offset: int, command: Command | None) -> None:
        assert offset >= self.applied_offset, (offset, self.applied_offset)
        if isinstance(command, CreateTopic):
            if command.name not in self.topics:
                self.topics[command.name] = TopicMeta(
                    command.name,
                    command.partitions,
                    command.assignment,
                    offset,
                    command.format,
                    command.timestamp_type,
                    configs=command.configs,
                )
        elif isinstance(command, DeleteTopic):
            self.topics.pop(command.name, None)
        elif isinstance(command, AlterTopicConfigs):
            meta = self.topics.get(command.name)
            if meta is not None and meta.topic_id == command.topic_id:  # (else: it went)
                new = altered(meta.configs, meta.timestamp_type, command.set, command.delete)
                self.topics[meta.name] = replace(meta, configs=new[0], timestamp_type=new[1])
        elif isinstance(command, AddAcl):
            self.acls.add(command.acl)
        elif isinstance(command, RemoveAcl):
            self.acls.discard(command.acl)
        elif isinstance(command, QuotaEntry):
            apply_quota(self.quotas, command)
        elif isinstance(command, InitProducer):
            self._apply_init_producer(offset, command.name)
        elif isinstance(command, ReassignPartition | CompleteReassignment):
            self._apply_reassignment(command)
        elif isinstance(command, CreatePartitions):
            grown = self.topics.get(command.name)
            assignment = partition_growth.grown(grown, command)
            if grown is not None and assignment is not None:
                self.topics[command.name] = replace(
                    grown, partitions=command.partitions, assignment=assignment
                )
        elif isinstance(command, AddNode):
            self.nodes[command.node_id] = NodeAddress(command.address, command.peer_address)
        elif isinstance(command, RemoveNode) and len(self.nodes) > 1:
            # (validated; of two removals racing for the last two members, one stays)
            self.nodes.pop(command.node_id, None)
        self.applied_offset = offset + 1

    def _apply_reassignment(self, command: ReassignPartition | CompleteReassignment) -> None:
        meta = self.topics.get(command.name)
        if meta is None or meta.topic_id != command.topic_id:
            return  # the topic went (or is another incarnation) before this committed
        if not 0 <= command.partition < meta.partitions:
            return
        p = command.partition
        targets, joining = dict(meta.targets), dict(meta.joining)
        assignment = meta.assignment
        if isinstance(command, ReassignPartition):
            targets[p] = command.replicas
            before = joining.get(p, ())
            added = (n for n in command.replicas if n not in assignment[p] and n not in before)
            joining[p] = (*before, *added)
        elif targets.get(p) == command.replicas:
            del targets[p]
            joining.pop(p, None)
            assignment = tuple(
                command.replicas if p == command.partition else replicas
                for p, replicas in enumerate(assignment)
            )
        else:
            return  # completes a target no longer in force
        self.topics[command.name] = replace(
            meta, assignment=assignment, targets=targets, joining=joining
        )

    def _apply_init_producer(self, offset: int, name: str) -> None:
        known = self.producer_names.get(name) if name else None
        if known is None:
            made = (offset + 1, 0)
            if name and len(self.producer_names) < PRODUCER_NAMES_MAX:
                self.producer_names[name] = made
        elif known[1] < PRODUCER_EPOCH_MAX:
            made = self.producer_names[name] = (known[0], known[1] + 1)
        else:
            made = known
        # The proposer reads its answer here once the command applied; only the newest
        # answers are kept (a proposer waits for its own offset, then reads at once).
        self.producers_made[offset] = made
        while len(self.producers_made) > 1024:
            del self.producers_made[next(iter(self.producers_made))]


def _topic_of(command: Command | None) -> str | None:
    """The topic a command may change (None: it changes none)."""
    if isinstance(
        command,
        CreateTopic
        | DeleteTopic
        | ReassignPartition
        | CompleteReassignment
        | CreatePartitions
        | AlterTopicConfigs,
    ):
        return command.name
    return None
