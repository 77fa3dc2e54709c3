"""The partition role of a single node: a replica set of one commits its own appends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from replog.errors import RecordTooLargeError, ShuttingDownError
from replog.replication import Acks, Message, ReplicaConfig
from replog.server.partitions.replicated import ReplicatedPartition
from replog.server.supervisor import Supervisor
from replog.storage import FlushPolicy, PartitionLog, StorageConfig


class NoPeers:
    def send(self, to: int, message: Message) -> None:
        raise AssertionError("a replica set of one sends nothing")


def open_log(tmp_path: Path, flush: FlushPolicy = FlushPolicy.NEVER) -> PartitionLog:
    config = StorageConfig(flush=flush, segment_bytes_max=256, record_bytes_max=64)
    return PartitionLog(tmp_path / "t" / "partition_0", "t", 0, config)


@asynccontextmanager
async def solo(plog: PartitionLog) -> AsyncIterator[ReplicatedPartition]:
    failures: list[BaseException] = []
    supervisor = Supervisor(failures.append)
    config = ReplicaConfig(0, (0,), flush_always=plog.config.flush is FlushPolicy.ALWAYS)
    part = ReplicatedPartition(
        plog, config, NoPeers(), {0: "here"}, fetch_bytes_max=1 << 20, spawn=supervisor.spawn
    )
    await part.start()
    try:
        yield part
    finally:
        await part.stop()
        await supervisor.close()
        plog.close()
    assert failures == []


@pytest.mark.parametrize("flush", [FlushPolicy.NEVER, FlushPolicy.ALWAYS])
def test_an_append_advances_the_high_watermark_past_its_last_offset(
    tmp_path: Path, flush: FlushPolicy
) -> None:
    async def scenario() -> None:
        async with solo(open_log(tmp_path, flush)) as part:
            assert part.is_leader  # a replica set of one leads at once
            result = await part.append([b"a", b"b"], Acks.ALL, timeout_s=5)
            assert result is not None
            # Offset 0 is the epoch marker its leadership began with.
            assert (result.base_offset, result.last_offset) == (1, 2)
            assert part.high_watermark == 3

    asyncio.run(scenario())


def test_on_open_everything_in_the_log_is_committed(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.append([b"x"] * 5)  # appended, HW never moved (e.g. a crash before the ack)

    async def scenario() -> None:
        async with solo(plog) as part:
            assert part.high_watermark == 6  # the five records and the new epoch's marker

    asyncio.run(scenario())


def test_a_waiter_wakes_when_the_high_watermark_passes_its_offset(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with solo(open_log(tmp_path)) as part:
            waiter = asyncio.create_task(part.wait_high_watermark(1, timeout_s=60))
            await asyncio.sleep(0)
            assert not waiter.done()
            await part.append([b"x"], Acks.LEADER, timeout_s=5)
            assert await asyncio.wait_for(waiter, 30) is True

    asyncio.run(scenario())


def test_a_wait_without_new_data_times_out_false(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with solo(open_log(tmp_path)) as part:
            assert await part.wait_high_watermark(1, timeout_s=0.01) is False

    asyncio.run(scenario())


def test_a_record_over_the_limit_is_refused_before_the_replica_sees_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with solo(open_log(tmp_path)) as part:
            epoch = part.driver.epoch
            for acks in Acks:
                with pytest.raises(RecordTooLargeError):
                    await part.append([b"x" * 65], acks, timeout_s=5)
            assert (part.is_leader, part.driver.epoch, part.log.log_end_offset) == (True, epoch, 1)

    asyncio.run(scenario())


def test_a_batch_whose_total_size_is_given_is_measured_record_by_record_only_past_the_limit(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with solo(open_log(tmp_path)) as part:
            small = [b"x" * 30, b"y" * 30]
            result = await part.append(small, Acks.LEADER, timeout_s=5, values_bytes=60)
            assert result is not None and (result.base_offset, result.last_offset) == (1, 2)
            big = [b"a", b"x" * 65]  # one record over the 64-byte limit: refused all the same
            with pytest.raises(RecordTooLargeError):
                await part.append(big, Acks.LEADER, timeout_s=5, values_bytes=66)
            assert part.log.log_end_offset == 3

    asyncio.run(scenario())


def test_acks_none_answers_without_offsets_and_the_records_land(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with solo(open_log(tmp_path)) as part:
            assert await part.append([b"x", b"y"], Acks.NONE, timeout_s=5) is None
            assert await part.wait_high_watermark(2, timeout_s=30)

    asyncio.run(scenario())


def test_closing_wakes_waiters_and_refuses_appends(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with solo(open_log(tmp_path)) as part:
            waiter = asyncio.create_task(part.wait_high_watermark(1, timeout_s=60))
            await asyncio.sleep(0)
            part.close()
            with pytest.raises(ShuttingDownError):
                await asyncio.wait_for(waiter, 30)
            with pytest.raises(ShuttingDownError):
                await part.append([b"x"], Acks.ALL, timeout_s=5)

    asyncio.run(scenario())
