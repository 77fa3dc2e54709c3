"""The reconciler during a reassignment: a node keeps its replica while the partition is
being moved and deletes it (that partition only) once the completion moved it away."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest

from replog.server.meta.metadata import (
    CompleteReassignment,
    CreateTopic,
    MetadataImage,
    ReassignPartition,
)
from replog.server.partitions import replica_dirs
from replog.storage.names import partition_dir
from tests.unit.test_server_replica_manager import Clock, manager


def test_a_replica_moved_away_is_deleted_only_after_the_completion(tmp_path: Path) -> None:
    image = MetadataImage()

    async def scenario() -> None:
        async with manager(tmp_path, image, Clock()) as mgr:
            image.apply(0, CreateTopic("a", 2, ((1,), (1,))))
            await mgr.reconcile()
            assert sorted(mgr.replicas) == [("a", 0), ("a", 1)]
            image.apply(1, ReassignPartition("a", 0, 1, (2,)))
            await mgr.reconcile()
            assert sorted(mgr.replicas) == [("a", 0), ("a", 1)]  # still moving: kept
            moved = mgr.replicas[("a", 1)]
            image.apply(2, CompleteReassignment("a", 0, 1, (2,)))
            await mgr.reconcile()
            assert sorted(mgr.replicas) == [("a", 0)]
            assert moved.closed
            assert not partition_dir(tmp_path, "a", 1).exists()
            assert partition_dir(tmp_path, "a", 0).exists()

    asyncio.run(scenario())


def test_a_moved_partition_whose_directory_cannot_go_is_retried_with_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = MetadataImage()
    clock = Clock()
    real = replica_dirs.remove_partition

    def full(data_dir: Path, name: str, partition: int) -> None:
        raise OSError(errno.EIO, "injected")

    async def scenario() -> None:
        async with manager(tmp_path, image, clock) as mgr:
            image.apply(0, CreateTopic("a", 2, ((1,), (1,))))
            await mgr.reconcile()
            monkeypatch.setattr(replica_dirs, "remove_partition", full)
            image.apply(1, ReassignPartition("a", 0, 0, (2,)))
            image.apply(2, CompleteReassignment("a", 0, 0, (2,)))
            await mgr.reconcile()
            assert sorted(mgr.replicas) == [("a", 1)]  # stopped all the same
            failure = mgr.failure("a", 0)
            assert failure is not None and failure.action == "delete"
            monkeypatch.setattr(replica_dirs, "remove_partition", real)
            await mgr.reconcile()  # still backing off: nothing tried
            assert partition_dir(tmp_path, "a", 0).exists()
            clock.now += 60
            await mgr.reconcile()
            assert mgr.failure("a", 0) is None
            assert not partition_dir(tmp_path, "a", 0).exists()
            assert sorted(mgr.replicas) == [("a", 1)]

    asyncio.run(scenario())
