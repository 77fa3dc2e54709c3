"""A configuration file's parsed content, re-read when the file changes (tokens, SCRAM
credentials): the one owner of "reload on change, keep the last good content"."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from replog.errors import InvalidConfigError

T = TypeVar("T")


class WatchedFile(Generic[T]):
    """`parse(path)` of a file, re-read when its mtime or size changes, looked at no more
    often than every `check_s`. The first read raises (`OSError`, `InvalidConfigError`); a
    later one that fails keeps the last good content (the file is being rewritten)."""

    def __init__(self, path: Path, parse: Callable[[Path], T], check_s: float) -> None:
        self.path = path
        self._parse = parse
        self._check_s = check_s
        self._lock = threading.Lock()
        self._checked_at = 0.0
        self._signature: tuple[int, int] | None = None
        self._content = self._load()

    def _load(self) -> T:
        st = os.stat(self.path)
        content = self._parse(self.path)
        self._signature = (st.st_mtime_ns, st.st_size)
        return content

    def current(self) -> T:
        """The content, re-read first when the file changed since it was last looked at."""
        now = time.monotonic()
        with self._lock:
            if now - self._checked_at >= self._check_s:
                self._checked_at = now
                try:
                    st = os.stat(self.path)
                    if (st.st_mtime_ns, st.st_size) != self._signature:
                        self._content = self._load()
                except (OSError, InvalidConfigError):
                    pass  # keep the last good content; the file is being rewritten
            return self._content
