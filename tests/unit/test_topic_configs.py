"""Per-topic configs (`server/meta/topic_configs.py`): validation before proposing, the
commands that carry them through the metadata log, pure `apply`, and the node's defaults."""

from __future__ import annotations

import json

import pytest

from replog.errors import InvalidArgumentError, RecordTooLargeError, TopicNotFoundError
from replog.server.meta import topic_configs
from replog.server.meta.command_codec import decode, encode
from replog.server.meta.metadata import (
    AlterTopicConfigs,
    CreateTopic,
    MetadataImage,
    UnknownCommandError,
)
from replog.storage import StorageConfig

NODE = StorageConfig(segment_bytes_max=8192, record_bytes_max=4096, retention_ms=60_000)


def image_with(configs: dict[str, str] | None = None) -> MetadataImage:
    image = MetadataImage()
    image.apply(0, image.create_topic("t", 1, 1, [1], configs=configs))
    return image


def test_values_are_checked_and_made_canonical() -> None:
    got = topic_configs.checked(
        {"retention.ms": " 1000", "retention.bytes": "-1", "cleanup.policy": "delete"}
    )
    assert got == {"cleanup.policy": "delete", "retention.bytes": "-1", "retention.ms": "1000"}


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("retention.ms", "-2", "must be in"),
        ("retention.bytes", "lots", "must be an integer"),
        ("segment.bytes", "100", "must be in"),
        ("max.message.bytes", "0", "must be in"),
        ("cleanup.policy", "archive", "must be one of"),
        ("cleanup.policy", "compact,archive", "must be one of"),
        ("segment.ms", "0", "must be in"),
        ("delete.retention.ms", "-1", "must be in"),
        ("min.compaction.lag.ms", "soon", "must be an integer"),
        ("min.cleanable.dirty.ratio", "1.5", "must be a number in"),
        ("min.cleanable.dirty.ratio", "nan", "must be a number in"),
        ("message.timestamp.type", "Wallclock", "must be one of"),
        ("flush.messages", "1", "unknown topic config"),
        ("retention.ms", "9" * 65, "at most 64 characters"),
    ],
)
def test_a_bad_config_is_refused(name: str, value: str, says: str) -> None:
    with pytest.raises(InvalidArgumentError, match=says):
        topic_configs.checked({name: value})


def test_create_keeps_the_configs_and_maps_the_timestamp_type() -> None:
    image = image_with({"retention.bytes": "2048", "message.timestamp.type": "LogAppendTime"})
    meta = image.topics["t"]
    assert meta.configs == {"retention.bytes": "2048"}
    assert meta.timestamp_type == "log_append_time"


def test_a_create_with_configs_is_a_version_3_command_that_round_trips() -> None:
    command = CreateTopic("t", 1, ((1,),), configs={"retention.ms": "5"})
    body = json.loads(encode(command))
    assert (body["version"], body["configs"]) == (3, {"retention.ms": "5"})
    assert decode(encode(command)) == command
    assert json.loads(encode(CreateTopic("t", 1, ((1,),))))["version"] == 1  # none: as before


def test_alter_is_incremental_and_applies_purely() -> None:
    image = image_with({"retention.bytes": "2048", "segment.bytes": "4096"})
    command = image.alter_topic_configs(
        "t", {"retention.ms": "10", "message.timestamp.type": "LogAppendTime"}, ["segment.bytes"]
    )
    assert decode(encode(command)) == command
    changed = image.watch()
    assert image.apply(1, command) == "t"
    meta = image.topics["t"]
    assert meta.configs == {"retention.bytes": "2048", "retention.ms": "10"}
    assert meta.timestamp_type == "log_append_time"
    assert changed == {"t"}
    image.apply(2, image.alter_topic_configs("t", {}, ["message.timestamp.type"]))
    assert image.topics["t"].timestamp_type == "create_time"


def test_refused_alters_change_nothing() -> None:
    image = image_with({"retention.bytes": "2048"})
    before = image.topics["t"]
    with pytest.raises(InvalidArgumentError, match="both set and deleted"):
        image.alter_topic_configs("t", {"retention.ms": "1"}, ["retention.ms"])
    with pytest.raises(InvalidArgumentError, match="must be one of"):
        image.alter_topic_configs("t", {"cleanup.policy": "archive"}, [])
    with pytest.raises(TopicNotFoundError):
        image.alter_topic_configs("nope", {"retention.ms": "1"}, [])
    assert image.topics["t"] is before and image.applied_offset == 1


def test_an_alter_of_a_topic_created_again_changes_nothing() -> None:
    image = image_with()
    stale = AlterTopicConfigs("t", topic_id=99, set={"retention.ms": "1"}, delete=())
    assert image.apply(1, stale) is None
    assert image.topics["t"].configs == {}


@pytest.mark.parametrize(
    "value",
    [
        b'{"kind": "alter_topic_configs", "version": 1, "name": "t", "topic_id": 0,'
        b' "set": {"cleanup.policy": "archive"}, "delete": []}',
        b'{"kind": "alter_topic_configs", "version": 1, "name": "t", "topic_id": 0,'
        b' "set": [], "delete": []}',
        b'{"kind": "alter_topic_configs", "version": 2, "name": "t", "topic_id": 0,'
        b' "set": {}, "delete": []}',
        b'{"kind": "create_topic", "version": 3, "name": "a", "partitions": 1,'
        b' "assignment": [[1]], "configs": {"retention.ms": "x"}}',
        b'{"kind": "delete_topic", "version": 3, "name": "a"}',
    ],
)
def test_a_malformed_or_newer_command_stops_the_node(value: bytes) -> None:
    with pytest.raises(UnknownCommandError):
        decode(value)


def test_the_node_flags_are_the_defaults() -> None:
    described = topic_configs.describe({"retention.bytes": "2048"}, "create_time", NODE)
    got = {c.name: (c.value, c.source) for c in described}
    assert got == {
        "cleanup.policy": ("delete", "default"),
        "delete.retention.ms": ("86400000", "default"),
        "min.cleanable.dirty.ratio": ("0.5", "default"),
        "min.compaction.lag.ms": ("0", "default"),
        "segment.ms": ("604800000", "default"),
        "max.message.bytes": ("4096", "default"),
        "message.timestamp.type": ("CreateTime", "default"),
        "retention.bytes": ("2048", "topic"),
        "retention.ms": ("60000", "default"),
        "segment.bytes": ("8192", "default"),
    }


def test_the_storage_config_takes_the_topics_values_over_the_nodes() -> None:
    config = topic_configs.storage_config(
        NODE,
        {
            "retention.ms": "-1",
            "retention.bytes": "2048",
            "segment.bytes": "1024",
            "max.message.bytes": "100",
        },
    )
    assert (config.retention_ms, config.retention_bytes, config.segment_bytes_max) == (
        None,
        2048,
        1024,
    )
    config.check_record_bytes(4096)  # stored and replicated records: the node's limit
    with pytest.raises(RecordTooLargeError):
        config.check_record_bytes(101, new=True)  # new records on the leader: the topic's
    assert topic_configs.storage_config(NODE, {}) is NODE


def test_max_message_bytes_cannot_exceed_the_nodes_limit() -> None:
    with pytest.raises(InvalidArgumentError, match="record_bytes_max"):
        topic_configs.check_node_limits({"max.message.bytes": "4097"}, NODE)
    topic_configs.check_node_limits({"max.message.bytes": "4096"}, NODE)


def test_compaction_configs_become_the_cleaners_and_compact_alone_keeps_everything() -> None:
    configs = topic_configs.checked(
        {
            "cleanup.policy": "delete, compact",
            "delete.retention.ms": "1000",
            "min.cleanable.dirty.ratio": "0.25",
            "min.compaction.lag.ms": "50",
            "segment.ms": "2000",
        }
    )
    assert configs["cleanup.policy"] == "compact,delete"
    both = topic_configs.storage_config(NODE, configs)
    assert both.compact and both.retention_ms == 60_000, "compact,delete: retention too"
    assert (both.delete_retention_ms, both.min_cleanable_dirty_ratio) == (1000, 0.25)
    assert (both.min_compaction_lag_ms, both.segment_ms) == (50, 2000)
    alone = topic_configs.storage_config(NODE, {**configs, "cleanup.policy": "compact"})
    assert alone.compact and alone.retention_ms is None and alone.retention_bytes is None
    assert not topic_configs.storage_config(NODE, {"cleanup.policy": "delete"}).compact


def test_only_envelope_topics_can_be_compacted() -> None:
    with pytest.raises(InvalidArgumentError, match="keys"):
        topic_configs.check_format({"cleanup.policy": "compact"}, envelope=False)
    topic_configs.check_format({"cleanup.policy": "compact"}, envelope=True)
    topic_configs.check_format({"cleanup.policy": "delete"}, envelope=False)
