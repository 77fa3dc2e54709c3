"""The reconciler: local replicas follow the metadata image; a local failure is retried with
backoff and blocks nothing else."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from replog.replication import Acks, Message, ReplicaConfig
from replog.server.meta.metadata import (
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    MetadataImage,
    TopicMeta,
)
from replog.server.partitions import replica_dirs
from replog.server.partitions.replica_manager import ReplicaManager
from replog.server.partitions.replicated import ReplicatedPartition
from replog.server.supervisor import Supervisor
from replog.storage import FlushPolicy, PartitionLog, StorageConfig

CONFIG = StorageConfig(flush=FlushPolicy.NEVER, segment_bytes_max=256)


class NoPeers:
    def send(self, to: int, message: Message) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def manager(
    data_dir: Path, image: MetadataImage, clock: Clock
) -> AsyncIterator[ReplicaManager]:
    failures: list[BaseException] = []
    supervisor = Supervisor(failures.append)

    def make(meta: TopicMeta, p: int, plog: PartitionLog) -> ReplicatedPartition:
        config = ReplicaConfig(1, meta.assignment[p], flush_always=False)
        return ReplicatedPartition(
            plog,
            config,
            NoPeers(),
            {},
            fetch_bytes_max=1 << 20,
            spawn=supervisor.spawn,
            topic_id=meta.topic_id,
        )

    mgr = ReplicaManager(1, data_dir, CONFIG, image, make, lambda: True, clock=clock)
    await mgr.load()
    try:
        yield mgr
    finally:
        await mgr.close()
        await supervisor.close()
    assert failures == []


def test_replicas_are_created_opened_and_deleted_as_the_image_says(tmp_path: Path) -> None:
    image = MetadataImage()

    async def scenario() -> None:
        async with manager(tmp_path, image, Clock()) as mgr:
            image.apply(0, CreateTopic("a", 2, ((1,), (2, 3))))  # node 1 hosts partition 0
            image.apply(1, CreateTopic("b", 1, ((1,),)))
            await mgr.reconcile()
            assert sorted(mgr.replicas) == [("a", 0), ("b", 0)]
            assert replica_dirs.scan(tmp_path)["a"].topic_id == 0
            image.apply(2, DeleteTopic("a"))
            await mgr.reconcile()
            assert sorted(mgr.replicas) == [("b", 0)]
            assert sorted(replica_dirs.scan(tmp_path)) == ["b"]

    asyncio.run(scenario())


def test_a_grown_topic_starts_only_the_new_replicas_placed_here(tmp_path: Path) -> None:
    image = MetadataImage()

    async def scenario() -> None:
        async with manager(tmp_path, image, Clock()) as mgr:
            image.apply(0, CreateTopic("a", 2, ((1,), (2,))))  # node 1 hosts partition 0
            image.apply(1, CreateTopic("b", 1, ((2,),)))  # not hosted here at first
            await mgr.reconcile()
            first = mgr.replicas[("a", 0)]
            assert sorted(mgr.replicas) == [("a", 0)]
            image.apply(2, CreatePartitions("a", 0, 4, ((1,), (2, 1))))
            image.apply(3, CreatePartitions("b", 1, 2, ((1,),)))
            await mgr.reconcile()
            assert sorted(mgr.replicas) == [("a", 0), ("a", 2), ("a", 3), ("b", 1)]
            assert mgr.replicas[("a", 0)] is first  # the old replica runs on untouched
            assert mgr.failures() == []

    asyncio.run(scenario())


def test_a_topic_created_again_under_its_name_never_sees_the_old_records(tmp_path: Path) -> None:
    image = MetadataImage()

    async def scenario() -> None:
        async with manager(tmp_path, image, Clock()) as mgr:
            image.apply(0, CreateTopic("a", 1, ((1,),)))
            await mgr.reconcile()
            await mgr.replicas[("a", 0)].append([b"old"], Acks.ALL, 5)
            # Deleted and created again before this node reconciled in between.
            image.apply(1, DeleteTopic("a"))
            image.apply(2, CreateTopic("a", 1, ((1,),)))
            await mgr.reconcile()
            part = mgr.replicas[("a", 0)]
            assert part.topic_id == 2
            assert part.log.log_end_offset == 1  # only the new leader's epoch marker

    asyncio.run(scenario())


def test_a_failed_delete_is_retried_with_backoff_and_blocks_no_other_topic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = MetadataImage()
    clock = Clock()
    broken = {"stuck": True}
    remove = replica_dirs.remove

    def flaky_remove(data_dir: Path, name: str) -> None:
        if name == "stuck" and broken["stuck"]:
            raise OSError(errno.ENAMETOOLONG, "File name too long", name)
        remove(data_dir, name)

    monkeypatch.setattr(replica_dirs, "remove", flaky_remove)

    async def scenario() -> None:
        async with manager(tmp_path, image, clock) as mgr:
            image.apply(0, CreateTopic("stuck", 1, ((1,),)))
            await mgr.reconcile()
            image.apply(1, DeleteTopic("stuck"))
            image.apply(2, CreateTopic("other", 1, ((1,),)))
            await mgr.reconcile()
            # The failure is reported for that topic; the other topic runs regardless.
            (failure,) = mgr.failures()
            assert (failure.topic, failure.action, failure.attempts) == ("stuck", "delete", 1)
            assert ("other", 0) in mgr.replicas
            # Within the backoff nothing is tried again; after it, it is.
            await mgr.reconcile()
            assert mgr.failures()[0].attempts == 1
            first_delay = failure.retry_at - 0.0
            clock.now = failure.retry_at
            await mgr.reconcile()
            assert mgr.failures()[0].attempts == 2
            assert mgr.failures()[0].retry_at - clock.now == pytest.approx(2 * first_delay)
            # The cause goes away: the next attempt succeeds and the report clears.
            broken["stuck"] = False
            clock.now = mgr.failures()[0].retry_at
            await mgr.reconcile()
            assert mgr.failures() == []
            assert sorted(replica_dirs.scan(tmp_path)) == ["other"]

    asyncio.run(scenario())


def test_a_topic_the_image_has_not_reached_yet_is_not_deleted(tmp_path: Path) -> None:
    image = MetadataImage()

    async def scenario() -> None:
        async with manager(tmp_path, image, Clock()) as mgr:
            image.apply(0, CreateTopic("a", 1, ((1,),)))
            await mgr.reconcile()
        # Restart: the image replays only what the node knows is committed (nothing yet).
        ready = {"yes": False}
        later = MetadataImage()
        mgr2 = ReplicaManager(
            1, tmp_path, CONFIG, later, _unused, lambda: ready["yes"], clock=Clock()
        )
        await mgr2.load()
        await mgr2.reconcile()
        assert "a" in replica_dirs.scan(tmp_path)
        await mgr2.close()

    asyncio.run(scenario())


def _unused(meta: TopicMeta, p: int, plog: PartitionLog) -> ReplicatedPartition:
    raise AssertionError("no replica should start")
