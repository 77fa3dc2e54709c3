"""Quotas: token buckets under a fake clock, the set_quota command, and the admission of
calls by principal (edge/buckets.py, meta/quotas.py, edge/quotas.py)."""

from __future__ import annotations

import pytest

from replog.client.retry import Attempts, RetryPolicy, call_with_retry, retry_after_s
from replog.errors import InvalidArgumentError, QuotaExceededError, error_from_reason
from replog.server.edge.buckets import Buckets, TokenBucket
from replog.server.edge.quotas import Quotas
from replog.server.meta.command_codec import decode, encode
from replog.server.meta.metadata import (
    MetadataImage,
    UnknownCommandError,
)
from replog.server.meta.quotas import QUOTAS_MAX, QuotaEntry, apply_quota, check_room


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_lets_its_burst_through_then_refuses_with_the_wait_until_a_token() -> None:
    bucket = TokenBucket.full(10.0, now=0.0)
    assert [bucket.take(1, 0.0) for _ in range(10)] == [0.0] * 10
    assert bucket.take(1, 0.0) == pytest.approx(0.1)
    assert bucket.take(1, 0.05) == pytest.approx(0.05)
    assert bucket.take(1, 0.1) == 0.0


def test_a_cost_above_the_burst_needs_a_full_bucket_and_leaves_a_debt() -> None:
    bucket = TokenBucket.full(100.0, now=0.0)  # burst 100 bytes
    assert bucket.take(300, 0.0) == 0.0  # a full bucket lets one large call through
    assert bucket.tokens == -200
    assert bucket.take(1, 0.0) == pytest.approx(2.01)  # the debt is waited out first
    assert bucket.take(300, 3.0) == 0.0


def test_over_any_interval_a_bucket_admits_at_most_its_burst_plus_rate_times_time() -> None:
    bucket = TokenBucket.full(50.0, now=0.0)
    admitted = sum(7 for i in range(10_000) if bucket.take(7, i * 0.001) == 0.0)
    assert admitted <= 50 + 50 * 10.0 + 7
    assert admitted >= 50 * 10.0 - 7  # and it does let the rate through


def test_a_clock_that_steps_back_refills_nothing() -> None:
    bucket = TokenBucket.full(1.0, now=10.0)
    assert bucket.take(1, 10.0) == 0.0
    assert bucket.take(1, 5.0) > 0


def test_a_new_rate_caps_the_tokens_to_its_burst() -> None:
    bucket = TokenBucket.full(100.0, now=0.0)
    bucket.set_rate(2.0, 0.0)
    assert bucket.tokens == 2.0


def test_buckets_are_bounded_and_the_least_recently_used_goes_first() -> None:
    buckets = Buckets(buckets_max=3)
    for name in ("a", "b", "c"):
        buckets.take((name, "requests"), 1.0, 1, 0.0)
    buckets.take(("a", "requests"), 1.0, 0, 0.0)  # a is used again: b is the oldest
    buckets.take(("d", "requests"), 1.0, 1, 0.0)
    assert len(buckets) == 3 and buckets.evicted == 1
    assert buckets.take(("a", "requests"), 1.0, 1, 0.0) > 0  # a kept its (empty) bucket
    assert buckets.take(("b", "requests"), 1.0, 1, 0.0) == 0.0  # b starts full again


def test_quota_entries_are_validated() -> None:
    assert QuotaEntry.checked("User:*", requests_per_s=5).requests_per_s == 5
    for principal in ("alice", "Node:1", "User:", "User:" + "x" * 300):
        with pytest.raises(InvalidArgumentError):
            QuotaEntry.checked(principal, requests_per_s=1)
    with pytest.raises(InvalidArgumentError):
        QuotaEntry.checked("User:a", requests_per_s=-1)
    with pytest.raises(InvalidArgumentError):
        QuotaEntry.checked("User:a", bogus_per_s=1)


def test_set_quota_round_trips_and_applies_the_last_setting_and_zero_removes() -> None:
    image = MetadataImage()
    entry = QuotaEntry.checked("User:alice", produce_bytes_per_s=1024, metadata_writes_per_s=5)
    assert decode(encode(entry)) == entry
    image.apply(0, decode(encode(entry)))
    assert image.quotas == {"User:alice": entry}
    image.apply(1, QuotaEntry.checked("User:alice", requests_per_s=3))
    assert image.quotas["User:alice"].requests_per_s == 3
    assert image.quotas["User:alice"].produce_bytes_per_s == 0
    image.apply(2, QuotaEntry("User:alice"))
    assert image.quotas == {}


def test_a_malformed_set_quota_record_stops_the_node() -> None:
    body = b'{"kind": "set_quota", "version": 1, "quota": {"principal": "User:a"}}'
    with pytest.raises(UnknownCommandError):
        decode(body)
    bad = encode(QuotaEntry("User:a", requests_per_s=1)).replace(
        b'"requests_per_s": 1', b'"requests_per_s": -1'
    )
    with pytest.raises(UnknownCommandError):
        decode(bad)


def test_entries_are_bounded() -> None:
    quotas = {f"User:{i}": QuotaEntry(f"User:{i}", requests_per_s=1) for i in range(QUOTAS_MAX)}
    extra = QuotaEntry("User:extra", requests_per_s=1)
    with pytest.raises(InvalidArgumentError):
        check_room(quotas, extra)
    apply_quota(quotas, extra)
    assert "User:extra" not in quotas
    check_room(quotas, QuotaEntry("User:extra"))  # a removal always fits


class Sized:
    def __init__(self, size: int) -> None:
        self.size = size

    def ByteSize(self) -> int:
        return self.size


def test_a_produce_costs_its_request_bytes_and_is_refused_until_the_debt_is_paid() -> None:
    clock = Clock()
    quotas = _quotas([QuotaEntry("User:w", produce_bytes_per_s=1000)], clock)
    append = "/replog.v1.Log/Append"
    assert quotas.admit("User:w", append, Sized(2500)) is None  # a full bucket: it goes
    refused = quotas.admit("User:w", append, Sized(10))
    assert refused is not None and refused.quota == "produce_bytes"
    assert refused.retry_after_ms == 1510  # the 1500-byte debt, then 10 bytes
    clock.now += 1.51
    assert quotas.admit("User:w", append, Sized(10)) is None


def _quotas(entries: list[QuotaEntry], clock: Clock) -> Quotas:
    table = {e.principal: e for e in entries}
    return Quotas(lambda context: str(context), lambda: table, clock)


def test_a_principal_over_its_metadata_quota_is_refused_with_a_retry_hint() -> None:
    clock = Clock()
    quotas = _quotas([QuotaEntry("User:bob", metadata_writes_per_s=5)], clock)
    costs = "/replog.v1.Log/InitProducer"
    assert all(quotas.admit("User:bob", costs, None) is None for _ in range(5))
    refused = quotas.admit("User:bob", costs, None)
    assert isinstance(refused, QuotaExceededError)
    assert refused.retriable and refused.reason == "QUOTA_EXCEEDED"
    assert refused.quota == "metadata_writes" and refused.retry_after_ms == 200
    back = error_from_reason(refused.reason, refused.message, refused.metadata)
    assert isinstance(back, QuotaExceededError) and back.retry_after_ms == 200
    assert quotas.admit("User:carol", costs, None) is None  # no entry, no default: unlimited
    clock.now += 0.2
    assert quotas.admit("User:bob", costs, None) is None
    assert quotas.snapshot() == [("own", "metadata_writes", 1)]


def test_the_default_entry_applies_to_principals_without_their_own() -> None:
    clock = Clock()
    quotas = _quotas(
        [QuotaEntry("User:*", requests_per_s=1), QuotaEntry("User:vip", requests_per_s=100)],
        clock,
    )
    costs = "/replog.v1.Admin/ListTopics"
    assert quotas.admit("User:a", costs, None) is None
    assert quotas.admit("User:b", costs, None) is None  # each principal has its own bucket
    assert quotas.admit("User:a", costs, None) is not None
    assert all(quotas.admit("User:vip", costs, None) is None for _ in range(100))
    assert quotas.snapshot() == [("default", "requests", 1)]


def test_fetched_bytes_leave_a_debt_that_refuses_the_next_fetch() -> None:
    clock = Clock()
    quotas = _quotas([QuotaEntry("User:r", fetch_bytes_per_s=1000)], clock)
    costs = "/replog.v1.Log/Fetch"
    assert quotas.admit("User:r", costs, None) is None
    assert quotas.charge_fetch("User:r", Sized(3000)) == pytest.approx(2.0)
    refused = quotas.admit("User:r", costs, None)
    assert refused is not None and refused.retry_after_ms == 2000
    clock.now += 2.0
    assert quotas.admit("User:r", costs, None) is None


def test_the_client_waits_at_least_the_servers_retry_after_hint() -> None:
    policy = RetryPolicy(backoff_initial_ms=1, backoff_max_ms=1, deadline_ms=10_000)
    attempts = Attempts(policy)
    hinted = QuotaExceededError("over", quota="requests", retry_after_ms=750)
    assert attempts.budget_left(hinted) == pytest.approx(0.75)
    assert attempts.pause_s(0.75, rerouted=True) == pytest.approx(0.75)  # not skipped
    assert 0 < attempts.budget_left(QuotaExceededError("over")) <= 0.001
    for junk in ("-5", "1e9", "x", "99999999999"):
        assert retry_after_s(QuotaExceededError("over", retry_after_ms=junk)) <= 60.0
    assert retry_after_s(QuotaExceededError("over", retry_after_ms="99999999")) == 60.0
    assert Attempts(RetryPolicy(deadline_ms=500)).budget_left(hinted) is None  # past budget


def test_a_call_over_its_quota_succeeds_once_the_hint_has_passed() -> None:
    clock = Clock()
    quotas = _quotas([QuotaEntry("User:p", requests_per_s=2)], clock)
    slept: list[float] = []
    calls = 0

    def call() -> str:
        nonlocal calls
        calls += 1
        refused = quotas.admit("User:p", "/replog.v1.Admin/ListTopics", None)
        if refused is not None:
            raise refused
        return "ok"

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds

    policy = RetryPolicy(backoff_initial_ms=1, backoff_max_ms=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("replog.client.retry.time.sleep", sleep)
        results = [call_with_retry(call, policy) for _ in range(5)]
    assert results == ["ok"] * 5
    assert calls == 5 + len(slept)
    assert all(s >= 0.5 - 1e-9 for s in slept)  # each wait honoured the hint (1/rate)
