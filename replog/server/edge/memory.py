"""Giving memory back to the operating system once the streams that used it have ended.

Freed Python objects go back to the C allocator, not to the system: glibc keeps freed
chunks in its arenas (one per thread that allocated, and `asyncio.to_thread` reads run in a
pool of threads), so a node that served hundreds of streams keeps that RSS after they end.
Cancelled calls also leave reference cycles (exceptions, frames) that only the cycle
collector frees. `MemoryReleaser.streams_ended(open_now)` runs `gc.collect()` and glibc's
`malloc_trim(0)` (in a thread) when the number of open streams falls to half of its peak
since the last release, and twice when it falls to zero; at most once per
`RELEASE_INTERVAL_S`. `drained()` asks for the same two rounds when the bytes that requests
held (`limits.RequestPool`, acks=none batches) fall back to zero after a flood of at least
`DRAINED_PEAK_BYTES_MIN` (or half the limit that counted them, if smaller). Elsewhere than
glibc, only the collector runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import time
from collections.abc import Callable

RELEASE_INTERVAL_S = 1.0
STREAMS_PEAK_MIN = 8  # fewer open streams than this at their peak never cost much
DRAINED_PEAK_BYTES_MIN = 16 * 1024 * 1024  # smaller bursts leave little to give back


def _malloc_trim() -> Callable[[], object] | None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
        trim.argtypes = [ctypes.c_size_t]
        return lambda: trim(0)
    return None


class MemoryReleaser:
    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = RELEASE_INTERVAL_S,
    ) -> None:
        self._clock = clock
        self._interval_s = interval_s
        self._trim = _malloc_trim()
        self._peak = 0
        self._last = -float("inf")
        self._pending: asyncio.Task[None] | None = None
        self._rounds = 0
        self.releases = 0

    def streams_opened(self, open_now: int) -> None:
        self._peak = max(self._peak, open_now)

    def streams_ended(self, open_now: int) -> None:
        if self._peak < STREAMS_PEAK_MIN or open_now > self._peak // 2:
            return
        self._peak = open_now
        # When the last stream ends, once more a moment later: grpc frees a call's buffers
        # after its handler returns.
        self._rounds = max(self._rounds, 1 if open_now else 2)
        self._start()

    def drained(self, peak_bytes: int, limit_bytes: int) -> None:
        """Requests held `peak_bytes` at most (of `limit_bytes`) since the last call and now
        hold none."""
        if peak_bytes < min(DRAINED_PEAK_BYTES_MIN, limit_bytes // 2):
            return
        self._rounds = 2  # once now, once after grpc freed the last calls' buffers
        self._start()

    def _start(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # counted outside an event loop (a unit test): nothing to run
            self._rounds = 0
            return
        if self._pending is None or self._pending.done():
            self._pending = loop.create_task(self._release())

    async def _release(self) -> None:
        while self._rounds:  # streams that end meanwhile ask for one more round
            wait_s = self._last + self._interval_s - self._clock()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            self._rounds -= 1
            self._last = self._clock()
            gc.collect()
            if self._trim is not None:
                await asyncio.to_thread(self._trim)
            self.releases += 1
