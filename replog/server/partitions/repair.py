"""Scrubbing and repair: every node re-verifies its logs and refetches what rotted.

Storage refuses a range whose CRC32C fails (reads raise `CorruptDataError`, DATA_LOSS
`CORRUPT_DATA`) and records it in the partition (`PartitionLog.corrupt_ranges()`). Three
things find such a range: a consumer's read on the leader, the leader's read when it fills
a fetch answer for a follower, and the scrubber (`replog/storage/scrub.py`), which this
module runs in a supervised thread at `scrub_bytes_per_s` over every log the node has open
(a full pass, a pause of `SCRUB_PASS_INTERVAL_S`, and meanwhile a first pass over each log
opened since, so a replica that starts after the node is checked soon).

The repair loop (one supervised task per node) looks at every replica's corrupt ranges
when woken (the scrubber's findings wake it) and every `full_pass_s`, at the replicas with a
range found or waiting every `interval_s` (idle, a node's cost is O(1), not O(partitions)
per second: at 1,500 partitions the pass over all of them every second was the largest
item of an idle node's profile), and acts (`decide` is the pure part):

    no corrupt range                   nothing
    one voter and no other replica     cannot repair: reported (`repair.impossible`), the
                                       range stays refused
    follower (or observer), leader     `ReplicaDriver.repair()`: the log is discarded and
      known                            fetched again from the leader (votes and epochs kept)
    leader, a fresh voter to take over transfer leadership to the freshest caught-up voter
                                       (`handover.pick_target`), wait for the role change,
                                       then repair as a follower
    otherwise (candidate, no leader    wait and look again (`repair.waiting`)
      known, no voter fresh enough)

Discarding one replica's copy is the loss of one replica's disk, which the quorum
tolerates: the records it acknowledged are on a majority without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from replog.errors import ReplogError
from replog.replication import Role
from replog.replication.driver import ReplicaDriver
from replog.server.logs import log
from replog.server.partitions.handover import pick_target, wait_until
from replog.server.supervisor import run_thread
from replog.storage import PartitionLog
from replog.storage.integrity import IntegrityIssue
from replog.storage.scrub import Scrubber

_log = logging.getLogger("replog.server")

REPAIR_INTERVAL_S = 1.0  # how often the loop looks at replicas with a range found
FULL_PASS_INTERVAL_S = 10.0  # how often it looks at every replica when nothing woke it
WAITING_LOG_INTERVAL_S = 30.0  # a replica that cannot repair yet is logged this often
SCRUB_PASS_INTERVAL_S = 60.0  # pause between two full scrubber passes
SCRUB_POLL_S = 1.0  # how often the scrubber looks for logs opened since its last pass

Replicas = Callable[[], Sequence[tuple[str, int, ReplicaDriver]]]


class Action(enum.Enum):
    NONE = "none"
    REPAIR = "repair"  # discard the log and refetch it from the leader
    HAND_OVER = "hand-over"  # transfer leadership to `target` first
    WAIT = "wait"  # no leader to fetch from / nobody to hand over to, yet
    IMPOSSIBLE = "impossible"  # a replica set of one: no other copy exists


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    target: int | None = None
    why: str = ""


def decide(
    me: int,
    voters: Sequence[int],
    observers: Sequence[int],
    role: Role,
    leader_id: int | None,
    corrupt: bool,
    status: Sequence[tuple[int, int, int, int]],
) -> Decision:
    """What a replica with (or without) a corrupt range does now. `status` rows are
    `ReplicaDriver.replica_status()` (leader only): (id, LEO acked, lag, ms since fetch)."""
    if not corrupt:
        return Decision(Action.NONE)
    others = (set(voters) | set(observers)) - {me}
    if not others:
        return Decision(Action.IMPOSSIBLE, why="no other replica holds the data")
    if role is Role.LEADER:
        target = pick_target(me, voters, status)
        if target is None:
            return Decision(Action.WAIT, why="no other voter is alive and fetching")
        return Decision(Action.HAND_OVER, target=target)
    if leader_id is None or leader_id == me:
        return Decision(Action.WAIT, why="no leader to fetch from")
    return Decision(Action.REPAIR)


class Repairer:
    """The per-node repair loop (`run`, a supervised task) and what it did, for metrics."""

    def __init__(
        self,
        replicas: Replicas,
        *,
        interval_s: float = REPAIR_INTERVAL_S,
        full_pass_s: float = FULL_PASS_INTERVAL_S,
    ) -> None:
        self._replicas = replicas
        self.interval_s = interval_s
        self.full_pass_s = full_pass_s
        self._wakeup = asyncio.Event()
        self.blocked: dict[tuple[str, int], str] = {}  # replicas that cannot repair now: why
        self.handovers = 0  # leaderships handed over to repair
        self._logged_at: dict[tuple[str, int], float] = {}
        self._reported: dict[tuple[str, int], set[tuple[str, int]]] = {}  # ranges logged

    def wake(self) -> None:
        """Look now (thread-safe through `loop.call_soon_threadsafe`)."""
        self._wakeup.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        full_at = loop.time()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), self.interval_s)
            if self._wakeup.is_set() or loop.time() - full_at >= self.full_pass_s:
                self._wakeup.clear()
                full_at = loop.time()
                await self.repair_once()
            elif self.blocked or self._reported:
                await self.repair_once(set(self.blocked) | set(self._reported))

    async def repair_once(self, only: set[tuple[str, int]] | None = None) -> None:
        """Look at every replica (`only`: at these, which ranges were found in or which
        wait)."""
        seen: set[tuple[str, int]] = set()
        replicas = self._replicas()
        if only is not None:
            replicas = [r for r in replicas if (r[0], r[1]) in only]
        for topic, partition, driver in list(replicas):
            key = (topic, partition)
            seen.add(key)
            if driver.stopped:
                continue
            try:
                await self._repair_one(key, driver)
            except ReplogError as exc:  # the replica stopped meanwhile, a disk error: later
                log(
                    _log,
                    "repair.failed",
                    logging.WARNING,
                    topic=topic,
                    partition=partition,
                    error=str(exc),
                )
        if only is not None:
            return  # (forgetting replicas gone is the full pass's)
        for key in list(self.blocked):
            if key not in seen:
                del self.blocked[key]
        for key in list(self._logged_at):
            if key not in self.blocked:
                del self._logged_at[key]  # blocked again later: logged at once
        for key in list(self._reported):
            if key not in seen:
                del self._reported[key]

    async def _repair_one(self, key: tuple[str, int], driver: ReplicaDriver) -> None:
        ranges = driver.log.corrupt_ranges()
        if not ranges and key not in self.blocked and key not in self._reported:
            return  # nothing found, nothing pending: the common case, and O(1)
        self._report(key, ranges)
        decision = self._decide(driver, ranges)
        if decision.action in (Action.WAIT, Action.IMPOSSIBLE):
            self._blocked(key, decision, ranges)
            return
        self.blocked.pop(key, None)
        if decision.action is Action.NONE:
            return
        topic, partition = key
        if decision.action is Action.HAND_OVER:
            assert decision.target is not None
            log(
                _log,
                "repair.handover",
                logging.WARNING,
                topic=topic,
                partition=partition,
                to=decision.target,
                corrupt=_describe(ranges),
            )
            epoch = driver.epoch
            await driver.transfer_leadership(decision.target)
            self.handovers += 1
            timeout_s = 2 * driver.config.election_timeout_ms_max / 1000
            if not await wait_until(
                lambda: driver.epoch > epoch or driver.role is not Role.LEADER, timeout_s
            ):
                return  # the target did not take over: the next round picks again
            await wait_until(
                lambda: driver.leader_id not in (None, driver.config.replica_id), timeout_s
            )
            decision = self._decide(driver, driver.log.corrupt_ranges())
            if decision.action is not Action.REPAIR:
                return
        log(
            _log,
            "repair.start",
            logging.WARNING,
            topic=topic,
            partition=partition,
            leader=driver.leader_id,
            corrupt=_describe(ranges),
        )
        if await driver.repair():
            log(
                _log,
                "repair.refetching",
                topic=topic,
                partition=partition,
                leader=driver.leader_id,
                log_start_offset=driver.log.log_start_offset,
            )

    def _report(self, key: tuple[str, int], ranges: list[IntegrityIssue]) -> None:
        """Log each corrupt range once, whoever found it (a read, the scrubber, recovery):
        the scrubber's own report comes only after its pass over the partition, which a
        quick repair can beat."""
        if not ranges:
            self._reported.pop(key, None)
            return
        reported = self._reported.setdefault(key, set())
        for issue in ranges:
            if (issue.segment, issue.start_position) not in reported:
                reported.add((issue.segment, issue.start_position))
                log(
                    _log,
                    "corrupt.found",
                    logging.ERROR,
                    topic=key[0],
                    partition=key[1],
                    segment=issue.segment,
                    start_position=issue.start_position,
                    end_position=issue.end_position,
                    first_offset=issue.first_offset,
                    end_offset=issue.end_offset,
                    detail=issue.detail,
                )

    def _decide(self, driver: ReplicaDriver, ranges: list[IntegrityIssue]) -> Decision:
        membership = driver.membership  # the log's latest: membership changes included
        return decide(
            driver.config.replica_id,
            membership.voters,
            membership.observers,
            driver.role,
            driver.leader_id,
            bool(ranges),
            driver.replica_status(),
        )

    def _blocked(
        self, key: tuple[str, int], decision: Decision, ranges: list[IntegrityIssue]
    ) -> None:
        self.blocked[key] = decision.why
        now = asyncio.get_running_loop().time()
        last = self._logged_at.get(key)
        if last is not None and now - last < WAITING_LOG_INTERVAL_S:
            return
        self._logged_at[key] = now
        event = "repair.impossible" if decision.action is Action.IMPOSSIBLE else "repair.waiting"
        log(
            _log,
            event,
            logging.ERROR if decision.action is Action.IMPOSSIBLE else logging.WARNING,
            topic=key[0],
            partition=key[1],
            why=decision.why,
            corrupt=_describe(ranges),
        )


def _describe(ranges: list[IntegrityIssue]) -> str:
    return ";".join(
        f"{i.segment}@{i.start_position}-{i.end_position}:offsets[{i.first_offset},{i.end_offset})"
        for i in ranges[:8]
    ) + ("" if len(ranges) <= 8 else f";+{len(ranges) - 8} more")


async def run_scrubber(
    logs: Callable[[], list[PartitionLog]],
    bytes_per_s: int,
    on_corrupt: Callable[[PartitionLog, IntegrityIssue], None],
    *,
    pass_interval_s: float = SCRUB_PASS_INTERVAL_S,
    poll_s: float = SCRUB_POLL_S,
) -> None:
    """Run the scrubber in a thread until cancelled (a supervised task). Cancelling sets
    its stop event and waits for the thread, which notices between two steps."""
    scrubber = Scrubber(logs, bytes_per_s=bytes_per_s, on_corrupt=on_corrupt)
    stop = threading.Event()
    await run_thread(stop, scrub_forever, scrubber, logs, stop, pass_interval_s, poll_s)


def scrub_forever(
    scrubber: Scrubber,
    logs: Callable[[], list[PartitionLog]],
    stop: threading.Event,
    pass_interval_s: float,
    poll_s: float,
) -> None:
    """A full pass every `pass_interval_s`, and in between, every `poll_s`, a first pass
    over each log opened since (a replica that starts after the node, e.g. once the
    metadata names it, is checked soon, not a pass interval later)."""
    seen: weakref.WeakSet[PartitionLog] = weakref.WeakSet()
    next_pass_at = time.monotonic()
    while not stop.is_set():
        if time.monotonic() >= next_pass_at:
            seen = weakref.WeakSet(logs())
            scrubber.run_pass(stop)
            next_pass_at = time.monotonic() + pass_interval_s
        else:
            for plog in logs():
                if plog not in seen and not stop.is_set():
                    seen.add(plog)
                    scrubber.scrub_partition(plog, stop)
        stop.wait(poll_s)


def corrupt_found(
    loop: asyncio.AbstractEventLoop, repairer: Repairer
) -> Callable[[PartitionLog, IntegrityIssue], None]:
    """The scrubber's `on_corrupt` (called in its thread): log it and wake the repairer."""

    def report(plog: PartitionLog, issue: IntegrityIssue) -> None:
        log(
            _log,
            "scrub.corrupt",
            logging.ERROR,
            topic=plog.topic,
            partition=plog.partition,
            segment=issue.segment,
            start_position=issue.start_position,
            end_position=issue.end_position,
            first_offset=issue.first_offset,
            end_offset=issue.end_offset,
            detail=issue.detail,
        )
        loop.call_soon_threadsafe(repairer.wake)

    return report
