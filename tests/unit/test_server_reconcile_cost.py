"""The control plane costs what a command changes: a pass of the reconciler after a
CreateTopic looks at that topic alone, however many topics the node hosts already; the
image's indexes answer capacity questions without a pass over every topic (issue 27)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from replog.replication import ReplicaConfig
from replog.server.control.answers import MetadataAnswers
from replog.server.edge.limits import Limits, LimitsConfig
from replog.server.meta.metadata import (
    CompleteReassignment,
    CreateTopic,
    DeleteTopic,
    InitProducer,
    MetadataImage,
    ReassignPartition,
    TopicMeta,
)
from replog.server.partitions import replica_dirs
from replog.server.partitions.replica_manager import ReplicaManager
from replog.server.partitions.replicated import ReplicatedPartition
from replog.server.supervisor import Supervisor
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from replog.storage.open_files import OpenFiles
from tests.unit.test_server_replica_manager import Clock, NoPeers

CONFIG = StorageConfig(flush=FlushPolicy.NEVER, segment_bytes_max=4096)
TOPICS = 200
PARTITIONS = 10  # 2,000 partitions in the cluster; the node hosts a replica of 1 in 20
HOSTED_EVERY = 20  # topic i has its partition 0 on this node when i % HOSTED_EVERY == 0


def _manager(
    data_dir: Path,
    image: MetadataImage,
    supervisor: Supervisor,
    ready: Callable[[], bool] = lambda: True,
) -> ReplicaManager:
    limits = Limits(LimitsConfig())  # one per node, as the node has

    def make(meta: TopicMeta, p: int, plog: PartitionLog) -> ReplicatedPartition:
        return ReplicatedPartition(
            plog,
            ReplicaConfig(1, meta.assignment[p], flush_always=False),
            NoPeers(),
            {},
            fetch_bytes_max=1 << 20,
            spawn=supervisor.spawn,
            topic_id=meta.topic_id,
            limits=limits,
        )

    files = OpenFiles(64)
    return ReplicaManager(1, data_dir, CONFIG, image, make, ready, clock=Clock(), files=files)


def test_a_create_looks_at_the_new_topic_alone_however_many_the_node_hosts(
    tmp_path: Path,
) -> None:
    image = MetadataImage()
    here = ((1, 2, 3), *((2, 3, 4) for _ in range(PARTITIONS - 1)))
    elsewhere = tuple((2, 3, 4) for _ in range(PARTITIONS))
    hosted = TOPICS // HOSTED_EVERY

    async def scenario() -> None:
        failures: list[BaseException] = []
        supervisor = Supervisor(failures.append)
        mgr = _manager(tmp_path, image, supervisor)
        await mgr.load()
        try:
            for i in range(TOPICS):
                assignment = here if i % HOSTED_EVERY == 0 else elsewhere
                image.apply(i, CreateTopic(f"t{i}", PARTITIONS, assignment))
            await mgr.reconcile()  # start-up: every topic, once
            assert len(mgr.replicas) == hosted
            assert (mgr.visited_topics, mgr.visited_partitions) == (TOPICS, TOPICS * PARTITIONS)

            await mgr.reconcile()  # nothing changed: nothing looked at
            assert (mgr.visited_topics, mgr.visited_partitions) == (TOPICS, TOPICS * PARTITIONS)

            image.apply(TOPICS, CreateTopic("one-more", PARTITIONS, here))
            await mgr.reconcile()
            assert mgr.visited_topics - TOPICS == 1
            assert mgr.visited_partitions - TOPICS * PARTITIONS == PARTITIONS
            assert ("one-more", 0) in mgr.replicas

            image.apply(TOPICS + 1, DeleteTopic("t0"))
            await mgr.reconcile()
            assert mgr.visited_topics - TOPICS == 2
            assert ("t0", 0) not in mgr.replicas
            assert len(mgr.replicas) == hosted
        finally:
            await mgr.close()
            await supervisor.close()
        assert failures == []

    asyncio.run(scenario())


def _hosted_by_a_pass(image: MetadataImage) -> Counter[int]:
    """What `image.hosted` must say, counted the slow way."""
    out: Counter[int] = Counter()
    for meta in image.topics.values():
        for p in range(meta.partitions):
            out.update(meta.hosts(p))
    return out


def test_the_images_indexes_follow_creates_deletes_and_reassignments() -> None:
    image = MetadataImage()
    changed = image.watch()
    assert image.apply(0, CreateTopic("a", 2, ((1, 2), (2, 3)))) == "a"
    assert image.apply(1, CreateTopic("b", 1, ((3,),))) == "b"
    assert image.apply(2, CreateTopic("a", 1, ((1,),))) is None  # lost a race: no change
    assert changed == {"a", "b"}
    changed.clear()
    assert image.hosted == _hosted_by_a_pass(image) == Counter({1: 1, 2: 2, 3: 2})

    assert image.apply(3, ReassignPartition("a", 0, 1, (3, 4))) == "a"
    assert image.moving == {("a", 1)}
    assert image.hosted == _hosted_by_a_pass(image)
    assert image.replicas_on(4) == 1
    assert image.apply(4, CompleteReassignment("a", 0, 1, (3, 4))) == "a"
    assert image.moving == set()
    assert image.hosted == _hosted_by_a_pass(image)
    assert image.apply(5, CompleteReassignment("a", 0, 1, (3, 4))) is None  # completed

    assert image.apply(6, DeleteTopic("a")) == "a"
    assert image.apply(7, DeleteTopic("a")) is None
    assert image.apply(8, None) is None  # a control record
    assert changed == {"a"}
    assert image.hosted == _hosted_by_a_pass(image) == Counter({3: 1})
    assert image.replicas_on(1) == 0


def test_get_metadata_answers_are_built_once_per_change(tmp_path: Path) -> None:
    image = MetadataImage()
    elsewhere = tuple((2, 3, 4) for _ in range(PARTITIONS))

    async def scenario() -> None:
        failures: list[BaseException] = []
        supervisor = Supervisor(failures.append)
        mgr = _manager(tmp_path, image, supervisor)
        await mgr.load()
        answers = MetadataAnswers(image, mgr, 1)
        try:
            for i in range(TOPICS):
                image.apply(i, CreateTopic(f"t{i}", PARTITIONS, elsewhere))
            image.apply(TOPICS, CreateTopic("here", 2, ((1,), (2,))))
            await mgr.reconcile()
            part = mgr.replicas[("here", 0)]
            assert await wait_for(lambda: part.leader.leader_id == 1)

            listed = answers.list_topics()
            assert len(listed.topics) == TOPICS + 1
            assert answers.list_topics() is listed  # nothing changed: the same answer
            for _ in range(2):
                for name in answers.names():
                    answers.topic(image.topics[name])
            assert (answers.built, answers.reused) == (TOPICS + 1, TOPICS + 1)

            here = answers.topic(image.topics["here"])
            assert [(p.leader_id, list(p.replicas)) for p in here.partitions] == [
                (1, [1]),
                (-1, [2]),  # no replica here: its replicas know the leader
            ]
            image.apply(TOPICS + 1, DeleteTopic("t3"))  # another topic changed
            answers.topic(image.topics["t4"])
            assert answers.built == TOPICS + 1  # t4's answer holds
            assert [t.name for t in answers.list_topics().topics][:4] == ["here", "t0", "t1", "t10"]
            assert "t3" not in answers.names()
        finally:
            await mgr.close()
            await supervisor.close()
        assert failures == []

    asyncio.run(scenario())


async def wait_for(condition: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def test_a_local_topic_the_metadata_never_committed_goes_once_the_metadata_caught_up(
    tmp_path: Path,
) -> None:
    """On restart a topic on disk that the replayed image does not know waits for the
    metadata to catch up (no command names it: it is looked at again once ready)."""

    async def scenario() -> None:
        failures: list[BaseException] = []
        supervisor = Supervisor(failures.append)
        before = MetadataImage()
        mgr = _manager(tmp_path, before, supervisor)
        await mgr.load()
        before.apply(0, CreateTopic("a", 1, ((1,),)))
        before.apply(5, CreateTopic("c", 1, ((1,),)))  # (its create is lost in the restart)
        await mgr.reconcile()
        await mgr.close()
        assert sorted(replica_dirs.scan(tmp_path)) == ["a", "c"]

        ready = {"yes": False}
        image = MetadataImage()
        mgr = _manager(tmp_path, image, supervisor, lambda: ready["yes"])
        await mgr.load()
        try:
            image.apply(0, CreateTopic("a", 1, ((1,),)))
            await mgr.reconcile()
            assert sorted(replica_dirs.scan(tmp_path)) == ["a", "c"]  # not caught up yet
            for offset in range(1, 7):
                image.apply(offset, InitProducer(""))  # names no topic
            ready["yes"] = True
            await mgr.reconcile()
            assert sorted(replica_dirs.scan(tmp_path)) == ["a"]
            assert sorted(mgr.replicas) == [("a", 0)]
            visited = mgr.visited_topics
            await mgr.reconcile()
            assert mgr.visited_topics == visited  # decided: not looked at again
        finally:
            await mgr.close()
            await supervisor.close()
        assert failures == []

    asyncio.run(scenario())


def test_close_stops_every_replica_in_waves_even_when_one_fails(tmp_path: Path) -> None:
    """A node's close stops its replicas `CLOSE_WINDOW` at a time (one at a time, 3,000 took
    8 s); a replica whose stop fails neither stops the others' close nor goes unreported."""
    from replog.server.partitions import replica_manager

    image = MetadataImage()
    topics = 30  # 300 replicas here, more than the window of 64

    async def scenario() -> None:
        failures: list[BaseException] = []
        supervisor = Supervisor(failures.append)
        mgr = _manager(tmp_path, image, supervisor)
        await mgr.load()
        for i in range(topics):
            image.apply(i, CreateTopic(f"c{i}", PARTITIONS, ((1, 2, 3),) * PARTITIONS))
        await mgr.reconcile()
        parts = list(mgr.replicas.values())
        assert len(parts) == topics * PARTITIONS
        broken = parts[100]
        real_stop = broken.stop
        at_once = most = 0

        async def failing_stop() -> None:
            await real_stop()
            raise OSError("a stop that failed")

        broken.stop = failing_stop  # type: ignore[method-assign]
        for part in parts:
            if part is broken:
                continue
            stop = part.stop

            async def counted(stop: Callable[[], object] = stop) -> None:
                nonlocal at_once, most
                at_once += 1
                most = max(most, at_once)
                try:
                    await stop()  # type: ignore[misc]
                finally:
                    at_once -= 1

            part.stop = counted  # type: ignore[method-assign]
        try:
            await mgr.close()
        except OSError as exc:
            assert str(exc) == "a stop that failed"
        else:
            raise AssertionError("the failed stop was not reported")
        assert not mgr.replicas
        # every other log closed (the broken one's stays open: its owner may still run;
        # the node exits after a failed close)
        assert all(p.log.closed for p in parts if p is not broken)
        assert 1 < most <= replica_manager.CLOSE_WINDOW, most
        await supervisor.close()

    asyncio.run(scenario())
