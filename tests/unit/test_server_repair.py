"""A replica with a corrupt range repairs itself from the others: decisions and the loop."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
from pathlib import Path

import pytest

from replog.errors import CorruptDataError
from replog.replication import Acks, Message, ReplicaConfig, Role
from replog.replication.driver import ReplicaDriver
from replog.server.partitions.repair import Action, Repairer, decide, run_scrubber
from replog.storage import PartitionLog
from tests.unit.test_replication_driver import (
    DEADLINE_S,
    STORAGE,
    VOTERS,
    Cluster,
    data_values,
    run,
    wait_for,
)

FRESH = [(1, 100, 0, 0), (2, 100, 0, 10), (3, 80, 20, 10)]  # leader 1's view


def test_a_replica_without_a_corrupt_range_does_nothing() -> None:
    assert decide(1, (1, 2, 3), (), Role.LEADER, 1, False, FRESH).action is Action.NONE
    assert decide(2, (1, 2, 3), (), Role.FOLLOWER, 1, False, []).action is Action.NONE


def test_a_corrupt_follower_that_knows_its_leader_refetches_from_it() -> None:
    assert decide(2, (1, 2, 3), (), Role.FOLLOWER, 1, True, []).action is Action.REPAIR
    # an observer (of the metadata partition) repairs like a follower
    assert decide(6, (1, 2, 3), (6,), Role.FOLLOWER, 1, True, []).action is Action.REPAIR


def test_a_corrupt_replica_without_a_leader_to_fetch_from_waits() -> None:
    assert decide(2, (1, 2, 3), (), Role.FOLLOWER, None, True, []).action is Action.WAIT
    assert decide(2, (1, 2, 3), (), Role.CANDIDATE, None, True, []).action is Action.WAIT


def test_a_corrupt_leader_hands_over_to_the_freshest_caught_up_voter_first() -> None:
    decision = decide(1, (1, 2, 3), (), Role.LEADER, 1, True, FRESH)
    assert (decision.action, decision.target) == (Action.HAND_OVER, 2)


def test_a_corrupt_leader_with_no_live_voter_to_take_over_waits_and_keeps_refusing() -> None:
    quiet = [(1, 100, 0, 0), (2, 100, 0, -1), (3, 100, 0, 60_000)]
    decision = decide(1, (1, 2, 3), (), Role.LEADER, 1, True, quiet)
    assert decision.action is Action.WAIT and "voter" in decision.why


def test_a_replica_set_of_one_cannot_repair() -> None:
    decision = decide(1, (1,), (), Role.LEADER, 1, True, [(1, 10, 0, 0)])
    assert decision.action is Action.IMPOSSIBLE


def flip_live(log: PartitionLog, position: int) -> None:
    """Flip one bit of the first segment through another descriptor, as bit rot seen
    through the page cache: the replica's next `pread` sees it."""
    path = sorted(log.directory.glob("*.log"))[0]
    fd = os.open(path, os.O_RDWR)
    try:
        byte = os.pread(fd, 1, position)
        os.pwrite(fd, bytes([byte[0] ^ 0x10]), position)
    finally:
        os.close(fd)


async def fill(cluster: Cluster, leader: int) -> list[bytes]:
    acked: list[bytes] = []
    for i in range(10):
        batch = [b"%d-%d" % (i, j) for j in range(20)]
        await cluster.drivers[leader].append(batch, Acks.ALL, DEADLINE_S)
        acked += batch
    leo = cluster.logs[leader].log_end_offset
    await wait_for(lambda: all(cluster.logs[n].log_end_offset == leo for n in VOTERS))
    return acked


def replicas(cluster: Cluster) -> Repairer:
    return Repairer(lambda: [("t", 0, cluster.drivers[n]) for n in sorted(cluster.drivers)])


def test_a_corrupt_follower_is_refetched_and_ends_identical_to_the_leader(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.leader()
        acked = await fill(cluster, leader)
        follower = next(n for n in VOTERS if n != leader)
        flog = cluster.logs[follower]
        flip_live(flog, 100)
        with pytest.raises(CorruptDataError):
            flog.read_uncommitted(flog.log_start_offset, 1 << 20)
        assert flog.corrupt_ranges()
        repairer = replicas(cluster)
        await repairer.repair_once()
        assert cluster.drivers[follower].repairs == 1 and not flog.corrupt_ranges()
        assert caplog.messages.count("corrupt.found") == 1  # reported once, then repaired
        await cluster.drivers[leader].append([b"after"], Acks.ALL, DEADLINE_S)
        end = cluster.logs[leader].log_end_offset
        await wait_for(lambda: flog.log_end_offset == end)
        assert data_values(flog, end) == data_values(cluster.logs[leader], end)
        assert data_values(flog, end) == [*acked, b"after"]
        assert cluster.drivers[leader].role is Role.LEADER  # the leader was not disturbed

    run(scenario, tmp_path)


def test_a_corrupt_leader_keeps_its_owner_hands_over_and_then_repairs(tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.leader()
        acked = await fill(cluster, leader)
        llog = cluster.logs[leader]
        flip_live(llog, 100)
        with pytest.raises(CorruptDataError):
            llog.read(llog.log_start_offset, 1 << 20)
        # A follower that lost its disk fetches from the start: the leader never fills an
        # answer from the corrupt range, and its owner task lives on.
        empty = next(n for n in VOTERS if n != leader)
        await cluster.crash(empty)
        shutil.rmtree(tmp_path / f"node{empty}")
        await cluster.start(empty)
        await asyncio.sleep(0.5)
        assert not cluster.drivers[leader].stopped
        assert cluster.logs[empty].log_end_offset == 0
        repairer = replicas(cluster)
        deadline = asyncio.get_running_loop().time() + DEADLINE_S
        while cluster.drivers[leader].repairs == 0:  # one round, or more on a slow machine
            assert asyncio.get_running_loop().time() < deadline
            await repairer.repair_once()
        assert repairer.handovers >= 1
        assert cluster.drivers[leader].role is not Role.LEADER
        assert cluster.drivers[leader].repairs == 1 and not llog.corrupt_ranges()
        second = await cluster.leader()
        assert second != leader
        await cluster.drivers[second].append([b"after"], Acks.ALL, DEADLINE_S)
        end = cluster.logs[second].log_end_offset
        await wait_for(lambda: llog.log_end_offset == end)
        assert data_values(llog, end) == [*acked, b"after"]

    run(scenario, tmp_path)


def test_a_replica_set_of_one_reports_its_corrupt_range_and_keeps_refusing_it(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        log = PartitionLog(tmp_path / "alone", "t", 0, STORAGE)
        config = ReplicaConfig(
            1, (1,), election_timeout_ms_min=300, election_timeout_ms_max=600,
            fetch_wait_ms_max=100, fetch_retry_ms=200, begin_epoch_retry_ms=100,
        )  # fmt: skip
        driver = ReplicaDriver(log, config, Nowhere(), rng=random.Random(1), tick_ms=20)
        await driver.start()
        try:
            await wait_for(lambda: driver.serving)
            await driver.append([b"x%d" % i for i in range(50)], Acks.ALL, DEADLINE_S)
            flip_live(log, 100)
            with pytest.raises(CorruptDataError):
                log.read(log.log_start_offset, 1 << 20)
            repairer = Repairer(lambda: [("t", 0, driver)])
            await repairer.repair_once()
            assert repairer.blocked == {("t", 0): "no other replica holds the data"}
            assert driver.repairs == 0 and driver.role is Role.LEADER
            with pytest.raises(CorruptDataError):  # still refused, never served
                log.read(log.log_start_offset, 1 << 20)
        finally:
            await driver.close()
            log.close()

    asyncio.run(scenario())


class Nowhere:
    def send(self, to: int, message: Message) -> None:
        raise AssertionError("a replica set of one sends nothing")


def test_the_scrubber_task_finds_a_flipped_bit_and_stops_when_cancelled(tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.leader()
        await fill(cluster, leader)
        follower = next(n for n in VOTERS if n != leader)
        flog = cluster.logs[follower]
        flip_live(flog, 100)
        found: list[tuple[str, int]] = []
        task = asyncio.create_task(
            run_scrubber(
                lambda: [flog],
                1 << 30,
                lambda plog, issue: found.append((plog.topic, issue.first_offset)),
                pass_interval_s=0.05,
            )
        )
        await wait_for(lambda: found)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert found[0][0] == "t" and flog.corrupt_ranges()

    run(scenario, tmp_path)
