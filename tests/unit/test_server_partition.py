"""The single-node partition role: a cluster of one commits its own appends."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from replog.errors import ShuttingDownError
from replog.server.partition import Acks, SoloLeader
from replog.storage import FlushPolicy, PartitionRegistry, StorageConfig


def registry(tmp_path: Path, flush: FlushPolicy = FlushPolicy.NEVER) -> PartitionRegistry:
    reg = PartitionRegistry(
        tmp_path, StorageConfig(flush=flush, segment_bytes_max=256), background_flush=False
    )
    reg.create_topic("t", 1)
    return reg


@pytest.mark.parametrize("flush", [FlushPolicy.NEVER, FlushPolicy.ALWAYS])
def test_an_append_advances_the_high_watermark_past_its_last_offset(
    tmp_path: Path, flush: FlushPolicy
) -> None:
    reg = registry(tmp_path, flush)

    async def scenario() -> None:
        part = SoloLeader(reg.get("t", 0), node_id=0)
        result = await part.append([b"a", b"b"], Acks.ALL, timeout_s=5)
        assert (result.base_offset, result.last_offset) == (0, 1)
        assert part.high_watermark == 2

    asyncio.run(scenario())
    reg.close_all()


def test_on_open_everything_in_the_log_is_committed(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    reg.get("t", 0).append([b"x"] * 5)  # appended, HW never moved (e.g. a crash before ack)

    async def scenario() -> None:
        part = SoloLeader(reg.get("t", 0), node_id=0)
        assert part.high_watermark == 5

    asyncio.run(scenario())
    reg.close_all()


def test_a_waiter_wakes_when_the_high_watermark_passes_its_offset(tmp_path: Path) -> None:
    reg = registry(tmp_path)

    async def scenario() -> None:
        part = SoloLeader(reg.get("t", 0), node_id=0)
        waiter = asyncio.create_task(part.wait_high_watermark(0, timeout_s=60))
        await asyncio.sleep(0)
        assert not waiter.done()
        await part.append([b"x"], Acks.LEADER, timeout_s=5)
        assert await asyncio.wait_for(waiter, 30) is True

    asyncio.run(scenario())
    reg.close_all()


def test_a_wait_without_new_data_times_out_false(tmp_path: Path) -> None:
    reg = registry(tmp_path)

    async def scenario() -> None:
        part = SoloLeader(reg.get("t", 0), node_id=0)
        assert await part.wait_high_watermark(0, timeout_s=0.01) is False

    asyncio.run(scenario())
    reg.close_all()


def test_closing_wakes_waiters_and_refuses_appends(tmp_path: Path) -> None:
    reg = registry(tmp_path)

    async def scenario() -> None:
        part = SoloLeader(reg.get("t", 0), node_id=0)
        waiter = asyncio.create_task(part.wait_high_watermark(0, timeout_s=60))
        await asyncio.sleep(0)
        part.close()
        with pytest.raises(ShuttingDownError):
            await asyncio.wait_for(waiter, 30)
        with pytest.raises(ShuttingDownError):
            await part.append([b"x"], Acks.ALL, timeout_s=5)

    asyncio.run(scenario())
    reg.close_all()
