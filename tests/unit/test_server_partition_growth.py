"""CreatePartitions in the cluster metadata: validated before it is proposed (grow only),
placed as a create places, applied without failing, round-tripped as versioned JSON."""

from __future__ import annotations

import json

import pytest

from replog.errors import InvalidArgumentError, TopicNotFoundError
from replog.server.meta.command_codec import decode, encode
from replog.server.meta.metadata import (
    METADATA_TOPIC,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    MetadataImage,
    UnknownCommandError,
    assign,
)

NODES = [1, 2, 3]


def image_with_orders() -> MetadataImage:
    image = MetadataImage()
    image.apply(7, image.create_topic("orders", 2, 2, NODES))
    return image


def test_grow_places_the_new_partitions_as_a_create_of_the_new_count_would() -> None:
    image = image_with_orders()
    before = image.topics["orders"]
    changes = image.watch()
    command = image.create_partitions("orders", 5, NODES)
    assert command == CreatePartitions("orders", 7, 5, assign("orders", 5, 2, NODES)[2:])
    assert image.apply(8, command) == "orders"
    meta = image.topics["orders"]
    assert meta.partitions == 5
    assert meta.assignment[:2] == before.assignment  # the old partitions stay where they are
    assert meta.assignment == assign("orders", 5, 2, NODES)
    assert meta.topic_id == 7
    assert changes == {"orders"}  # the reconciler looks at the topic again
    # the index of replicas per node counts the new ones
    assert sum(image.hosted.values()) == 5 * 2


@pytest.mark.parametrize("count", [0, 1, 2, 100_000_000])
def test_shrink_equal_or_too_many_are_refused_and_change_nothing(count: int) -> None:
    image = image_with_orders()
    with pytest.raises(InvalidArgumentError):
        image.create_partitions("orders", count, NODES)
    assert image.topics["orders"].partitions == 2


def test_unknown_topic_and_the_metadata_topic_are_refused() -> None:
    image = image_with_orders()
    with pytest.raises(TopicNotFoundError):
        image.create_partitions("nope", 3, NODES)
    image.apply(8, CreateTopic(METADATA_TOPIC, 1, ((1,),)))
    with pytest.raises(InvalidArgumentError):
        image.create_partitions(METADATA_TOPIC, 2, NODES)


def test_a_replication_factor_above_the_nodes_left_is_refused() -> None:
    image = image_with_orders()
    with pytest.raises(InvalidArgumentError):
        image.create_partitions("orders", 3, [1])


def test_apply_is_total_a_lost_race_or_another_incarnation_changes_nothing() -> None:
    image = image_with_orders()
    first = image.create_partitions("orders", 3, NODES)
    second = image.create_partitions("orders", 4, NODES)  # built on the same count (2)
    image.apply(8, first)
    assert image.apply(9, second) is None  # its base count is gone: nothing changes
    assert image.topics["orders"].partitions == 3
    image.apply(10, DeleteTopic("orders"))
    assert image.apply(11, second) is None  # the topic is gone
    image.apply(12, CreateTopic("orders", 2, ((1, 2), (2, 3))))
    assert image.apply(13, second) is None  # another incarnation (topic_id 12, not 7)
    assert image.topics["orders"].partitions == 2


def test_round_trips_as_versioned_json() -> None:
    command = CreatePartitions("orders", 7, 4, ((2, 3), (3, 1)))
    body = json.loads(encode(command))
    assert body == {
        "kind": "create_partitions",
        "version": 1,
        "name": "orders",
        "topic_id": 7,
        "partitions": 4,
        "assignment": [[2, 3], [3, 1]],
    }
    assert decode(encode(command)) == command


@pytest.mark.parametrize(
    "value",
    [
        b'{"kind": "create_partitions", "version": 1, "name": "a", "topic_id": 1,'
        b' "partitions": 2, "assignment": []}',
        b'{"kind": "create_partitions", "version": 1, "name": "a", "topic_id": 1,'
        b' "partitions": 2, "assignment": [[1, 1]]}',
        b'{"kind": "create_partitions", "version": 1, "name": "a", "topic_id": 1,'
        b' "partitions": 1, "assignment": [[1]]}',
        b'{"kind": "create_partitions", "version": 1, "name": "a", "topic_id": true,'
        b' "partitions": 2, "assignment": [[1]]}',
        b'{"kind": "create_partitions", "version": 2, "name": "a", "topic_id": 1,'
        b' "partitions": 2, "assignment": [[1]]}',
    ],
)
def test_a_malformed_or_newer_command_stops_the_node(value: bytes) -> None:
    with pytest.raises(UnknownCommandError):
        decode(value)
