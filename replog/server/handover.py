"""Leadership hand-over: before a node stops, it transfers every partition it leads.

A leader that just disappears leaves its partitions without a leader until the others'
election timeout passes (seconds). On SIGTERM the node instead asks each replica it leads
to transfer leadership (`ReplicaDriver.transfer_leadership`, Raft's TimeoutNow) to the
voter that is furthest along, and waits, bounded by `timeout_s`, until it leads nothing:
writers see one NOT_LEADER naming the new leader instead of an election's worth of
UNAVAILABLE. `pick_target` is the pure part.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from replog.replication import Role
from replog.replication.driver import ReplicaDriver
from replog.server.logs import log

_log = logging.getLogger("replog.server")
FRESH_MS = 1000  # a follower that fetched within this long is alive enough to take over


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


async def hand_over(drivers: Sequence[ReplicaDriver], timeout_s: float) -> HandoverResult:
    """Transfer every partition led here; wait until none is (or `timeout_s` passes)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    leading = [d for d in drivers if d.role is Role.LEADER and len(d.config.voters) > 1]
    for driver in leading:
        target = pick_target(
            driver.config.replica_id, driver.config.voters, driver.replica_status()
        )
        if target is not None:
            await driver.transfer_leadership(target)
    deadline = started + timeout_s
    while loop.time() < deadline and any(d.role is Role.LEADER for d in leading):
        await asyncio.sleep(0.01)
    moved = sum(1 for d in leading if d.role is not Role.LEADER)
    result = HandoverResult(len(leading), moved, loop.time() - started)
    log(_log, "handover.done", led=result.led, moved=result.moved, seconds=round(result.seconds, 3))
    return result
