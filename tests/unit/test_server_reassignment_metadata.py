"""Reassignment commands in the cluster metadata: validated before they are proposed,
applied without failing, round-tripped as versioned JSON."""

from __future__ import annotations

import json

import pytest

from replog.errors import (
    InvalidArgumentError,
    PartitionNotFoundError,
    ReassignmentInProgressError,
    TopicNotFoundError,
)
from replog.server.meta.command_codec import decode, encode
from replog.server.meta.metadata import (
    CompleteReassignment,
    CreateTopic,
    DeleteTopic,
    MetadataImage,
    ReassignPartition,
    UnknownCommandError,
)

NODES = [1, 2, 3, 4]


def image_with_orders() -> MetadataImage:
    image = MetadataImage()
    image.apply(7, CreateTopic("orders", 2, ((1, 2, 3), (2, 3, 1))))
    return image


def test_reassignment_commands_round_trip_as_versioned_json() -> None:
    for command in (
        ReassignPartition("orders", 7, 1, (2, 3, 4)),
        CompleteReassignment("orders", 7, 1, (2, 3, 4)),
    ):
        body = json.loads(encode(command))
        assert body["version"] == 1
        assert body["replicas"] == [2, 3, 4]
        assert decode(encode(command)) == command


@pytest.mark.parametrize(
    "value",
    [
        b'{"kind": "reassign_partition", "version": 1, "name": "a", "topic_id": 1,'
        b' "partition": 0, "replicas": []}',
        b'{"kind": "reassign_partition", "version": 1, "name": "a", "topic_id": 1,'
        b' "partition": 0, "replicas": [2, 2]}',
        b'{"kind": "complete_reassignment", "version": 1, "name": "a", "topic_id": 1,'
        b' "partition": -1, "replicas": [2]}',
        b'{"kind": "reassign_partition", "version": 2, "name": "a", "topic_id": 1,'
        b' "partition": 0, "replicas": [2]}',
    ],
)
def test_a_malformed_or_newer_reassignment_command_stops_the_node(value: bytes) -> None:
    with pytest.raises(UnknownCommandError):
        decode(value)


def test_a_reassignment_is_validated_before_it_is_proposed() -> None:
    image = image_with_orders()
    with pytest.raises(TopicNotFoundError):
        image.reassign_partition("nope", 0, [1, 2, 3], NODES)
    with pytest.raises(PartitionNotFoundError):
        image.reassign_partition("orders", 2, [1, 2, 3], NODES)
    with pytest.raises(InvalidArgumentError, match="distinct"):
        image.reassign_partition("orders", 0, [2, 2, 4], NODES)
    with pytest.raises(InvalidArgumentError, match="distinct"):
        image.reassign_partition("orders", 0, [], NODES)
    with pytest.raises(InvalidArgumentError, match="not nodes of the cluster"):
        image.reassign_partition("orders", 0, [2, 3, 9], NODES)
    with pytest.raises(InvalidArgumentError, match="already has"):
        image.reassign_partition("orders", 0, [1, 2, 3], NODES)
    assert image.reassign_partition("orders", 0, [2, 3, 4], NODES) == ReassignPartition(
        "orders", 7, 0, (2, 3, 4)
    )


def test_a_partition_being_reassigned_takes_only_the_same_target_or_a_cancel() -> None:
    image = image_with_orders()
    image.apply(8, image.reassign_partition("orders", 0, [2, 3, 4], NODES))
    with pytest.raises(ReassignmentInProgressError):
        image.reassign_partition("orders", 0, [3, 4, 1], NODES)
    assert image.reassign_partition("orders", 0, [2, 3, 4], NODES).replicas == (2, 3, 4)
    cancel = image.reassign_partition("orders", 0, [1, 2, 3], NODES)
    image.apply(9, cancel)
    meta = image.topics["orders"]
    assert meta.targets == {0: (1, 2, 3)}
    # node 4 may hold a voter of the partition until the leader removed it: still a host
    assert meta.hosts(0) == (1, 2, 3, 4)
    image.apply(10, image.complete_reassignment("orders", 7, 0, [1, 2, 3]))
    meta = image.topics["orders"]
    assert (meta.assignment[0], meta.targets, meta.hosted_by(4)) == ((1, 2, 3), {}, [])


def test_while_reassigned_a_partition_is_hosted_by_both_sets_then_by_the_target() -> None:
    image = image_with_orders()
    image.apply(8, ReassignPartition("orders", 7, 0, (2, 3, 4)))
    meta = image.topics["orders"]
    assert meta.assignment[0] == (1, 2, 3)
    assert meta.hosts(0) == (1, 2, 3, 4)
    assert meta.hosted_by(4) == [0]
    assert meta.hosted_by(1) == [0, 1]
    with pytest.raises(ReassignmentInProgressError):
        image.complete_reassignment("orders", 7, 0, [3, 4, 1])
    image.apply(9, image.complete_reassignment("orders", 7, 0, [2, 3, 4]))
    meta = image.topics["orders"]
    assert meta.assignment == ((2, 3, 4), (2, 3, 1))
    assert meta.targets == {}
    assert meta.hosted_by(1) == [1]
    assert meta.hosted_by(4) == [0]


def test_applying_a_reassignment_that_lost_a_race_changes_nothing() -> None:
    image = image_with_orders()
    image.apply(8, CompleteReassignment("orders", 7, 0, (2, 3, 4)))  # nothing in force
    image.apply(9, ReassignPartition("orders", 5, 0, (2, 3, 4)))  # another incarnation
    image.apply(10, ReassignPartition("gone", 7, 0, (2, 3, 4)))
    assert image.topics["orders"].assignment[0] == (1, 2, 3)
    assert image.topics["orders"].targets == {}
    image.apply(11, ReassignPartition("orders", 7, 0, (2, 3, 4)))
    image.apply(12, DeleteTopic("orders"))
    image.apply(13, CompleteReassignment("orders", 7, 0, (2, 3, 4)))
    assert "orders" not in image.topics
    assert image.applied_offset == 14
