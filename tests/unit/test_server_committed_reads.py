"""Consumer reads on a leader whose HW trails its LEO (e.g. just after an election).

A newly elected leader's HW reaches what its predecessor acknowledged only once its own
epoch's control record commits; a consumer that already read up to that point must wait
there, not fail with OUT_OF_RANGE.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from replog import frames
from replog.errors import OffsetOutOfRangeError
from replog.replication import Message, ReplicaConfig
from replog.server.partitions.replicated import ReplicatedPartition
from replog.server.services.log_service import _not_committed_yet, _read_committed
from replog.storage import FlushPolicy, PartitionRegistry, StorageConfig


class NoPeers:
    def send(self, to: int, message: Message) -> None:
        raise AssertionError("a replica that is not started sends nothing")


def no_tasks(*args: object, **kwargs: object) -> asyncio.Task[None]:
    raise AssertionError("a replica that is not started spawns nothing")


@pytest.fixture
def part(tmp_path: Path) -> ReplicatedPartition:
    reg = PartitionRegistry(
        tmp_path,
        StorageConfig(flush=FlushPolicy.NEVER, segment_bytes_max=256),
        background_flush=False,
    )
    reg.create_topic("t", 1)
    log = reg.get("t", 0)
    log.append([b"r%d" % i for i in range(5)])  # LEO 5
    log.set_high_watermark(2)  # committed: offsets 0 and 1
    # (not started: its driver never moves the HW set above)
    return ReplicatedPartition(
        log, ReplicaConfig(1, (1,)), NoPeers(), {1: "here"}, fetch_bytes_max=1 << 20, spawn=no_tasks
    )


def test_offsets_between_the_high_watermark_and_the_log_end_are_not_committed_yet(
    part: ReplicatedPartition,
) -> None:
    assert [o for o in range(7) if _not_committed_yet(part, o)] == [2, 3, 4, 5]


def test_a_read_ahead_of_the_high_watermark_returns_nothing_instead_of_failing(
    part: ReplicatedPartition,
) -> None:
    assert asyncio.run(_read_committed(part, 4, 1 << 20)) == b""


def test_a_read_below_the_high_watermark_returns_only_committed_records(
    part: ReplicatedPartition,
) -> None:
    data = asyncio.run(_read_committed(part, 0, 1 << 20))
    assert list(frames.decode(data).offsets) == [0, 1]


def test_a_read_past_the_log_end_is_out_of_range(part: ReplicatedPartition) -> None:
    with pytest.raises(OffsetOutOfRangeError):
        asyncio.run(_read_committed(part, 6, 1 << 20))
