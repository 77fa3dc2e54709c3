"""A node's budget of open storage files: one LRU of the open segments of every log.

A segment holds four descriptors while open (`.log`, `.idx`, the duplicate that Python's
`mmap` keeps of the `.idx` descriptor, `.crc`). Only what is used is open: a log opens its
active segment, and an older one when a read (or retention, the scrubber, a time lookup)
touches it (`SegmentLog.use`). `OpenFiles` counts the open segments of the whole node,
most recently used last; when the total passes `files_max`, the least recently used are
*parked*: fsynced if written, files closed, their handle kept (base offset, next offset,
size), to be opened again on use without a recovery scan. A partition of any size therefore
holds at most `files_max` descriptors, and so does the node.

Safe against readers: every use of a log's segments happens under its owner's lock
(`OwnedLock`, the `PartitionLog`'s). A segment is parked only by a thread that holds that
lock: either the one that is using the log (it is between two segment uses, and the entry
it just used is the most recent, never a victim) or another that got the lock without
waiting. A segment of a log busy in another thread is skipped.

Lock order: a log's lock, then this LRU's lock, never the other way round. `use` (called
with the log's lock held) only reorders and counts; the caller then parks the victims,
each with a *non-blocking* attempt on the victim's own lock, so no two logs' locks are
ever waited for together. Segments in use may keep the total above the budget for a
moment; it never grows without bound: every `use` parks idle segments until the total is
back under `files_max` or only busy ones remain.

`files_max_for(soft_limit)` derives the default budget from RLIMIT_NOFILE: half of it goes
to storage files; the rest stays for sockets, the metadata log, and files opened briefly.
Among those: a flush outside a log's lock (`PartitionLog.flush`) holds duplicates of the
`.log` and `.crc` descriptors of each segment it syncs until its fsyncs end; flushes run on
the node's few flush threads, each over one log's dirty segments (its active one, and those
rolled since the last flush, which stay open, within the budget, until flushed), so these
duplicates are bounded by the flush threads, not by the partition count.
"""

from __future__ import annotations

import resource
import threading
from collections import OrderedDict
from typing import Protocol

FILES_PER_SEGMENT = 4
FILES_MAX_MIN = 3 * FILES_PER_SEGMENT  # a budget below this could not hold one small log


class Parkable(Protocol):
    def park(self) -> bool:
        """Close the files if idle (False: busy, or cannot be parked now)."""
        ...


class OwnedLock:
    """A lock that knows which thread holds it, so that a thread that holds it can tell
    (`try_acquire`) and act under it without acquiring it again. Not reentrant."""

    __slots__ = ("_holder", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holder: int | None = None

    def acquire(self, blocking: bool = True) -> bool:
        if not self._lock.acquire(blocking):
            return False
        self._holder = threading.get_ident()
        return True

    def release(self) -> None:
        self._holder = None
        self._lock.release()

    def __enter__(self) -> OwnedLock:
        self._lock.acquire()
        self._holder = threading.get_ident()
        return self

    def __exit__(self, *exc: object) -> None:
        self._holder = None
        self._lock.release()

    def try_acquire(self) -> bool | None:
        """False: this thread already holds it (nothing to release); True: acquired now
        (release it); None: another thread holds it. `_holder` equals this thread's id only
        while this thread holds the lock (set after acquiring, cleared before releasing)."""
        if self._holder == threading.get_ident():
            return False
        return True if self.acquire(blocking=False) else None


def files_max_for(soft_limit: int) -> int:
    """The default budget for RLIMIT_NOFILE's soft limit `soft_limit`."""
    return max(FILES_MAX_MIN, soft_limit // 2)


def nofile_soft_limit() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


class OpenFiles:
    def __init__(self, files_max: int) -> None:
        assert files_max >= FILES_MAX_MIN, files_max
        self.files_max = files_max
        self._lock = threading.Lock()
        self._open: OrderedDict[Parkable, int] = OrderedDict()
        self._total = 0
        self._last: Parkable | None = None  # the most recently used log (an unlocked hint)
        self.parked = 0  # how many times a log was parked (metrics, tests)

    @property
    def total(self) -> int:
        """Descriptors held by the open logs, as last reported."""
        return self._total

    def __len__(self) -> int:
        return len(self._open)

    def use(self, log: Parkable, files: int) -> list[Parkable]:
        """`log` is in use and holds `files` descriptors. Returns the entries to try to park
        (least recently used first); the caller parks them once it released its own lock."""
        with self._lock:
            self._last = log
            previous = self._open.pop(log, 0)
            self._open[log] = files
            self._total += files - previous
            if self._total <= self.files_max:
                return []
            victims: list[Parkable] = []
            excess = self._total - self.files_max
            for other, held in self._open.items():
                if other is log or excess <= 0:
                    break
                victims.append(other)
                excess -= held
            return victims

    def touch(self, log: Parkable) -> bool:
        """The fast path of a hit: move `log` to the most recent end. False if it is not
        counted as open (the caller must `use` it). The same log used again in a row costs
        one unlocked comparison: `_last` is only ever a log that was counted when it was set,
        and `release` clears it, so a stale read at worst leaves the order a little off."""
        if self._last is log:
            return True
        with self._lock:
            try:
                self._open.move_to_end(log)
            except KeyError:
                return False
            self._last = log
            return True

    def others(self, log: Parkable | None) -> list[Parkable]:
        """Every open entry but `log`, least recently used first: what to park when the
        process ran out of descriptors (EMFILE) opening files."""
        with self._lock:
            return [other for other in self._open if other is not log]

    def release(self, log: Parkable) -> None:
        """`log` closed (or parked) its files."""
        with self._lock:
            self._total -= self._open.pop(log, 0)
            if self._last is log:
                self._last = None

    def park(self, victims: list[Parkable]) -> int:
        """Park what can be parked now; returns how many were."""
        parked = sum(1 for v in victims if v.park())
        self.parked += parked
        return parked
