"""Whether a data directory's disk is full: one `DiskSpace` per data directory.

A disk is *full* once a write there failed with ENOSPC/EDQUOT (`mark_full`), or once the
free space falls below the node's reserve (statvfs, re-read at most every
`CHECK_INTERVAL_S`, and at most every `WRITE_CHECK_INTERVAL_S` before an append:
`room_for`, about 0.2 us a call; between two full checks an append's re-read is the statvfs
alone, the reserve file's presence as last seen). While it is full, the replication driver
refuses client appends up front with RESOURCE_EXHAUSTED STORAGE_FULL (the replication core
never sees them, so no leader loses its leadership over a write that cannot be made),
followers do not write what they fetch and fetch again with backoff, and reads go on. It is
no longer full once the free space is back above twice the reserve
(`replog_storage_full{data_dir}` goes back to 0).

**The reserve.** With `enable_reserve`, the node keeps `reserve_bytes` of the disk in a
file of its own, `{data_dir}/.reserve~` (allocated with `posix_fallocate`): the disk is
full once less than that is free besides it. When a write that keeps replication safe (a
vote, a new epoch, a high watermark: `write_vital`) meets ENOSPC all the same (something
else took the last byte), the file is removed and the write made again; a node restarted
on a full disk removes it at its first look, before it opens its logs. So elections, epoch
markers, checkpoints and the metadata log still find room, and a restart on a full disk
elects leaders and serves reads. The file is allocated again once twice its size is free.

Thread-safe enough for its use: flags and numbers, read without a lock; a stale read only
delays a decision by one check.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

_log = logging.getLogger("replog.storage")

RESERVE_FILE = ".reserve~"
RESERVE_BYTES_MAX = 8 * 1024 * 1024
RESERVE_FRACTION = 32  # at most 1/32 of the file system (a small test disk keeps room)
CHECK_INTERVAL_S = 0.5
WRITE_CHECK_INTERVAL_S = 0.001
FREE_MIN_BYTES = 1024 * 1024


class DiskSpace:
    _registry: dict[Path, DiskSpace] = {}
    _registry_lock = threading.Lock()

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._dir = os.fspath(data_dir)
        self._reserve_file = os.path.join(self._dir, RESERVE_FILE)
        self._clock = time.monotonic
        self._full = False
        self._checked_at = float("-inf")  # the last full check (`check`)
        self._read_at = float("-inf")  # the last statvfs (`check` or an append's re-read)
        self._held = False  # whether the reserve file exists, as last seen
        self.free_bytes = -1  # as last read (-1: not known yet)
        self.reserve_bytes = 0  # 0: no reserve file kept (yet: see `enable_reserve`)
        with contextlib.suppress(OSError):  # one left by the node's last run
            self.reserve_bytes = (data_dir / RESERVE_FILE).stat().st_size
        self.times_full = 0  # how many times the disk became full (metrics, tests)
        self._first_check = True

    @classmethod
    def of(cls, data_dir: Path) -> DiskSpace:
        """The one `DiskSpace` of `data_dir` in this process."""
        key = Path(os.path.abspath(data_dir))
        with cls._registry_lock:
            space = cls._registry.get(key)
            if space is None:
                space = cls._registry[key] = DiskSpace(key)
        return space

    @classmethod
    def kept(cls, data_dir: Path) -> DiskSpace | None:
        """The `DiskSpace` of `data_dir` if it is a node's (it keeps a reserve there)."""
        space = cls._registry.get(data_dir)
        return space if space is not None and space.reserve_bytes else None

    @classmethod
    def all(cls) -> list[DiskSpace]:
        with cls._registry_lock:
            return list(cls._registry.values())

    @property
    def reserve_path(self) -> Path:
        return self.data_dir / RESERVE_FILE

    def enable_reserve(self) -> None:
        """Keep a reserve file (see the module docstring); its size follows the file
        system's: 1/32 of it, at most `RESERVE_BYTES_MAX`."""
        try:
            st = os.statvfs(self.data_dir)
        except OSError:
            return
        self.reserve_bytes = min(RESERVE_BYTES_MAX, st.f_blocks * st.f_frsize // RESERVE_FRACTION)
        self._checked_at = float("-inf")
        self.check()

    @property
    def full(self) -> bool:
        """Whether writes should not be tried (re-checked every `CHECK_INTERVAL_S`)."""
        self.check_soon()
        return self._full

    def room_for(self, nbytes: int) -> bool:
        """Whether a write of `nbytes` leaves the reserve untouched: False while the disk is
        full, or when this write would eat into the reserve. The free space is read again
        unless it was read within `WRITE_CHECK_INTERVAL_S` (a statvfs costs about 1 us), so
        a disk that another file filled is seen before the write, not by its ENOSPC (which
        would cost the replica a rebuild from its log)."""
        if not self.reserve_bytes:
            return not self.full
        now = self._clock()
        if now - self._checked_at >= CHECK_INTERVAL_S:
            self.check()
        elif now - self._read_at >= WRITE_CHECK_INTERVAL_S:
            self._read_at = now
            try:
                free = self.free_bytes = self._statvfs_free()
            except OSError:
                pass
            else:
                if self._room(free, self._held) == self._full:  # the state changes: a full check
                    self.check()
        return not self._full and self.free_bytes - nbytes >= self.reserve_bytes

    def _statvfs_free(self) -> int:
        st = os.statvfs(self._dir)
        return st.f_bavail * st.f_frsize

    def _room(self, free: int, held: bool) -> bool:
        """Room: the reserve, held or not, and as much again besides (FREE_MIN_BYTES for a
        directory that keeps none: only a failed write makes it full then)."""
        reserve = self.reserve_bytes
        if not reserve:
            return free >= FREE_MIN_BYTES
        return free >= (reserve if held else 2 * reserve)

    def check_soon(self) -> None:
        """`check` unless it ran within `CHECK_INTERVAL_S`."""
        if self._clock() - self._checked_at >= CHECK_INTERVAL_S:
            self.check()

    def mark_full(self) -> None:
        """A write here failed with ENOSPC/EDQUOT."""
        self._checked_at = self._read_at = self._clock()
        self._become_full()

    def check(self) -> None:
        """Read the free space and update the state (a statvfs; an allocation or removal of
        the reserve file when the state changes)."""
        self._checked_at = self._read_at = self._clock()
        try:
            free = self.free_bytes = self._statvfs_free()
        except OSError:
            return  # not created yet, or gone: nothing known
        reserve = self.reserve_bytes
        held = self._held = reserve > 0 and os.path.exists(self._reserve_file)
        room = self._room(free, held)
        if self._full and room:
            if reserve and not held and not self._allocate_reserve():
                return
            self._full = False
            _log.warning("data directory %s: the disk has room again", self.data_dir)
        elif not self._full and reserve and not room:
            self._become_full()
        elif not self._full and reserve and not held:
            self._allocate_reserve()
        if self._first_check:  # a node restarted on a full disk: room to open its logs
            self._first_check = False
            if self._full and held:
                self.release_reserve()

    def write_vital(self, write: Callable[[], None]) -> None:
        """`write`, a small write that keeps replication safe (a vote, an epoch, a high
        watermark); on a full disk the reserve is released and it is tried once more."""
        try:
            write()
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            self.mark_full()
            if not self.release_reserve():
                raise
            write()

    def release_reserve(self) -> bool:
        """Remove the reserve file (a write that keeps replication safe met a full disk):
        True if there was one, so that the write may find room when tried again."""
        try:
            os.unlink(self._reserve_file)
        except OSError:
            return False
        self._held = False
        _log.warning("data directory %s: reserve file released", self.data_dir)
        return True

    def _become_full(self) -> None:
        if not self._full:
            self._full = True
            self.times_full += 1
            _log.error(
                "data directory %s: the disk is full; appends are refused (STORAGE_FULL) "
                "until space is freed",
                self.data_dir,
            )

    def _allocate_reserve(self) -> bool:
        try:
            fd = os.open(self.reserve_path, os.O_WRONLY | os.O_CREAT, 0o600)
        except OSError:
            return False
        try:
            os.posix_fallocate(fd, 0, self.reserve_bytes)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self.reserve_path)
            return False
        os.close(fd)
        self._held = True
        return True
