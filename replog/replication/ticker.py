"""One timer for every replica of a node: a heap of wake-up times on one event-loop timer.

A replica's core says when its `tick` may next have something to do
(`Replica.next_tick_ms`: an election timeout, a fetch retry, a parked fetch to answer, a
check-quorum); its driver asks the node's `Ticker` to wake it then (`Ticker.schedule`).
The ticker keeps one `asyncio` timer, for the earliest wake-up of all, and at that time
calls back only the replicas that are due: a replica with nothing to do costs no timer,
no event-loop wake-up and no CPU, however many replicas the node hosts (before, every
replica ticked every 50 ms: 5,000 replicas were 100,000 wake-ups a second).

A wake-up only ever moves *earlier* in the heap (`schedule` with a later time than the
one armed is ignored): a replica whose deadline moved later (a follower that heard from
its leader) is called back at the old time, finds its deadline ahead and schedules
again. So each replica has at most one live entry, plus the entries it superseded by
moving earlier (skipped when they come up); the heap is rebuilt from the live entries
whenever those stale entries outnumber them (`COMPACT_SLACK`): its size stays within
2 x the replicas + `COMPACT_SLACK`.

One ticker per event loop (`Ticker.of`): the replicas of a node share it, and tests that
run one loop after another each get their own.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import weakref
from collections.abc import Callable

# Stale heap entries tolerated beyond the live ones before the heap is rebuilt.
COMPACT_SLACK = 1024
# Entries due within this much of the ticker's wake-up are called in the same pass
# (asyncio may run a timer up to its clock resolution early).
SAME_PASS_S = 0.001

_TICKERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Ticker] = weakref.WeakKeyDictionary()


class Wakeup:
    """One replica's place in the ticker: `at` is its armed wake-up (loop time; None: none),
    `fire` what the ticker calls when it comes."""

    __slots__ = ("at", "fire")

    def __init__(self, fire: Callable[[], None]) -> None:
        self.at: float | None = None
        self.fire = fire


class Ticker:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int, Wakeup]] = []
        self._seq = itertools.count()
        self._live = 0  # wake-ups armed (entries whose `at` is their heap time)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self.fired = 0  # wake-ups called back (for tests and metrics)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> Ticker:
        """The ticker of `loop` (made on first use)."""
        ticker = _TICKERS.get(loop)
        if ticker is None:
            ticker = _TICKERS[loop] = cls(loop)
        return ticker

    def __len__(self) -> int:
        """Entries in the heap, stale ones included (bounded: see the module docstring)."""
        return len(self._heap)

    def schedule(self, wakeup: Wakeup, at: float) -> None:
        """Call `wakeup.fire` at loop time `at`, or earlier if it is armed earlier already."""
        if wakeup.at is not None:
            if wakeup.at <= at:
                return
        else:
            self._live += 1
        wakeup.at = at
        heapq.heappush(self._heap, (at, next(self._seq), wakeup))
        if len(self._heap) > 2 * self._live + COMPACT_SLACK:
            self._compact()
        if self._timer is None or at < self._timer_at:
            self._arm(at)

    def cancel(self, wakeup: Wakeup) -> None:
        """Disarm `wakeup` (its heap entry is skipped when it comes up)."""
        if wakeup.at is not None:
            wakeup.at = None
            self._live -= 1

    def _compact(self) -> None:
        self._heap = [entry for entry in self._heap if entry[2].at == entry[0]]
        heapq.heapify(self._heap)

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._loop.call_at(at, self._fire)

    def _fire(self) -> None:
        self._timer = None
        heap = self._heap
        until = self._loop.time() + SAME_PASS_S
        due: list[Wakeup] = []
        while heap and heap[0][0] <= until:
            at, _, wakeup = heapq.heappop(heap)
            if wakeup.at == at:  # else superseded by an earlier entry, or cancelled
                wakeup.at = None
                self._live -= 1
                due.append(wakeup)
        if heap:
            self._arm(heap[0][0])
        self.fired += len(due)
        for wakeup in due:
            wakeup.fire()
