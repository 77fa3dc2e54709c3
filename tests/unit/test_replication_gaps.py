"""Replication of ranges with offset gaps: a replica catching up from a leader whose log
the cleaner compacted ends with the same records at the same offsets (real drivers and
segment logs, in-process network)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from replog import frames, records
from replog.replication import Acks
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from replog.storage.cleaner import CleanerConfig, clean
from tests.unit import test_replication_driver as harness
from tests.unit.test_replication_driver import DEADLINE_S, VOTERS, Cluster, run, wait_for

SMALL = StorageConfig(segment_bytes_max=600, index_interval_bytes=64, flush=FlushPolicy.ALWAYS)
NOW_MS = 10_000_000


def rows(log: PartitionLog, upto: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    offset = log.log_start_offset
    while offset < upto:
        data = log.read_uncommitted(offset, 1 << 16, end_offset=upto)
        if not data:
            break
        batch = frames.decode(data)
        out += batch.rows
        offset = batch.offsets[-1] + 1
    return out


def same_end(cluster: Cluster, follower: int) -> bool:
    leader = cluster._leader()
    end = None if leader is None else cluster.logs[leader].log_end_offset
    return cluster.logs[follower].log_end_offset == end


def len_of(expected: list[tuple[int, bytes]]) -> int:
    return expected[-1][0] + 1


def keyed(round_: int, keys: int) -> list[bytes]:
    return [
        records.encode(b"v%d-%d" % (k, round_), key=b"k%d" % k, timestamp_ms=NOW_MS)
        for k in range(keys)
    ]


def test_a_replica_refetching_a_compacted_log_holds_the_same_records_at_the_same_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(harness, "STORAGE", SMALL)

    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.leader()
        for r in range(30):
            await cluster.drivers[leader].append(keyed(r, 4), Acks.ALL, DEADLINE_S)
        gone = records.encode(None, key=b"k0", timestamp_ms=0)  # a tombstone, expired
        await cluster.drivers[leader].append([gone], Acks.ALL, DEADLINE_S)
        await cluster.drivers[leader].append(keyed(99, 2), Acks.ALL, DEADLINE_S)
        log = cluster.logs[leader]
        config = CleanerConfig(min_cleanable_dirty_ratio=0.0)
        cleaned = await asyncio.to_thread(clean, log, config, NOW_MS)  # as the node's cleaner
        assert cleaned is not None and cleaned.records_dropped > 0
        expected = rows(log, log.log_end_offset)
        assert len(expected) < log.log_end_offset, "the leader's log has gaps"
        for follower in VOTERS:
            if not await cluster.drivers[follower].repair():  # fetches it all again
                continue  # (it leads)
            await wait_for(lambda f=follower: same_end(cluster, f))
            assert rows(cluster.logs[follower], len_of(expected))[: len(expected)] == expected
        leader = await cluster.leader()
        end = cluster.logs[leader].log_end_offset
        base, _ = await cluster.drivers[leader].append(keyed(100, 1), Acks.ALL, DEADLINE_S)
        assert base == end, "offsets go on after the gaps"
        await wait_for(lambda: all(lg.high_watermark > base for lg in cluster.logs.values()))
        after = rows(cluster.logs[leader], base + 1)
        assert after[: len(expected)] == expected
        assert all(rows(lg, base + 1) == after for lg in cluster.logs.values())

    run(scenario, tmp_path)
