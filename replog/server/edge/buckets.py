"""Token buckets for quotas: one per (principal, quota), a bounded number of them.

Pure: no clock of its own (every call passes `now`, seconds of a monotonic clock), no I/O,
no asyncio; `edge/quotas.py` drives it.

A bucket holds up to `burst` tokens (the rate times `BURST_S`, at least 1) and refills at
`rate_per_s`. A call that costs `cost` tokens is let through when the bucket holds
`min(cost, burst)` of them (a cost above the burst, a large produce, needs a full bucket),
and then takes all `cost`: the bucket may go into debt, which later calls wait out. So
over any interval of `t` seconds a bucket lets through at most `burst + rate * t` plus one
call's cost, and the long-run rate is the setting. A refused call takes nothing and is told
how long until the bucket holds what it needs (`retry_after_s`). Costs known only after the
call (a fetch's reply bytes) are taken with `charge`, which may also go into debt.

`Buckets` keeps at most `buckets_max` of them, the least recently used evicted first. A
bucket left alone for `burst / rate` seconds is full again, like a new one, so evicting it
forgives nothing; evicting a bucket in debt (more than `buckets_max` principals busy at
once) forgives that debt: the bound on memory wins.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

BURST_S = 1.0
BUCKETS_MAX = 10_000


@dataclass(slots=True)
class TokenBucket:
    rate_per_s: float
    tokens: float
    updated_at: float

    @classmethod
    def full(cls, rate_per_s: float, now: float) -> TokenBucket:
        assert rate_per_s > 0
        return cls(rate_per_s, burst_of(rate_per_s), now)

    @property
    def burst(self) -> float:
        return burst_of(self.rate_per_s)

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self.updated_at)  # a clock that steps back refills nothing
        self.tokens = min(self.burst, self.tokens + elapsed * self.rate_per_s)
        self.updated_at = max(self.updated_at, now)

    def set_rate(self, rate_per_s: float, now: float) -> None:
        """A new setting: refilled at the old rate until now, then capped to the new burst."""
        assert rate_per_s > 0
        self._refill(now)
        self.rate_per_s = rate_per_s
        self.tokens = min(self.tokens, self.burst)

    def take(self, cost: float, now: float) -> float:
        """0.0 if the call may go (its cost taken), else the seconds until it may."""
        assert cost >= 0
        self._refill(now)
        need = min(cost, self.burst)
        if self.tokens >= need:
            self.tokens -= cost
            return 0.0
        return (need - self.tokens) / self.rate_per_s

    def charge(self, cost: float, now: float) -> None:
        """Take `cost` after the fact (the bucket may go into debt)."""
        assert cost >= 0
        self._refill(now)
        self.tokens -= cost

    def is_full(self, now: float) -> bool:
        self._refill(now)
        return self.tokens >= self.burst


def burst_of(rate_per_s: float) -> float:
    return max(1.0, rate_per_s * BURST_S)


class Buckets:
    """The buckets by key, at most `buckets_max` (least recently used evicted first)."""

    def __init__(self, buckets_max: int = BUCKETS_MAX) -> None:
        assert buckets_max >= 1
        self.buckets_max = buckets_max
        self._buckets: OrderedDict[tuple[str, str], TokenBucket] = OrderedDict()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._buckets)

    def bucket(self, key: tuple[str, str], rate_per_s: float, now: float) -> TokenBucket:
        found = self._buckets.get(key)
        if found is None:
            found = TokenBucket.full(rate_per_s, now)
            self._buckets[key] = found
            while len(self._buckets) > self.buckets_max:
                self._buckets.popitem(last=False)
                self.evicted += 1
        else:
            self._buckets.move_to_end(key)
            if found.rate_per_s != rate_per_s:
                found.set_rate(rate_per_s, now)
        return found

    def take(self, key: tuple[str, str], rate_per_s: float, cost: float, now: float) -> float:
        """`TokenBucket.take` on the key's bucket (made full on first use)."""
        return self.bucket(key, rate_per_s, now).take(cost, now)

    def charge(self, key: tuple[str, str], rate_per_s: float, cost: float, now: float) -> None:
        self.bucket(key, rate_per_s, now).charge(cost, now)
