"""Leadership hand-over: before a node stops, it transfers every partition it leads.

A leader that just disappears leaves its partitions without a leader until the others'
election timeout passes (seconds). On SIGTERM the node instead asks each replica it leads
to transfer leadership (`ReplicaDriver.transfer_leadership`, Raft's TimeoutNow) to the
voter that is furthest along, and waits, bounded by `timeout_s`, until it leads nothing
and each new leader serves: writers see one NOT_LEADER naming the new leader instead of an
election's worth of UNAVAILABLE. `pick_target` is the pure part.

How many at once: `WINDOW` transfers are under way at a time, each new one started as one
ends, and their targets are spread over the other voters (`pick_target`'s `spread`). Each
transfer is an election whose quorum-state and epoch writes (fsyncs) fall on every voter,
so a node leading many partitions hands them over at the rate the disks allow (measured:
~85 a second over 3 nodes at 3,000 partitions on this project's 2-core test machine, so
1,000 leaderships need ~12 s: hence the default budget of 10 s). What is not handed over
in time (or has no fresh voter to take it) stays here and elects after the node is gone.

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
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from replog.replication import Role
from replog.replication.driver import ReplicaDriver
from replog.server.logs import log

_log = logging.getLogger("replog.server")
FRESH_MS = 1000  # a follower that fetched within this long is alive enough to take over
CATCH_UP_S_MAX = 1.0  # of the hand-over's time, at most this long for the others to catch up
# Transfers under way at once. Each is an election (TimeoutNow) that writes quorum state on
# its candidate and voters; one at a time, a node leading 1,000 partitions spent its whole
# 3 s budget just handing the requests to their owners (measured at 3,000 partitions on 3
# nodes: 693 of 1,004 moved in 6.5 s); all at once, hundreds of elections meet on each
# voter (the leader balancer's waves exist for that, `balancer.WAVE_MAX`).
WINDOW = 64
POLL_S = 0.005


def pick_target(
    me: int,
    voters: Sequence[int],
    status: Sequence[tuple[int, int, int, int]],
    spread: int = 0,
) -> int | None:
    """The voter to hand over to: among the other voters that fetched within `FRESH_MS`,
    one with the highest acknowledged offset; None if none. On a tie: the preferred replica
    `voters[0]` if it is one of them (the leader balancer would move leadership there
    anyway), else the tied voter at `spread` modulo their number, by id (0: the lowest id;
    a node handing over many partitions passes a different `spread` for each, so that their
    leaderships spread over the others instead of all going to the lowest id).
    `status` rows are `ReplicaDriver.replica_status()`: (id, LEO acked, lag, ms since fetch)."""
    best: int | None = None
    tied: list[int] = []
    for replica, acked, _lag, ago_ms in status:
        if replica == me or replica not in voters or not 0 <= ago_ms <= FRESH_MS:
            continue
        if best is None or acked > best:
            best, tied = acked, [replica]
        elif acked == best:
            tied.append(replica)
    if not tied:
        return None
    if voters and voters[0] in tied:
        return voters[0]
    tied.sort()
    return tied[spread % len(tied)]


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
    drivers: Sequence[ReplicaDriver],
    timeout_s: float,
    catch_up_s: float = CATCH_UP_S_MAX,
    window: int = WINDOW,
) -> HandoverResult:
    """Transfer every partition led here once the other voters caught up (or `catch_up_s`,
    at most a third of `timeout_s`, passed), at most `window` under way at once; wait until
    none is led here and each new leader serves (or `timeout_s` passes). Each look costs
    time in what is still waited for, not in what is led."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + timeout_s
    leading = [d for d in drivers if d.role is Role.LEADER and len(d.membership.voters) > 1]
    catch_up_until = started + min(catch_up_s, timeout_s / 3)
    lagging = leading
    while True:
        # (one with no fresh voter to hand over to is not waited for: it stays here)
        lagging = [d for d in lagging if not others_caught_up(d) and _has_target(d)]
        if not lagging or loop.time() >= catch_up_until:
            break
        await asyncio.sleep(POLL_S)
    queue = deque(enumerate(leading))
    under_way: list[tuple[ReplicaDriver, asyncio.Task[None]]] = []
    tasks: set[asyncio.Task[None]] = set()
    try:
        while loop.time() < deadline:
            under_way = [(d, t) for d, t in under_way if not _settled(d, t)]
            while queue and len(under_way) < window:
                i, driver = queue.popleft()
                if driver.role is not Role.LEADER or driver.stopped:
                    continue
                target = pick_target(
                    driver.config.replica_id,
                    driver.membership.voters,
                    driver.replica_status(),
                    spread=i,
                )
                if target is None:
                    continue
                task = asyncio.ensure_future(driver.transfer_leadership(target))
                tasks.add(task)
                task.add_done_callback(_reaped(tasks))
                under_way.append((driver, task))
            if not queue and not under_way:
                break
            await asyncio.sleep(POLL_S)
    finally:
        for task in tasks:  # (a transfer not taken yet by its owner by the deadline)
            task.cancel()
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


def _has_target(driver: ReplicaDriver) -> bool:
    me, voters = driver.config.replica_id, driver.membership.voters
    return pick_target(me, voters, driver.replica_status()) is not None


def _settled(driver: ReplicaDriver, task: asyncio.Task[None]) -> bool:
    """A transfer under way is over: handed over (`handed_over`), or its owner took the
    request and this node leads with no transfer open (refused, or given up after the
    election timeout: the partition stays here; it is not asked again)."""
    if handed_over(driver):
        return True
    return task.done() and driver.role is Role.LEADER and driver.transferring_to is None


def _reaped(tasks: set[asyncio.Task[None]]) -> Callable[[asyncio.Task[None]], None]:
    def done(task: asyncio.Task[None]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()  # (a replica that stopped meanwhile: nothing to hand over)

    return done


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
