"""Retries with exponential backoff and jitter, only for retriable `ReplogError`s."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from replog.errors import ReplogError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts_max: int = 20  # with the backoff below: rides out a failover (several seconds)
    backoff_initial_ms: int = 50
    backoff_max_ms: int = 500
    deadline_ms: int = 30_000  # total time budget across attempts

    def backoff_s(self, attempt: int) -> float:
        """Sleep before retry number `attempt` (1-based): full jitter on an exponential cap."""
        cap_ms = min(self.backoff_max_ms, self.backoff_initial_ms * 2 ** (attempt - 1))
        return random.uniform(cap_ms / 2, cap_ms) / 1000


NO_RETRY = RetryPolicy(attempts_max=1)


def call_with_retry(
    fn: Callable[[], T],
    policy: RetryPolicy,
    on_error: Callable[[ReplogError], bool | None] | None = None,
) -> T:
    """Call `fn` until it succeeds, fails with a non-retriable error, or the budget is spent.

    `on_error` sees every retriable error before the retry (e.g. to refresh routing); when it
    returns True (the call now goes somewhere else, e.g. to a newly named leader), the retry
    happens at once, without backoff, once in a row: a second such answer backs off.
    """
    started = time.monotonic()
    attempt = 0
    rerouted = False
    while True:
        attempt += 1
        try:
            return fn()
        except ReplogError as err:
            if not err.retriable or attempt >= policy.attempts_max:
                raise
            pause_s = policy.backoff_s(attempt)
            if time.monotonic() - started + pause_s > policy.deadline_ms / 1000:
                raise
            now = bool(on_error(err)) if on_error is not None else False
            if now and not rerouted:
                rerouted = True
                continue
            rerouted = False
            time.sleep(pause_s)
