"""A topic's format and timestamp type in the cluster metadata (`server/meta/metadata.py`):
raw topics keep the version-1 command every release reads; others need version 2."""

from __future__ import annotations

import json

import pytest

from replog.errors import InvalidArgumentError
from replog.server.meta.command_codec import decode, encode
from replog.server.meta.metadata import (
    CreateTopic,
    MetadataImage,
    UnknownCommandError,
)


def test_a_raw_topic_is_written_as_the_version_1_command_older_nodes_read() -> None:
    body = json.loads(encode(CreateTopic("orders", 1, ((1,),))))
    assert body["version"] == 1
    assert "format" not in body and "timestamp_type" not in body


def test_an_envelope_topic_is_a_version_2_command_that_round_trips() -> None:
    command = CreateTopic("orders", 2, ((1, 2), (2, 1)), "envelope", "log_append_time")
    body = json.loads(encode(command))
    assert (body["version"], body["format"], body["timestamp_type"]) == (
        2,
        "envelope",
        "log_append_time",
    )
    assert decode(encode(command)) == command


def test_commands_without_the_fields_decode_as_raw_with_create_time() -> None:
    old = (
        b'{"kind": "create_topic", "version": 1, "name": "a", "partitions": 1, "assignment": [[1]]}'
    )
    command = decode(old)
    assert isinstance(command, CreateTopic)
    assert (command.format, command.timestamp_type) == ("raw", "create_time")


@pytest.mark.parametrize(
    "value",
    [
        b'{"kind": "create_topic", "version": 2, "name": "a", "partitions": 1,'
        b' "assignment": [[1]], "format": "avro", "timestamp_type": "create_time"}',
        b'{"kind": "create_topic", "version": 2, "name": "a", "partitions": 1,'
        b' "assignment": [[1]], "format": "envelope", "timestamp_type": 7}',
        b'{"kind": "delete_topic", "version": 2, "name": "a"}',  # only create_topic has a v2
    ],
)
def test_a_format_or_version_this_node_does_not_know_stops_it(value: bytes) -> None:
    with pytest.raises(UnknownCommandError):
        decode(value)


def test_the_image_keeps_each_topics_format() -> None:
    image = MetadataImage()
    command = image.create_topic("e", 1, 1, [1], "envelope", "log_append_time")
    image.apply(0, command)
    image.apply(1, image.create_topic("r", 1, 1, [1]))
    assert (image.topics["e"].format, image.topics["e"].timestamp_type) == (
        "envelope",
        "log_append_time",
    )
    assert (image.topics["r"].format, image.topics["r"].timestamp_type) == ("raw", "create_time")


def test_an_unknown_format_is_refused_before_anything_is_proposed() -> None:
    with pytest.raises(InvalidArgumentError):
        MetadataImage().create_topic("a", 1, 1, [1], "json", "create_time")
