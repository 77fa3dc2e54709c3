"""The partition registry: layout, topic names, lazy opening, delete, restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from replog.errors import (
    InvalidArgumentError,
    InvalidTopicNameError,
    PartitionNotFoundError,
    TopicExistsError,
    TopicNotFoundError,
)
from replog.storage import PartitionRegistry
from tests.storage_helpers import TINY


@pytest.fixture
def registry(tmp_path: Path) -> PartitionRegistry:
    reg = PartitionRegistry(tmp_path, TINY)
    yield reg
    reg.close_all()


def test_partitions_live_in_topic_and_partition_directories(
    registry: PartitionRegistry, tmp_path: Path
) -> None:
    registry.create_topic("orders", 3)
    assert sorted(p.name for p in (tmp_path / "orders").iterdir()) == [
        "partition_0",
        "partition_1",
        "partition_2",
        "topic.json",
    ]
    registry.get("orders", 2).append([b"x"])
    assert (tmp_path / "orders" / "partition_2" / "00000000000000000000.log").stat().st_size == 13


def test_partitions_open_lazily_with_one_handle_each(registry: PartitionRegistry) -> None:
    registry.create_topic("t", 2)
    assert registry.open_partitions() == []
    first = registry.get("t", 1)
    assert registry.get("t", 1) is first
    assert registry.open_partitions() == [first]


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../escape", "a/b", "a\\b", "x" * 250, "sp ace", "n\x00ul", "é"]
)
def test_invalid_topic_names_are_refused_and_create_nothing(
    registry: PartitionRegistry, tmp_path: Path, name: str
) -> None:
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(InvalidTopicNameError):
        registry.create_topic(name, 1)
    assert sorted(tmp_path.rglob("*")) == before
    assert not (tmp_path.parent / "escape").exists()


def test_valid_topic_names_use_the_whole_alphabet(registry: PartitionRegistry) -> None:
    registry.create_topic("A-z_0.9", 1)
    registry.create_topic("x" * 249, 1)
    assert set(registry.topics()) == {"A-z_0.9", "x" * 249}


def test_unknown_topics_and_partitions_are_typed_errors(registry: PartitionRegistry) -> None:
    registry.create_topic("t", 2)
    with pytest.raises(TopicNotFoundError):
        registry.get("nope", 0)
    with pytest.raises(PartitionNotFoundError):
        registry.get("t", 2)
    with pytest.raises(InvalidArgumentError):
        registry.get("t", -1)
    with pytest.raises(TopicExistsError):
        registry.create_topic("t", 1)
    with pytest.raises(InvalidArgumentError):
        registry.create_topic("u", 0)


def test_topics_and_data_survive_a_restart(tmp_path: Path) -> None:
    reg = PartitionRegistry(tmp_path, TINY)
    reg.create_topic("t", 2)
    reg.get("t", 0).append([b"kept"])
    reg.close_all()
    again = PartitionRegistry(tmp_path, TINY)
    assert again.topics() == {"t": 2}
    assert again.get("t", 0).log_end_offset == 1
    again.close_all()


def test_a_topic_directory_without_metadata_is_not_a_topic(tmp_path: Path) -> None:
    (tmp_path / "half-created" / "partition_0").mkdir(parents=True)
    reg = PartitionRegistry(tmp_path, TINY)
    assert reg.topics() == {}
    reg.close_all()


def test_delete_topic_removes_its_files_and_handles(
    registry: PartitionRegistry, tmp_path: Path
) -> None:
    registry.create_topic("gone", 1)
    registry.get("gone", 0).append([b"x"])
    registry.delete_topic("gone")
    assert registry.topics() == {}
    assert not (tmp_path / "gone").exists()
    assert registry.open_partitions() == []
    with pytest.raises(TopicNotFoundError):
        registry.delete_topic("gone")
    registry.create_topic("gone", 1)
    assert registry.get("gone", 0).log_end_offset == 0
