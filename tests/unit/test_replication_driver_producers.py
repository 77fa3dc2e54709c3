"""Idempotent appends through the replication driver: three replicas on real segment logs,
an in-process network, leader crashes and restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from replog.errors import DuplicateSequenceError, OutOfOrderSequenceError, ProducerFencedError
from replog.replication import Acks
from replog.replication.producers import ProducerBatch
from tests.unit.test_replication_driver import DEADLINE_S, Cluster, data_values, run, wait_for

# One leader throughout but where a test crashes it: a re-election mid-test (a stall of the
# shared event loop on a loaded machine past a 300 ms timeout) fails an append with
# "leadership was lost", which these tests do not exercise.
STABLE_MS = (1000, 2000)


def batch(seq: int, epoch: int = 0, pid: int = 42) -> ProducerBatch:
    return ProducerBatch(pid, epoch, seq)


def test_a_retried_batch_is_appended_once_and_answered_with_its_offsets(tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        leader = cluster.drivers[await cluster.leader()]
        first = await leader.append([b"a", b"b"], Acks.ALL, DEADLINE_S, batch(0))
        again = await leader.append([b"a", b"b"], Acks.ALL, DEADLINE_S, batch(0))
        assert again == first
        nxt = await leader.append([b"c"], Acks.ALL, DEADLINE_S, batch(2))
        assert nxt[0] == first[1] + 2  # one offset for the next batch's header
        with pytest.raises(OutOfOrderSequenceError) as gap:
            await leader.append([b"x"], Acks.ALL, DEADLINE_S, batch(9))
        assert gap.value.expected_sequence == 3
        log = leader.log
        assert data_values(log, log.high_watermark) == [b"a", b"b", b"c"]

    run(scenario, tmp_path, STABLE_MS)


def test_concurrent_copies_of_one_batch_in_one_group_commit_are_appended_once(
    tmp_path: Path,
) -> None:
    import asyncio

    async def scenario(cluster: Cluster) -> None:
        leader = cluster.drivers[await cluster.leader()]
        answers = await asyncio.gather(
            *(leader.append([b"same"], Acks.ALL, DEADLINE_S, batch(0)) for _ in range(8))
        )
        assert len(set(answers)) == 1
        assert data_values(leader.log, leader.log.high_watermark) == [b"same"]

    run(scenario, tmp_path, STABLE_MS)


def test_a_new_leader_knows_the_batches_and_a_restarted_replica_rebuilds_them(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: Cluster) -> None:
        first = await cluster.leader()
        offsets = []
        for seq in range(0, 30, 3):
            values = [b"%d" % (seq + i) for i in range(3)]
            offsets.append(
                await cluster.drivers[first].append(values, Acks.ALL, DEADLINE_S, batch(seq))
            )
        await cluster.crash(first)
        second = await cluster.leader()
        driver = cluster.drivers[second]
        # The retry of the last batch, sent to the new leader: same offsets, nothing new.
        assert (
            await driver.append([b"27", b"28", b"29"], Acks.ALL, DEADLINE_S, batch(27))
            == offsets[-1]
        )
        with pytest.raises(DuplicateSequenceError):  # older than the 5 batches kept
            await driver.append([b"0", b"1", b"2"], Acks.ALL, DEADLINE_S, batch(0))
        await cluster.start(first)  # rebuilds its table by scanning its log
        leo = driver.log.log_end_offset
        await wait_for(lambda: cluster.logs[first].log_end_offset == leo)
        assert cluster.drivers[first].replica.producers.state() == driver.replica.producers.state()
        values = data_values(driver.log, driver.log.high_watermark)
        assert values == [b"%d" % i for i in range(30)]

    run(scenario, tmp_path, STABLE_MS)


def test_an_older_epoch_is_fenced_once_a_newer_one_wrote(tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        leader = cluster.drivers[await cluster.leader()]
        await leader.append([b"old"], Acks.ALL, DEADLINE_S, batch(0, epoch=0))
        await leader.append([b"new"], Acks.ALL, DEADLINE_S, batch(0, epoch=1))
        with pytest.raises(ProducerFencedError) as fenced:
            await leader.append([b"zombie"], Acks.ALL, DEADLINE_S, batch(1, epoch=0))
        assert fenced.value.producer_epoch == 1
        assert data_values(leader.log, leader.log.high_watermark) == [b"old", b"new"]

    run(scenario, tmp_path, STABLE_MS)
