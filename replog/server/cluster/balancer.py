"""Leader balancing: leadership goes back to each partition's preferred replica.

Each partition has a preferred leader, the first replica of its assignment (`assign`
spreads those round-robin over the nodes, so when every partition is led by its preferred
replica, leaders per node differ by at most one). After a failure heals, leaders pile up
on the survivors; every `interval_s` each node looks at the partitions *it* leads and hands
each one whose preferred replica is another voter, alive (fetched within `FRESH_MS`) and
caught up (holds the whole log), to it (`ReplicaDriver.transfer_leadership`). Only the
current leader acts, so no RPC is needed and two nodes never fight over one partition.
`preferred_target` is the pure part; `balance_once` is also what a manual "rebalance"
command runs.

Transfers go in waves of at most `WAVE_MAX`: the next wave starts once the last one's
leaders stopped leading or gave up (at most `WAVE_WAIT_S`). All at once, a node's first
pass after a burst of creates started 235-320 transfers at ~1,200 partitions on 3 nodes:
as many elections, each writing (fsync) its quorum state on every voter at the same
moment, which held votes past the election timeout everywhere.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from replog.replication import Role
from replog.replication.driver import ReplicaDriver
from replog.server.logs import log
from replog.server.partitions.handover import FRESH_MS

WAVE_MAX = 32  # transfers under way at once on one node
WAVE_WAIT_S = 5.0  # the longest a wave is waited for
WAVE_POLL_S = 0.05

_log = logging.getLogger("replog.server")


def preferred_target(
    me: int, voters: Sequence[int], status: Sequence[tuple[int, int, int, int]]
) -> int | None:
    """The preferred replica `voters[0]` if leadership should move to it now: it is not
    this node, it fetched within `FRESH_MS` and lags by nothing. `status` rows are
    `ReplicaDriver.replica_status()`: (id, LEO acked, lag in records, ms since fetch)."""
    if not voters or voters[0] == me:
        return None
    preferred = voters[0]
    for replica, _acked, lag, ago_ms in status:
        if replica == preferred:
            return preferred if lag == 0 and 0 <= ago_ms <= FRESH_MS else None
    return None


async def balance_once(drivers: Sequence[ReplicaDriver]) -> int:
    """Start a transfer for every partition led here that its preferred replica should
    lead, in waves of `WAVE_MAX`; returns how many were started."""
    started = 0
    wave: list[ReplicaDriver] = []
    for driver in drivers:
        if driver.role is not Role.LEADER or not driver.serving:
            continue
        target = preferred_target(
            driver.config.replica_id, driver.membership.voters, driver.replica_status()
        )
        if target is not None:
            if len(wave) >= WAVE_MAX:
                await _settle(wave)
                wave = []
            await driver.transfer_leadership(target)
            wave.append(driver)
            started += 1
    if started:
        log(_log, "balance.transfers", started=started)
    return started


async def _settle(wave: Sequence[ReplicaDriver]) -> None:
    """Wait (at most `WAVE_WAIT_S`) until no driver of `wave` is handing leadership over."""
    deadline = asyncio.get_running_loop().time() + WAVE_WAIT_S
    while asyncio.get_running_loop().time() < deadline:
        if not any(d.role is Role.LEADER and d.transferring_to is not None for d in wave):
            return
        await asyncio.sleep(WAVE_POLL_S)


async def run_balancer(drivers: Callable[[], Sequence[ReplicaDriver]], interval_s: float) -> None:
    """Balance every `interval_s` (a supervised task)."""
    while True:
        await asyncio.sleep(interval_s)
        await balance_once(drivers())
