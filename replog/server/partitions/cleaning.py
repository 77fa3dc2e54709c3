"""The node's log cleaner task: compaction of the replicas of compacted topics.

One supervised task per node (`Node.open`). Every `interval_s` it takes the logs the node
has open whose config says `compact` (the topic's `cleanup.policy`, given again to each
running replica when the topic's configs change: `PartitionLog.reconfigure`) and runs one
pass of the cleaner (`storage/cleaner.py`) over each in turn, in a thread, under one
`Throttle` of `bytes_per_s` for the pass's reads and writes together (0: unthrottled). The
cleaner settings (delete.retention.ms, min.cleanable.dirty.ratio, min.compaction.lag.ms)
are read from each log's config at the start of its pass: an AlterConfigs takes effect at
the next pass, without a restart. A pass touches closed segments below the replica's HW
only, never the active one, and is crash-safe (`storage/swaps.py`); every replica
(leader or follower) cleans its own log on its own schedule.

Its counters are exported as `replog_cleaner_*_total` (`CleanerCollector`).

Expected conditions end the pass over one log quietly (logged, tried again next time):
the log closed under it (its topic deleted, the replica moved, the node stopping), an I/O
error (the partition goes offline on its own: `PartitionLog.io_error`), a full disk, a
corrupt range (the repairer refetches it). Anything else escapes the thread: the task
fails and the supervisor stops the node (a bug is never retried in place). Cancelling the
task sets a stop flag that the throttle checks at every chunk: the pass ends at once (its
half-written copy deleted, the old segment in place) and the task waits for the thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily

from replog.errors import ReplogError
from replog.server.logs import log
from replog.server.supervisor import run_thread
from replog.storage import PartitionLog
from replog.storage.cleaner import CleanerConfig, Throttle, clean

_log = logging.getLogger("replog.server.cleaner")


class CleanerStopped(Exception):
    """The task was cancelled: the pass under way ends (raised at the next chunk)."""


@dataclass(slots=True)
class CleanerStats:
    """What the node's cleaner did since the start (metrics, tests, the benchmark)."""

    passes: int = 0  # passes that cleaned (were due)
    bytes_read: int = 0
    segments_rewritten: int = 0
    bytes_before: int = 0  # of the segments rewritten
    bytes_after: int = 0
    records_dropped: int = 0
    failures: int = 0  # passes ended by an expected condition (see the module doc)


class CleanerCollector:
    """The cleaner's counters for the node's metrics (`replog_cleaner_*_total`)."""

    _HELP = {
        "passes": "Cleaning passes that ran over a compacted partition",
        "bytes_read": "Bytes of log the cleaner read",
        "segments_rewritten": "Segments the cleaner rewrote and swapped in",
        "bytes_before": "Bytes of the segments the cleaner rewrote, before",
        "bytes_after": "Bytes of the segments the cleaner rewrote, after",
        "records_dropped": "Records the cleaner dropped (superseded, expired tombstones)",
        "failures": "Passes over a partition ended by a disk error, a full disk, corrupt "
        "data or the partition going away",
    }

    def __init__(self, stats: CleanerStats) -> None:
        self._stats = stats

    def collect(self) -> Iterable[CounterMetricFamily]:
        for name, text in self._HELP.items():
            yield CounterMetricFamily(f"replog_cleaner_{name}", text, getattr(self._stats, name))


class _StoppableThrottle(Throttle):
    def __init__(self, bytes_per_s: int | None, stop: threading.Event) -> None:
        super().__init__(bytes_per_s, sleep=self._wait)
        self._stop = stop

    def _wait(self, seconds: float) -> None:
        self._stop.wait(seconds)  # (woken at once by the stop)

    def spend(self, nbytes: int) -> None:
        if self._stop.is_set():
            raise CleanerStopped
        super().spend(nbytes)


async def run_cleaner(
    logs: Callable[[], list[PartitionLog]],
    *,
    bytes_per_s: int,
    interval_s: float,
    offset_map_keys_max: int,
    stats: CleanerStats,
) -> None:
    """Clean every compacted log every `interval_s` until cancelled (see the module doc)."""
    stop = threading.Event()
    while True:
        await asyncio.sleep(interval_s)
        compacted = [plog for plog in logs() if plog.config.compact and not plog.closed]
        if not compacted:
            continue
        await run_thread(stop, clean_all, compacted, bytes_per_s, offset_map_keys_max, stop, stats)


async def node_cleaner(
    logs: Callable[[], list[PartitionLog]], bytes_per_s: int, interval_ms: int, stats: CleanerStats
) -> None:
    """The node's cleaner task, with its settings (`--cleaner-bytes-per-s`, `-interval-ms`)."""
    await run_cleaner(
        logs,
        bytes_per_s=bytes_per_s,
        interval_s=interval_ms / 1000,
        offset_map_keys_max=CleanerConfig().offset_map_keys_max,
        stats=stats,
    )


def clean_all(
    logs: list[PartitionLog],
    bytes_per_s: int,
    offset_map_keys_max: int,
    stop: threading.Event,
    stats: CleanerStats,
) -> None:
    """One pass over each of `logs` (in the cleaner's thread)."""
    throttle = _StoppableThrottle(bytes_per_s or None, stop)
    for plog in logs:
        if stop.is_set():
            return
        config = CleanerConfig.of(plog.config, offset_map_keys_max=offset_map_keys_max)
        started = time.monotonic()
        try:
            result = clean(plog, config, int(time.time() * 1000), throttle)
        except CleanerStopped:
            return
        except (ReplogError, OSError) as exc:
            stats.failures += 1
            log(_log, "cleaner.failed", logging.WARNING, topic=plog.topic,
                partition=plog.partition, error=str(exc))  # fmt: skip
            continue
        if result is None:
            continue
        stats.passes += 1
        stats.bytes_read += result.bytes_read
        stats.segments_rewritten += result.segments_rewritten
        stats.bytes_before += result.bytes_before
        stats.bytes_after += result.bytes_after
        stats.records_dropped += result.records_dropped
        if result.segments_rewritten:
            log(_log, "cleaner.cleaned", topic=plog.topic, partition=plog.partition,
                segments=result.segments_rewritten, bytes_before=result.bytes_before,
                bytes_after=result.bytes_after, records_dropped=result.records_dropped,
                bytes_read=result.bytes_read, elapsed_ms=int((time.monotonic() - started) * 1000),
                cleaned_end=result.cleaned_end)  # fmt: skip
