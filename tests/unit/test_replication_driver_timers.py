"""The driver's timers: one sweep for every waiting append's deadline, ticks by need.

An append's caller waits for its acks until its deadline; the driver keeps one timer for
the earliest deadline of all waiting appends (not one per append) and fails those that
pass it with `AckTimeoutError`, while the append itself goes on. A replica whose core has
no timer to run (a leader of a replica set of one, nothing waiting) is never woken by the
node's ticker; anything that waits for a timer brings the short tick back.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from replog.errors import AckTimeoutError
from replog.replication import Acks, ReplicaConfig, Role
from replog.replication.driver import ReplicaDriver
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from tests.unit.test_replication_driver import (
    DEADLINE_S,
    LocalNetwork,
    Transport,
    data_values,
    wait_for,
)

SHORT_S = 0.2  # an ack timeout that passes while nothing flushes the log
NEVER_MS = 600_000  # longer than any test

Scenario = Callable[[PartitionLog, ReplicaDriver], Awaitable[None]]


def run_solo(tmp_path: Path, *, flush_always: bool, tick_ms: int, scenario: Scenario) -> None:
    """`scenario` against the elected leader of a replica set of one on a flush=interval
    log (that nothing fsyncs but the test)."""

    async def main() -> None:
        storage = StorageConfig(
            segment_bytes_max=4096, index_interval_bytes=256, flush=FlushPolicy.INTERVAL
        )
        log = PartitionLog(tmp_path / "solo", "t", 0, storage)
        config = ReplicaConfig(1, (1,), flush_always=flush_always)
        driver = ReplicaDriver(log, config, Transport(LocalNetwork(), 1), rng=random.Random(1))
        driver.tick_ms = tick_ms
        await driver.start()
        try:
            await wait_for(lambda: driver.role is Role.LEADER)
            await scenario(log, driver)
        finally:
            await driver.close()
            log.close()

    asyncio.run(main())


async def _flush_and_write(log: PartitionLog, driver: ReplicaDriver, value: bytes) -> None:
    """fsync the log, then append `value` without waiting: the driver reports the flushed
    offset to the core after that write, which answers the appends the flush covered."""
    log.flush()
    await driver.append([value], Acks.NONE, DEADLINE_S)


def _timed_out(acks: str, timeout_s: float) -> str:
    return re.escape(f"acks={acks} not reached within {timeout_s:.3f}s")


def test_an_append_that_misses_its_deadline_fails_with_ack_timeout_and_is_kept(
    tmp_path: Path,
) -> None:
    """acks=leader under flush_always waits for a flush that only the test performs, with
    no tick during the test: the appends are answered, or time out, on the sweep."""

    async def scenario(log: PartitionLog, driver: ReplicaDriver) -> None:
        # a long deadline first, then a short one: the sweep timer moves earlier for it
        patient = asyncio.ensure_future(driver.append([b"patient"], Acks.LEADER, DEADLINE_S))
        with pytest.raises(AckTimeoutError, match=_timed_out("leader", SHORT_S)):
            await asyncio.wait_for(driver.append([b"hasty"], Acks.LEADER, SHORT_S), DEADLINE_S)
        assert not patient.done(), "a later deadline is not failed with an earlier one"
        await _flush_and_write(log, driver, b"flushed")
        base, last = await asyncio.wait_for(patient, DEADLINE_S)
        assert base == last and log.flushed_offset > last
        # the timed-out append was performed all the same
        assert data_values(log, log.log_end_offset) == [b"patient", b"hasty", b"flushed"]
        assert not driver._acks, "no waiter is left behind"

    run_solo(tmp_path, flush_always=True, tick_ms=NEVER_MS, scenario=scenario)


def test_appends_that_time_out_one_after_another_are_each_failed_once(tmp_path: Path) -> None:
    async def scenario(log: PartitionLog, driver: ReplicaDriver) -> None:
        timeouts_s = [SHORT_S / 2, SHORT_S, SHORT_S * 3 / 2]
        waits = [driver.append([b"%d" % i], Acks.LEADER, t) for i, t in enumerate(timeouts_s)]
        results = await asyncio.wait_for(asyncio.gather(*waits, return_exceptions=True), DEADLINE_S)
        for result, timeout_s in zip(results, timeouts_s, strict=True):
            assert isinstance(result, AckTimeoutError)
            assert re.match(_timed_out("leader", timeout_s), str(result))
        await _flush_and_write(log, driver, b"after")
        assert data_values(log, log.log_end_offset) == [b"0", b"1", b"2", b"after"]
        assert not driver._acks

    run_solo(tmp_path, flush_always=True, tick_ms=NEVER_MS, scenario=scenario)


def test_a_replica_set_of_one_answers_appends_with_its_core_timers_idle(tmp_path: Path) -> None:
    async def scenario(log: PartitionLog, driver: ReplicaDriver) -> None:
        await wait_for(lambda: driver._tick_wakeup.at is None)  # no tick armed
        for i in range(20):  # answered in the pass that writes them: no tick needed
            for acks in (Acks.LEADER, Acks.ALL):
                base, last = await asyncio.wait_for(
                    driver.append([b"%d" % i], acks, DEADLINE_S), DEADLINE_S
                )
                assert base == last and log.high_watermark == last + 1
        assert driver._tick_wakeup.at is None and driver.replica.next_tick_ms() is None

    run_solo(tmp_path, flush_always=False, tick_ms=1, scenario=scenario)


def test_an_append_waiting_for_a_flush_brings_the_short_tick_back(tmp_path: Path) -> None:
    """acks=leader under flush_always waits for the flushed offset, which the core learns on
    a tick when someone else (here the test, as the flusher would) fsyncs the log: the
    append completes only because the short tick came back."""

    async def scenario(log: PartitionLog, driver: ReplicaDriver) -> None:
        log.flush()
        await wait_for(lambda: driver._tick_wakeup.at is None)
        end = log.log_end_offset
        append = asyncio.ensure_future(driver.append([b"x"], Acks.LEADER, DEADLINE_S))
        await wait_for(lambda: log.log_end_offset > end)
        # The short tick is armed again (waited for: at the instant a wake-up fires and
        # the owner has not re-armed yet, `at` is None even though ticks go on).
        await wait_for(lambda: driver._tick_wakeup.at is not None)
        assert not append.done()  # nothing flushed the record yet
        log.flush()
        base, last = await asyncio.wait_for(append, DEADLINE_S)
        assert base == last and log.flushed_offset > last

    run_solo(tmp_path, flush_always=True, tick_ms=5, scenario=scenario)
