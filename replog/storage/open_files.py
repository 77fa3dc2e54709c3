"""A node's budget of open storage files: an LRU of partition logs whose files are open.

A partition log holds four descriptors per segment while open (`.log`, `.idx`, the
duplicate that Python's `mmap` keeps of the `.idx` descriptor, `.crc`). `OpenFiles` counts
them per open log, most recently used last; when the total passes `files_max`, the least
recently used logs are *parked*: flushed, HW checkpointed, files closed, with their
in-memory state (LEO, HW, log start, size) kept. The next operation on a parked log
reopens it (`PartitionLog._opened`), which costs a clean open (the index and sidecar are
read back; no recovery scan beyond the last index entry).

Lock order: a log's lock, then this LRU's lock, never the other way round. `use` (called
with the log's lock held) only reorders and counts; the caller then parks the victims,
each with a *non-blocking* attempt on the victim's own lock, so a log in use is
skipped (it is the most recently used anyway) and no two logs' locks are ever waited for
together. A log in use may keep the total above the budget for a moment; it never grows
without bound: every `use` parks idle logs until the total is back under `files_max` or
only busy logs remain.

`files_max_for(soft_limit)` derives the default budget from RLIMIT_NOFILE: half of it goes
to storage files; the rest stays for sockets, the metadata log, and files opened briefly.
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
        """Close the files if the log is idle (False: it was busy, or cannot be parked)."""
        ...


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
        """`log` is in use and holds `files` descriptors. Returns the logs to try to park
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

    def others(self, log: Parkable) -> list[Parkable]:
        """Every open log but `log`, least recently used first: what to park when the process
        ran out of descriptors (EMFILE) opening `log`'s files."""
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
