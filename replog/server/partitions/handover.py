"""Leadership hand-over: before a node stops, it transfers every partition it leads.

A leader that just disappears leaves its partitions without a leader until the others'
election timeout passes (seconds). On SIGTERM the node instead asks each replica it leads
to transfer leadership (`ReplicaDriver.transfer_leadership`, Raft's TimeoutNow) to the
voter that is furthest along, and waits, bounded by `timeout_s`, until it leads nothing
and each new leader serves: writers see one NOT_LEADER naming the new leader instead of an
election's worth of UNAVAILABLE. `pick_target` is the pure part.

Why wait for the new leader to serve: a new leader takes writes once its own epoch is
committed (its epoch marker on a majority, `Replica.serving`). This node voted for it and
is the one replica certain to be caught up; if it left at once, the marker would need the
third replica, which may be slow or just restarted (its peers' links to it still in their
reconnect backoff): measured, writers then waited 0.7-0.9 s instead of tens of ms. So
each replica handed over stays a follower until it has seen its new leader's epoch
committed (`ReplicaDriver.leader_serving`), a few milliseconds more.

For the same reason it first lets the other voters catch up, while it still leads and
writers see nothing (at most `CATCH_UP_S_MAX`): once it is gone, every commit needs them,
and a voter that just restarted may still be fetching what it missed (measured: acks at
the new leader then waited for it, 0.1-0.3 s after a hand-over).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from replog.replication import Role
from replog.replication.driver import ReplicaDriver
from replog.server.logs import log

_log = logging.getLogger("replog.server")
FRESH_MS = 1000  # a follower that fetched within this long is alive enough to take over
CATCH_UP_S_MAX = 1.0  # of the hand-over's time, at most this long for the others to catch up


def pick_target(
    me: int, voters: Sequence[int], status: Sequence[tuple[int, int, int, int]]
) -> int | None:
    """The voter to hand over to: among the other voters that fetched within `FRESH_MS`,
    the one with the highest acknowledged offset (lowest id on a tie); None if none.
    `status` rows are `ReplicaDriver.replica_status()`: (id, LEO acked, lag, ms since fetch)."""
    best: tuple[int, int] | None = None
    for replica, acked, _lag, ago_ms in status:
        if replica == me or replica not in voters or not 0 <= ago_ms <= FRESH_MS:
            continue
        key = (acked, -replica)
        if best is None or key > best:
            best = key
    return None if best is None else -best[1]


@dataclass(frozen=True, slots=True)
class HandoverResult:
    led: int  # partitions this node led when the hand-over started
    moved: int  # of those, led by another node when it ended
    seconds: float
    serving: int = 0  # of those moved, seen here with the new leader's epoch committed


def others_caught_up(driver: ReplicaDriver) -> bool:
    """A majority of the voters, this leader left out, fetched lately and lag by nothing:
    they commit without it (True too once it no longer leads: nothing to wait for)."""
    if driver.role is not Role.LEADER:
        return True
    me, voters = driver.config.replica_id, driver.membership.voters
    ready = sum(
        1
        for replica, _acked, lag, ago_ms in driver.replica_status()
        if replica != me and replica in voters and lag == 0 and 0 <= ago_ms <= FRESH_MS
    )
    return ready >= min(driver.config.majority, len(voters) - 1)


def handed_over(driver: ReplicaDriver) -> bool:
    """Led elsewhere by a leader that serves (or stopped here meanwhile: nothing to wait for)."""
    return driver.role is not Role.LEADER and (driver.leader_serving or driver.stopped)


async def hand_over(
    drivers: Sequence[ReplicaDriver], timeout_s: float, catch_up_s: float = CATCH_UP_S_MAX
) -> HandoverResult:
    """Transfer every partition led here once the other voters caught up (or `catch_up_s`,
    at most a third of `timeout_s`, passed); wait until none is led here and each new
    leader serves (or `timeout_s` passes)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    leading = [d for d in drivers if d.role is Role.LEADER and len(d.membership.voters) > 1]
    catch_up_until = started + min(catch_up_s, timeout_s / 3)
    while loop.time() < catch_up_until and not all(others_caught_up(d) for d in leading):
        await asyncio.sleep(0.005)
    for driver in leading:
        if driver.role is not Role.LEADER:
            continue
        target = pick_target(
            driver.config.replica_id, driver.membership.voters, driver.replica_status()
        )
        if target is not None:
            await driver.transfer_leadership(target)
    deadline = started + timeout_s
    while loop.time() < deadline and not all(handed_over(d) for d in leading):
        await asyncio.sleep(0.005)
    moved = sum(1 for d in leading if d.role is not Role.LEADER)
    serving = sum(1 for d in leading if d.role is not Role.LEADER and d.leader_serving)
    result = HandoverResult(len(leading), moved, loop.time() - started, serving)
    log(
        _log,
        "handover.done",
        led=result.led,
        moved=result.moved,
        serving=result.serving,
        seconds=round(result.seconds, 3),
    )
    return result


async def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Poll `condition` every 10 ms until it holds (True) or `timeout_s` passed (False): for
    a leadership change another task brings about (a hand-over, a transfer, a repair)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.01)
    return True
