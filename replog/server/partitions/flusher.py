"""The interval flusher: fsyncs dirty logs (flush=interval) and checkpoints their HWs.

One supervised task for the node: every `flush_interval_ms` (or every second when the
policy is not `interval`, for the HW checkpoints alone) it flushes, in a thread, every log
the node has open. A log that fails (a full disk, a replica closed meanwhile) is skipped
this round and tried again the next one; a full disk also marks its data directory full
(`storage.space`), so that appends are refused up front until it has room again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from replog.errors import ReplogError, StorageFullError
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from replog.storage.space import DiskSpace

HW_CHECKPOINT_INTERVAL_MS = 1000


async def run_flusher(logs: Callable[[], list[PartitionLog]], config: StorageConfig) -> None:
    flush = config.flush is FlushPolicy.INTERVAL
    interval_ms = config.flush_interval_ms if flush else HW_CHECKPOINT_INTERVAL_MS
    while True:
        await asyncio.sleep(interval_ms / 1000)
        await asyncio.to_thread(flush_all, logs(), flush=flush)


def flush_all(logs: list[PartitionLog], *, flush: bool) -> None:
    for plog in logs:
        try:
            if flush and plog.needs_flush:
                plog.flush()
            plog.checkpoint_high_watermark()
        except StorageFullError:
            DiskSpace.of(plog.directory.parent.parent).mark_full()
        except (ReplogError, OSError, ValueError):  # ValueError: a file closed under us
            continue
