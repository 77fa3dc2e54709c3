"""The node's flushers: the interval flusher and the group flusher.

The interval flusher: one supervised task for the node: every `flush_interval_ms` (or
every second when the policy is not `interval`, for the HW checkpoints alone) it flushes,
in a thread, every log the node has open. A log that fails (a full disk, a replica closed
meanwhile) is skipped this round and tried again the next one; a full disk also marks its
data directory full (`storage.space`), so that appends are refused up front until it has
room again.

The group flusher (flush=always; group commit across partitions and clients; off unless
`replica_manager.GROUP_FLUSH`: measured slower, see docs/benchmarks.md): a
partition replica's write reaches the page cache only (`PartitionLog.flush_deferred`) and
asks the flusher (`request`). The flusher runs passes: a pass takes every log asked for
so far and fsyncs them all at once, each in a thread of its own pool (so the file system
commits them together: concurrent fsyncs share journal commits), then tells each log's
replica (`on_flushed`); the logs asked for while a pass runs wait for the next one. A
log's `flushed_offset` moves only when its fsync returned (`PartitionLog.flush`, under
the log's lock, to the LEO it covered), and under flush=always that offset alone moves
HW and answers acks=leader/all (`ReplicaConfig.flush_always`): no acknowledgement
precedes the fsync that covers it. A log whose fsync failed with an I/O error goes offline
(`PartitionLog.io_error`); one that failed otherwise (a full disk, no descriptor) is asked
for again after `GROUP_RETRY_S`, and its acks wait meanwhile (they time out as outcome
unknown if it lasts). The metadata log keeps fsyncing its own writes.
"""

from __future__ import annotations

import asyncio
from asyncio import FIRST_COMPLETED
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from replog.errors import LogClosedError, ReplogError, StorageFullError
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from replog.storage.space import DiskSpace

HW_CHECKPOINT_INTERVAL_MS = 1000
GROUP_THREADS_MAX = 32  # fsyncs of one pass in flight at once
GROUP_RETRY_S = 0.2  # a log whose fsync failed (not an I/O error) is asked for again


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


class GroupFlusher:
    """Group commit across the partitions of a node under flush=always (module docstring)."""

    def __init__(self, threads_max: int = GROUP_THREADS_MAX) -> None:
        self._pending: dict[PartitionLog, Callable[[], None]] = {}
        self._asked = asyncio.Event()
        self._in_flight: set[PartitionLog] = set()
        self._closed = False
        self._pool = ThreadPoolExecutor(threads_max, thread_name_prefix="replog-flush")
        self.passes = 0  # times the flusher started fsyncs (each: every log then asking)
        self.flushes = 0  # log fsyncs made

    def request(self, log: PartitionLog, on_flushed: Callable[[], None]) -> None:
        assert log.flush_deferred, "a log the group flusher does not fsync for"
        if self._closed or log.closed:
            return  # the node is stopping (a closed log flushed itself as it closed)
        self._pending[log] = on_flushed
        self._asked.set()

    def flushing(self, log: PartitionLog) -> bool:
        return log in self._in_flight

    async def run(self) -> None:
        """Start the fsyncs of every log asked for that has none in flight, all at once;
        when any ends, tell its replica and start what was asked meanwhile (a log asked for
        again while its fsync runs waits for that one to end: its next fsync covers every
        write made meanwhile)."""
        loop = asyncio.get_running_loop()
        running: dict[asyncio.Future[Any], tuple[PartitionLog, Callable[[], None]]] = {}
        while True:
            ready = [log for log in self._pending if log not in self._in_flight]
            if ready:
                self.passes += 1
            for log in ready:
                on_flushed = self._pending.pop(log)
                self._in_flight.add(log)
                running[loop.run_in_executor(self._pool, _flush_one, log)] = (log, on_flushed)
            self._asked.clear()
            asked: asyncio.Future[object] = asyncio.ensure_future(self._asked.wait())
            waiting: list[asyncio.Future[object]] = [*running, asked]
            try:
                await asyncio.wait(waiting, return_when=FIRST_COMPLETED)
            finally:
                asked.cancel()
            for fut in [f for f in running if f.done()]:
                log, on_flushed = running.pop(fut)
                self._in_flight.discard(log)
                self.flushes += 1
                ok = fut.result()
                if ok is True:
                    on_flushed()
                elif ok is False:
                    loop.call_later(GROUP_RETRY_S, self.request, log, on_flushed)

    def close(self) -> None:
        """After the node's replicas stopped: nothing is asked for any more."""
        self._closed = True
        self._pending.clear()
        self._pool.shutdown(wait=False)


def _flush_one(log: PartitionLog) -> bool | None:
    """fsync `log`: True when done, False to try again, None when it is closed."""
    try:
        log.flush()
    except LogClosedError:
        return None
    except StorageFullError:
        DiskSpace.of(log.directory.parent.parent).mark_full()
        return False
    except (ReplogError, OSError, ValueError):  # an I/O error also takes the log offline
        return None if log.io_error is not None else False
    return True
