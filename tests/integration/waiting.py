"""Waiting on conditions with generous deadlines (never on sleeps of a fixed length)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
DEADLINE_S = 60.0


def wait_until(condition: Callable[[], T | None], what: str, deadline_s: float = DEADLINE_S) -> T:
    """Poll `condition` until it returns something truthy; fail after `deadline_s`."""
    deadline = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.05)
