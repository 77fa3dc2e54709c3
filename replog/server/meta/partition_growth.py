"""More partitions for a topic (`CreatePartitions`, grow only): the command, its checks
before it is proposed, and its pure application to a `TopicMeta`.

Record value, JSON (UTF-8), version 1::

    {"kind": "create_partitions", "version": 1, "name": "orders", "topic_id": 17,
     "partitions": 5, "assignment": [[2, 3], [3, 1]]}

`partitions` is the topic's new count; `assignment` lists the replicas of the new
partitions only (partitions old count .. `partitions` - 1), placed by the code that places
a new topic (`placement.assign` for the new count, its tail), with the replication factor
of partition 0. Applying it to a topic that is gone, another incarnation (`topic_id`), or
whose count is no longer `partitions - len(assignment)` (another grow won a race) changes
nothing. A node of an earlier release stops at the command (an unknown kind): upgrade
every node first.

Existing records stay where they are; a keyed record's partition (murmur2(key) % count,
as in Kafka) changes with the count, so later records of a key may land elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from replog.errors import InvalidArgumentError
from replog.server.meta.placement import assign
from replog.storage.names import PARTITIONS_MAX


class _Topic(Protocol):
    """What this module reads of a `metadata.TopicMeta` (a frozen dataclass)."""

    @property
    def name(self) -> str: ...
    @property
    def topic_id(self) -> int: ...
    @property
    def partitions(self) -> int: ...
    @property
    def assignment(self) -> tuple[tuple[int, ...], ...]: ...


@dataclass(frozen=True, slots=True)
class CreatePartitions:
    name: str
    topic_id: int
    partitions: int  # the new count
    assignment: tuple[tuple[int, ...], ...]  # the new partitions' replicas, in order

    KIND = "create_partitions"


def check(
    meta: _Topic,
    partitions: int,
    nodes: Sequence[int],
    racks: Mapping[int, str] | None = None,
) -> CreatePartitions:
    """The command that grows topic `meta` to `partitions`, or INVALID_ARGUMENT (not more
    than the current count, above PARTITIONS_MAX, or too few nodes for its replication
    factor). `nodes`: the cluster's node ids."""
    if not meta.partitions < partitions <= PARTITIONS_MAX:
        raise InvalidArgumentError(
            f"topic {meta.name!r} has {meta.partitions} partition(s): the new count must be "
            f"greater, and at most {PARTITIONS_MAX}, got {partitions}",
            topic=meta.name,
            partitions=partitions,
        )
    rf = len(meta.assignment[0])
    if rf > len(nodes):
        raise InvalidArgumentError(
            f"replication factor {rf} exceeds the {len(nodes)} node(s) of the cluster",
            topic=meta.name,
        )
    placed = assign(meta.name, partitions, rf, nodes, racks)
    return CreatePartitions(meta.name, meta.topic_id, partitions, placed[meta.partitions :])


def grown(meta: _Topic | None, command: CreatePartitions) -> tuple[tuple[int, ...], ...] | None:
    """The assignment of `meta` grown by `command` (None: nothing changes; the module)."""
    if meta is None or meta.topic_id != command.topic_id:
        return None
    if meta.partitions + len(command.assignment) != command.partitions:
        return None
    return meta.assignment + command.assignment


def encode_fields(command: CreatePartitions, body: dict[str, Any]) -> None:
    body["topic_id"] = command.topic_id
    body["partitions"] = command.partitions
    body["assignment"] = [list(r) for r in command.assignment]


def decode_body(body: Mapping[str, Any]) -> CreatePartitions:
    """The command of a record's body; ValueError / TypeError / KeyError when malformed."""
    name, topic_id, partitions = body["name"], body["topic_id"], body["partitions"]
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {name!r}")
    for value in (topic_id, partitions):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"expected an integer, got {value!r}")
    assignment = tuple(tuple(_node(r) for r in replicas) for replicas in body["assignment"])
    if not 1 <= len(assignment) < partitions <= PARTITIONS_MAX:
        raise ValueError(f"partitions {partitions} with {len(assignment)} new out of range")
    for replicas in assignment:
        if not replicas or len(set(replicas)) != len(replicas):
            raise ValueError(f"replicas {list(replicas)} must be distinct and not empty")
    return CreatePartitions(name, topic_id, partitions, assignment)


def _node(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError(f"expected a node id, got {value!r}")
    return value
