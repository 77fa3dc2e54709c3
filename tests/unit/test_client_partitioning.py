from __future__ import annotations

import pytest

from replog.client import RetryPolicy, partition_for_key
from replog.client.retry import call_with_retry
from replog.errors import InvalidArgumentError, UnavailableError


def test_keys_map_to_partitions_stably_across_processes() -> None:
    import zlib

    assert partition_for_key(b"user-42", 7, "crc32") == zlib.crc32(b"user-42") % 7
    assert partition_for_key(b"user-42", 7) == partition_for_key(b"user-42", 7)  # no salt
    assert partition_for_key(b"", 3, "crc32") == 0
    assert {partition_for_key(b"k%d" % i, 4) for i in range(100)} == {0, 1, 2, 3}


def test_retriable_errors_are_retried_until_success() -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise UnavailableError("down")
        return "ok"

    policy = RetryPolicy(attempts_max=5, backoff_initial_ms=1, backoff_max_ms=2)
    assert call_with_retry(flaky, policy) == "ok"
    assert len(calls) == 3


def test_non_retriable_errors_are_raised_at_once() -> None:
    calls = []

    def bad() -> None:
        calls.append(1)
        raise InvalidArgumentError("no")

    with pytest.raises(InvalidArgumentError):
        call_with_retry(bad, RetryPolicy(backoff_initial_ms=1))
    assert len(calls) == 1


def test_retries_stop_after_the_attempt_budget() -> None:
    calls = []

    def down() -> None:
        calls.append(1)
        raise UnavailableError("down")

    with pytest.raises(UnavailableError):
        call_with_retry(down, RetryPolicy(attempts_max=3, backoff_initial_ms=1, backoff_max_ms=1))
    assert len(calls) == 3


def test_a_reroute_to_a_new_leader_retries_at_once_but_only_once_in_a_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import replog.client.retry as retry

    sleeps: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", sleeps.append)
    calls = []

    def moving() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise UnavailableError("not here")
        return "ok"

    policy = RetryPolicy(attempts_max=10, backoff_initial_ms=1, backoff_max_ms=2)
    assert call_with_retry(moving, policy, on_error=lambda err: True) == "ok"
    # retries 1 and 3 went straight to the new address; retry 2 (a second reroute in a row,
    # e.g. two nodes pointing at each other) backed off first
    assert len(calls) == 4 and len(sleeps) == 1
