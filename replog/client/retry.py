"""Retries with exponential backoff and jitter, only for retriable `ReplogError`s.

`Attempts` is one call's budget and the decision after each failure; `call_with_retry`
(sync) and `acall_with_retry` (asyncio) are the two loops around it.

A retriable error whose metadata carries `retry_after_ms` (QUOTA_EXCEEDED: when the
principal's quota has room again, Kafka's throttle time) is retried no sooner than that,
even when the failure rerouted the call; a hint past the time budget ends the retries.
Hints are read from the wire: clipped to [0, RETRY_AFTER_MS_MAX].
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from replog.errors import ReplogError

T = TypeVar("T")
RETRY_AFTER_MS_MAX = 60_000


def retry_after_s(err: ReplogError) -> float:
    """The server's hint (metadata `retry_after_ms`) in seconds; 0.0 without a valid one."""
    text = err.metadata.get("retry_after_ms", "")
    if not (text.isascii() and text.isdigit() and len(text) <= 9):
        return 0.0
    return min(int(text), RETRY_AFTER_MS_MAX) / 1000


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a call retries retriable errors: up to `attempts_max` attempts within
    `deadline_ms` in all, with jittered exponential backoff from `backoff_initial_ms` to
    `backoff_max_ms`."""

    # The time budget governs: a failover on a loaded machine can take several seconds of
    # refused attempts (each rerouted or backed off), however many that is. The count is
    # a backstop only (a server that answers a retriable error at once, over and over).
    attempts_max: int = 1_000
    backoff_initial_ms: int = 50
    backoff_max_ms: int = 500
    deadline_ms: int = 30_000  # total time budget across attempts

    def backoff_s(self, attempt: int) -> float:
        """Sleep before retry number `attempt` (1-based): full jitter on an exponential cap."""
        cap_ms = min(self.backoff_max_ms, self.backoff_initial_ms * 2 ** (attempt - 1))
        return random.uniform(cap_ms / 2, cap_ms) / 1000


NO_RETRY = RetryPolicy(attempts_max=1)


def one_try_each(addresses: int, policy: RetryPolicy) -> RetryPolicy:
    """One attempt per address, without backoff, within `policy`'s time budget: how a
    client looks for a node that answers before it knows the cluster."""
    return RetryPolicy(
        attempts_max=max(1, addresses),
        backoff_initial_ms=0,
        backoff_max_ms=0,
        deadline_ms=policy.deadline_ms,
    )


class Attempts:
    """One call's attempts under `policy`: after each failure, whether and when to retry.

    A call that the failure sent somewhere else (`rerouted`: e.g. to a newly named leader,
    or off a node that did not answer) is retried at once, without backoff, once in a row:
    a second such failure backs off, so that two nodes pointing at each other cannot spin.
    """

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.started = time.monotonic()
        self.count = 0
        self._rerouted = False
        self._hinted = False  # the last failure carried a retry-after hint

    def budget_left(self, err: ReplogError) -> float | None:
        """Count a failure: the backoff before the next attempt, or None when `err` is final
        (not retriable, or the attempt or time budget is spent)."""
        self.count += 1
        if not err.retriable or self.count >= self.policy.attempts_max:
            return None
        hint_s = retry_after_s(err)
        self._hinted = hint_s > 0
        pause_s = max(self.policy.backoff_s(self.count), hint_s)
        if time.monotonic() - self.started + pause_s > self.policy.deadline_ms / 1000:
            return None
        return pause_s

    def pause_s(self, backoff_s: float, rerouted: bool) -> float:
        """The wait before the retry: none after a first reroute in a row (unless the server
        said when to come back), else the backoff."""
        if rerouted and not self._rerouted and not self._hinted:
            self._rerouted = True
            return 0.0
        self._rerouted = False
        return backoff_s


def call_with_retry(
    fn: Callable[[], T],
    policy: RetryPolicy,
    on_error: Callable[[ReplogError], bool | None] | None = None,
) -> T:
    """Call `fn` until it succeeds, fails with a non-retriable error, or the budget is spent.

    `on_error` sees every retriable error before the retry (e.g. to refresh routing); when it
    returns True (the call now goes somewhere else, e.g. to a newly named leader), the retry
    happens at once (see `Attempts`).
    """
    attempts = Attempts(policy)
    while True:
        try:
            return fn()
        except ReplogError as err:
            backoff_s = attempts.budget_left(err)
            if backoff_s is None:
                raise
            rerouted = bool(on_error(err)) if on_error is not None else False
            pause_s = attempts.pause_s(backoff_s, rerouted)
            if pause_s:
                time.sleep(pause_s)


async def acall_with_retry(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    on_error: Callable[[ReplogError], Awaitable[bool]] | None = None,
) -> T:
    """`call_with_retry` for coroutines: the same budget and decisions, awaited."""
    attempts = Attempts(policy)
    while True:
        try:
            return await fn()
        except ReplogError as err:
            backoff_s = attempts.budget_left(err)
            if backoff_s is None:
                raise
            rerouted = await on_error(err) if on_error is not None else False
            pause_s = attempts.pause_s(backoff_s, rerouted)
            if pause_s:
                await asyncio.sleep(pause_s)
