"""The `__cluster` log's record format: each command as one JSON object (module docstring of
`metadata` for the kinds and versions), and back. `decode` is total: anything that is not a
command this node knows raises `UnknownCommandError` (the apply stops the node rather than
skip a record it cannot read), never another exception.
"""

from __future__ import annotations

import json
from typing import Any

from replog.errors import InvalidArgumentError
from replog.server.meta import partition_growth
from replog.server.meta.metadata import (
    COMMAND_VERSION,
    CREATE_TIME,
    FORMATS,
    KNOWN_VERSIONS,
    NODE_ID_MAX,
    RAW,
    TIMESTAMP_TYPES,
    AclEntry,
    AddAcl,
    AddNode,
    AlterTopicConfigs,
    Command,
    CompleteReassignment,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    InitProducer,
    ReassignPartition,
    RemoveAcl,
    RemoveNode,
    UnknownCommandError,
    is_address,
)
from replog.server.meta.quotas import QuotaEntry, decode_entry
from replog.server.meta.topic_configs import checked, checked_alter
from replog.storage.names import PARTITIONS_MAX


def encode(command: Command) -> bytes:
    body: dict[str, Any] = {"kind": command.KIND, "version": COMMAND_VERSION}
    if isinstance(command, AddAcl | RemoveAcl):
        body["acl"] = command.acl.as_dict()
    elif isinstance(command, QuotaEntry):
        body["quota"] = command.as_dict()
    elif isinstance(command, AddNode | RemoveNode):
        body["node_id"] = command.node_id
        if isinstance(command, AddNode):
            body["address"] = command.address
            body["peer_address"] = command.peer_address
    else:
        body["name"] = command.name
    if isinstance(command, CreatePartitions):
        partition_growth.encode_fields(command, body)
    if isinstance(command, ReassignPartition | CompleteReassignment):
        body["topic_id"] = command.topic_id
        body["partition"] = command.partition
        body["replicas"] = list(command.replicas)
    if isinstance(command, CreateTopic):
        body["partitions"] = command.partitions
        body["assignment"] = [list(r) for r in command.assignment]
        if (command.format, command.timestamp_type) != (RAW, CREATE_TIME):
            body["version"] = 2
            body["format"] = command.format
            body["timestamp_type"] = command.timestamp_type
        if command.configs:
            body.update(version=3, configs=dict(command.configs))
    if isinstance(command, AlterTopicConfigs):
        body.update(topic_id=command.topic_id, set=dict(command.set), delete=command.delete)
    return json.dumps(body, sort_keys=True).encode()


def json_object(value: bytes, error: type[Exception], what: str) -> dict[str, Any]:
    """The JSON object a log record's value holds (a metadata command, a group record), or
    `error` naming `what` it should have been."""
    try:
        body = json.loads(value)
    except (UnicodeDecodeError, ValueError) as exc:
        raise error(f"not a JSON {what}: {exc}") from None
    if not isinstance(body, dict):
        raise error(f"a {what} must be a JSON object")
    return body


def decode(value: bytes) -> Command:
    """The command a record holds; `UnknownCommandError` for anything else."""
    body = json_object(value, UnknownCommandError, "metadata command")
    version = body.get("version", 0)
    kind = body.get("kind") if version else body.get("op")
    if version in (2, 3) and kind != CreateTopic.KIND:
        version = f"{version} of {kind!r}"  # only create_topic has a version 2 or 3
    if version not in KNOWN_VERSIONS or isinstance(version, bool):
        raise UnknownCommandError(
            f"metadata command version {version!r} (kind {kind!r}) is newer than this node "
            f"understands (versions {list(KNOWN_VERSIONS)}): upgrade this node"
        )
    try:
        if kind == CreateTopic.KIND:
            return _shaped(
                CreateTopic(
                    _name(body["name"]),
                    _int(body["partitions"]),
                    tuple(tuple(_int(r) for r in reps) for reps in body["assignment"]),
                    _choice(body.get("format", RAW), FORMATS),
                    _choice(body.get("timestamp_type", CREATE_TIME), TIMESTAMP_TYPES),
                    checked(body.get("configs", {})) if version == 3 else {},
                )
            )
        if kind == AlterTopicConfigs.KIND and version == 1:
            altered_ = checked_alter(body["set"], body["delete"])
            return AlterTopicConfigs(_name(body["name"]), _int(body["topic_id"]), *altered_)
        if kind == DeleteTopic.KIND:
            return DeleteTopic(_name(body["name"]))
        if kind == CreatePartitions.KIND and version >= 1:
            return partition_growth.decode_body(body)
        if kind == InitProducer.KIND and version >= 1:
            return InitProducer(_name(body["name"]))
        if kind in (ReassignPartition.KIND, CompleteReassignment.KIND) and version >= 1:
            cls = ReassignPartition if kind == ReassignPartition.KIND else CompleteReassignment
            replicas = tuple(_int(r) for r in body["replicas"])
            if not replicas or len(set(replicas)) != len(replicas) or min(replicas) < 0:
                raise ValueError(f"replicas {list(replicas)} must be distinct and not empty")
            partition = _int(body["partition"])
            if not 0 <= partition < PARTITIONS_MAX:
                raise ValueError(f"partition {partition} out of range")
            return cls(_name(body["name"]), _int(body["topic_id"]), partition, replicas)
        if kind in (AddNode.KIND, RemoveNode.KIND) and version >= 1:
            node_id = _int(body["node_id"])
            if not 1 <= node_id <= NODE_ID_MAX:
                raise ValueError(f"node_id {node_id} out of range")
            if kind == RemoveNode.KIND:
                return RemoveNode(node_id)
            address, peer_address = _name(body["address"]), _name(body["peer_address"])
            if not is_address(address) or not (peer_address == "" or is_address(peer_address)):
                raise ValueError(f"addresses {address!r}, {peer_address!r} are not host:port")
            return AddNode(node_id, address, peer_address)
        if kind in (AddAcl.KIND, RemoveAcl.KIND) and version >= 1:
            acl = _acl(body["acl"])
            return AddAcl(acl) if kind == AddAcl.KIND else RemoveAcl(acl)
        if kind == QuotaEntry.KIND and version == 1:
            return decode_entry(body["quota"])
    except (KeyError, TypeError, ValueError, AttributeError, InvalidArgumentError) as exc:
        raise UnknownCommandError(f"malformed {kind!r} metadata command: {exc!r}") from None
    raise UnknownCommandError(
        f"unknown metadata command kind {kind!r} (version {version}): upgrade this node"
    )


def _name(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"name must be a string, got {value!r}")
    return value


def _acl(value: object) -> AclEntry:
    if not isinstance(value, dict):
        raise TypeError("acl must be an object")
    prefix = value["prefix"]
    if not isinstance(prefix, bool):
        raise TypeError("acl prefix must be a boolean")
    fields = [value[k] for k in ("principal", "resource_type", "resource_name", "operation")]
    if not all(isinstance(f, str) for f in fields):
        raise TypeError("acl fields must be strings")
    principal, resource_type, resource_name, operation = fields
    return AclEntry.checked(principal, resource_type, resource_name, prefix, operation)


def _choice(value: object, choices: tuple[str, ...]) -> str:
    if value not in choices or not isinstance(value, str):
        raise ValueError(f"{value!r} is not one of {list(choices)}")
    return value


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _shaped(command: CreateTopic) -> CreateTopic:
    """Structural checks that make applying `command` total."""
    if not 1 <= command.partitions <= PARTITIONS_MAX:
        raise ValueError(f"partitions {command.partitions} out of range")
    if len(command.assignment) != command.partitions:
        raise ValueError("the assignment must list every partition")
    for replicas in command.assignment:
        if not replicas or len(set(replicas)) != len(replicas):
            raise ValueError(f"replicas {list(replicas)} must be distinct and not empty")
    return command
