"""The node's flushers: the interval flusher and the group flusher.

The interval flusher: one supervised task for the node: every `flush_interval_ms` (or
every second when the policy is not `interval`, for the HW checkpoints alone) it flushes,
in a thread, every log the node has open. A log that fails (a full disk, a replica closed
meanwhile) is skipped this round and tried again the next one; a full disk also marks its
data directory full (`storage.space`), so that appends are refused up front until it has
room again.

The group flusher (flush=always; group commit across partitions and clients; on when
`replica_manager.GROUP_FLUSH`, see docs/benchmarks.md): a partition replica's write
reaches the page cache only (`PartitionLog.flush_deferred`) and asks the flusher
(`request`), which starts the log's fsync at once in a thread of its own pool (the fsyncs
of every log asking are in flight together, so the file system commits them together:
concurrent fsyncs share journal commits) and, when it ends, tells the log's replica
(`on_flushed`, whatever the outcome) from the event loop, with no task hop in between; a
log asked for again while its fsync runs is started again when that one ends. The fsync
does not hold the log's lock (`PartitionLog.flush`: reads, and the follower writes that
come meanwhile, go on); the replica's owner holds client appends back while it runs and
writes them together after it. A log's `flushed_offset` moves only when its fsync
returned (to the LEO it covered, never past a truncation that came meanwhile), and under
flush=always that offset alone moves HW and answers acks=leader/all
(`ReplicaConfig.flush_always`): no acknowledgement
precedes the fsync that covers it. A log whose fsync failed with an I/O error goes offline
(`PartitionLog.io_error`); one that failed otherwise (a full disk, no descriptor) is asked
for again after `GROUP_RETRY_S`, and its acks wait meanwhile (they time out as outcome
unknown if it lasts). The metadata log keeps fsyncing its own writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from replog.errors import LogClosedError, ReplogError, StorageFullError
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from replog.storage.space import DiskSpace

HW_CHECKPOINT_INTERVAL_MS = 1000
GROUP_THREADS_MAX = 32  # fsyncs in flight at once
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
        # asked for again while its fsync runs: started when that one ends
        self._pending: dict[PartitionLog, Callable[[], None]] = {}
        # asked for in this pass of the event loop: started at the start of the next one
        self._asked: dict[PartitionLog, Callable[[], None]] = {}
        self._in_flight: set[PartitionLog] = set()
        self._closed = False
        self._pool = ThreadPoolExecutor(threads_max, thread_name_prefix="replog-flush")
        self._fatal: asyncio.Future[None] | None = None  # a bug in an fsync's callback
        self.passes = 0  # fsyncs started
        self.flushes = 0  # log fsyncs made

    def request(self, log: PartitionLog, on_flushed: Callable[[], None]) -> None:
        """Start `log`'s fsync in a thread of the pool in the event loop's next pass (the
        appends of every client woken in this pass are written first: one fsync covers
        them), or, if one runs, when it ends (an fsync covers every write made before it
        started, no more)."""
        assert log.flush_deferred, "a log the group flusher does not fsync for"
        if self._closed or log.closed:
            return  # the node is stopping (a closed log flushed itself as it closed)
        if log in self._in_flight:
            self._pending[log] = on_flushed
            return
        if log not in self._asked:
            asyncio.get_running_loop().call_soon(self._start_asked, log)
        self._asked[log] = on_flushed

    def _start_asked(self, log: PartitionLog) -> None:
        on_flushed = self._asked.pop(log, None)
        if on_flushed is None or self._closed:
            return
        if log in self._in_flight:  # (started meanwhile for a request made during another)
            self._pending[log] = on_flushed
            return
        self._start(log, on_flushed)

    def flushing(self, log: PartitionLog) -> bool:
        return log in self._in_flight

    def _start(self, log: PartitionLog, on_flushed: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        self._in_flight.add(log)
        self.passes += 1
        fut = loop.run_in_executor(self._pool, _flush_one, log)
        fut.add_done_callback(partial(self._ended, log, on_flushed))

    def _ended(
        self, log: PartitionLog, on_flushed: Callable[[], None], fut: asyncio.Future[Any]
    ) -> None:
        """On the event loop, when an fsync ended: tell the replica (whatever the outcome),
        then start the one asked for meanwhile, or try a failed one again later."""
        self._in_flight.discard(log)
        self.flushes += 1
        try:
            ok = fut.result()
            on_flushed()
            again = self._pending.pop(log, None)
            if self._closed:
                return
            if ok is False:
                loop = asyncio.get_running_loop()
                loop.call_later(GROUP_RETRY_S, self.request, log, again or on_flushed)
            elif again is not None:
                self._start(log, again)
        except BaseException as exc:  # a bug: `run` ends with it (the node's supervisor)
            fatal = self._fatal_future()
            if not fatal.done():
                fatal.set_exception(exc)

    def _fatal_future(self) -> asyncio.Future[None]:
        if self._fatal is None:
            self._fatal = asyncio.get_running_loop().create_future()
        return self._fatal

    async def run(self) -> None:
        """The flusher's supervised task: fsyncs start as they are asked for (`request`)
        and end in callbacks; this only ends, with its exception, if one of those fails."""
        await self._fatal_future()

    def close(self) -> None:
        """After the node's replicas stopped: nothing is asked for any more."""
        self._closed = True
        self._pending.clear()
        self._asked.clear()
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
