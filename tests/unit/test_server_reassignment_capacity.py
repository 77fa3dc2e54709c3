"""The capacity check before a move (or a create) is proposed: a node counts the replicas
its assignments give it and those that moves in progress add, against `partitions_max`."""

from __future__ import annotations

from pathlib import Path

import pytest

from replog.errors import TooManyPartitionsError
from replog.server.meta.metadata import CreateTopic, MetadataImage
from replog.server.meta.metadata import ReassignPartition as Reassign
from replog.server.partitions.replica_manager import ReplicaManager
from replog.storage import FlushPolicy, StorageConfig

CONFIG = StorageConfig(flush=FlushPolicy.NEVER, segment_bytes_max=256)


def _unused(*_args: object) -> None:
    raise AssertionError("no replica is made here")


def manager(tmp_path: Path, image: MetadataImage, partitions_max: int) -> ReplicaManager:
    # node 9: the metadata leader here hosts nothing (no descriptor check)
    return ReplicaManager(
        9, tmp_path, CONFIG, image, _unused, lambda: True, partitions_max=partitions_max
    )


def test_a_node_that_a_move_in_progress_fills_has_no_room_for_another(tmp_path: Path) -> None:
    image = MetadataImage()
    image.apply(1, CreateTopic("a", 2, ((1, 2), (1, 2))))
    mgr = manager(tmp_path, image, partitions_max=2)
    mgr.check_capacity([[3]])  # node 3 hosts nothing yet
    image.apply(2, Reassign("a", 1, 0, (1, 3)))  # node 3 joins a/0, 2 stays until the end
    image.apply(3, Reassign("a", 1, 1, (1, 3)))
    with pytest.raises(TooManyPartitionsError) as refused:
        mgr.check_capacity([[3]])
    assert refused.value.limit == "partitions_max" and refused.value.limit_value == 2
    assert refused.value.retriable
    with pytest.raises(TooManyPartitionsError):
        mgr.check_capacity([[2]])  # node 2 keeps its replicas until the moves complete
    mgr.check_capacity([[]])  # a cancel adds nobody


def test_a_create_counts_the_replicas_that_moves_add_too(tmp_path: Path) -> None:
    image = MetadataImage()
    image.apply(1, CreateTopic("a", 1, ((1,),)))
    image.apply(2, Reassign("a", 1, 0, (2,)))
    mgr = manager(tmp_path, image, partitions_max=1)
    with pytest.raises(TooManyPartitionsError):
        mgr.check_capacity(((2,),))
    mgr.check_capacity(((3,),))
