"""The node's log cleaner task (`server/partitions/cleaning.py`): it compacts the logs whose
topic is compacted, stops at once when cancelled, and lets a bug end it (the supervisor
then stops the node)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from pathlib import Path

import pytest

from replog import records
from replog.errors import InvalidRecordError
from replog.server.partitions import cleaning
from replog.server.partitions.cleaning import CleanerStats, run_cleaner
from replog.storage import PartitionLog
from tests.unit.test_storage_cleaner import CONFIG, read_from, rec, updates

COMPACT = dataclasses.replace(CONFIG, compact=True, min_cleanable_dirty_ratio=0.0)


def open_log(directory: Path, compact: bool = True) -> PartitionLog:
    return PartitionLog(directory, "t", 0, COMPACT if compact else CONFIG)


async def wait_for(condition: object, what: str) -> None:
    for _ in range(1000):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(what)


def test_the_task_compacts_only_the_logs_of_compacted_topics(tmp_path: Path) -> None:
    compacted, plain = open_log(tmp_path / "a"), open_log(tmp_path / "b", compact=False)
    for plog in (compacted, plain):
        updates(plog, 12)
    before_plain = read_from(plain)
    latest = {k: (o, v) for o, k, v in read_from(compacted)}
    stats = CleanerStats()

    async def main() -> None:
        task = asyncio.create_task(
            run_cleaner(
                lambda: [compacted, plain],
                bytes_per_s=0,
                interval_s=0.01,
                offset_map_keys_max=1000,
                stats=stats,
            )
        )
        await wait_for(lambda: stats.passes >= 1, "a pass ran")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert stats.segments_rewritten > 0 and stats.bytes_after < stats.bytes_before
    after = read_from(compacted)
    assert len(after) < len(latest) * 12 and {k: (o, v) for o, k, v in after} == latest
    assert read_from(plain) == before_plain, "a topic that is not compacted is left alone"
    compacted.close()
    plain.close()


def test_a_cancelled_task_ends_its_pass_at_once_and_leaves_old_or_new(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    updates(plog, 12)
    latest = {k: (o, v) for o, k, v in read_from(plog)}
    stats = CleanerStats()

    async def main() -> None:
        task = asyncio.create_task(
            run_cleaner(
                lambda: [plog],
                bytes_per_s=50,
                interval_s=0.01,
                offset_map_keys_max=1000,
                stats=stats,
            )
        )
        await asyncio.sleep(0.3)  # inside the pass: 50 bytes a second
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)

    asyncio.run(main())
    assert {k: (o, v) for o, k, v in read_from(plog)} == latest
    assert not (tmp_path / "cleaning").exists() or not list((tmp_path / "cleaning").iterdir())
    plog.close()


def test_a_closed_log_ends_its_pass_quietly_and_a_bug_ends_the_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plog = open_log(tmp_path)
    updates(plog, 4)
    stats = CleanerStats()
    cleaning.clean_all([_Closing(plog)], 0, 1000, threading.Event(), stats)  # type: ignore[list-item]
    assert stats.failures == 1
    plog = open_log(tmp_path)  # again

    def broken(*_args: object) -> None:
        raise AssertionError("a broken invariant")

    monkeypatch.setattr(cleaning, "clean", broken)

    async def main() -> None:
        await run_cleaner(
            lambda: [plog], bytes_per_s=0, interval_s=0.01, offset_map_keys_max=10, stats=stats
        )

    with pytest.raises(AssertionError, match="broken invariant"):
        asyncio.run(asyncio.wait_for(main(), 30))
    plog.close()


class _Closing:
    """A log closed under the pass (its topic deleted meanwhile)."""

    def __init__(self, plog: PartitionLog) -> None:
        self._plog = plog
        self.config, self.topic, self.partition = plog.config, "t", 0

    def __getattr__(self, name: str) -> object:
        self._plog.close()
        return getattr(self._plog, name)


def test_a_compacted_topic_refuses_records_without_a_key() -> None:
    records.check_keyed([rec(b"k", b"v"), rec(b"k", None)])
    with pytest.raises(InvalidRecordError, match="no key") as raised:
        records.check_keyed([rec(b"k", b"v"), rec(None, b"v")])
    assert raised.value.metadata["index"] == "1"


def test_a_reader_steps_over_a_gap_the_cleaner_left_up_to_the_high_watermark() -> None:
    from replog import frames
    from replog.server.services.log_service import _next_offset

    data = frames.encode(7, [b"a", b"b"])
    assert _next_offset(data, 5, 20) == 9, "past the last frame read"
    assert _next_offset(b"", 5, 20) == 20, "nothing below the HW from 5: a gap to step over"
    assert _next_offset(b"", 20, 20) == 20, "at the HW: wait there"
