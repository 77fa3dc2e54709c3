"""The reassignment controller: moves a partition's replicas to the target in the metadata.

A `reassign_partition` command (see `metadata`) records a partition's target replicas. The
replicas the target adds start as observers (`node._make_replica`); the node that leads the
partition changes its membership (`ReplicaDriver.change_membership`, one voter at a time)
step by step until it equals the target, then proposes `complete_reassignment`, after which
the reconcilers of the nodes left out delete their replicas.

`decide(state) -> step` is the pure part: from the partition's current membership (the
latest in its log), the target and which replicas are caught up, the next step is one of

1. `Change(voters, joining)`: make the target's new replicas observers (and drop observers
   that are not in the target, e.g. after a cancel);
2. `Wait`: no joining observer has caught up yet (holds every committed record and fetched
   within `handover.FRESH_MS`);
3. `Change(voters + [o], ...)`: promote the first caught-up joining observer (target order);
4. `Change(voters - [v], ...)`: once nobody joins, remove a voter not in the target, other
   replicas before the leader itself;
5. `Transfer(t)`: the leader is the last voter to remove: hand leadership to a caught-up
   voter of the target, whose controller goes on from there;
6. `Complete(target)`: the membership is the target: once its record is committed, propose
   the completion.

Every step is read from the partition's log (its membership) and the metadata (its target),
never from this controller's memory, so a leader change or a restart half way resumes where
the log is. `Reassigner.run` (one supervised task per node) applies `decide` to each
partition being reassigned that this node leads and serves. Retriable refusals (the core's
MEMBERSHIP_CHANGE_BUSY: another change not committed yet, the replica not caught up; a lost
leadership; a metadata leader unknown) are retried with exponential backoff; other typed
refusals are logged at warning and shown in DescribeTopic (`progress`), and retried at the
longest backoff (the target may be cancelled meanwhile). Anything else is a bug: it ends the
node (`supervisor`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from replog.errors import ReplogError
from replog.server.logs import log
from replog.server.meta.metadata import MetadataImage, TopicMeta
from replog.server.metrics import Joining, Moving
from replog.server.partitions.handover import FRESH_MS
from replog.server.partitions.replica_manager import ReplicaManager
from replog.server.partitions.replicated import ReplicatedPartition

_log = logging.getLogger("replog.server.reassignment")

POLL_S = 0.1  # between passes while some partition is being reassigned
BACKOFF_S_MIN = 0.1
BACKOFF_S_MAX = 10.0
SETTLE_S = 1.0  # after a hand-over or a completion, before the same partition's next step

Complete_ = Callable[[str, int, int, tuple[int, ...]], Awaitable[None]]


# -- the pure part ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class State:
    me: int  # the partition's leader (this node)
    voters: tuple[int, ...]  # the current membership (the latest of the log)
    observers: tuple[int, ...]
    target: tuple[int, ...]  # preferred leader first
    caught_up: frozenset[int]  # other replicas holding every committed record, fresh


@dataclass(frozen=True, slots=True)
class Change:
    voters: tuple[int, ...]
    observers: tuple[int, ...]
    why: str


@dataclass(frozen=True, slots=True)
class Transfer:
    target: int


@dataclass(frozen=True, slots=True)
class Complete:
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Wait:
    why: str


Step = Change | Transfer | Complete | Wait


def decide(state: State) -> Step:
    """The next step that moves the membership towards `state.target` (module docstring)."""
    voters, observers, target = state.voters, state.observers, state.target
    joining = tuple(n for n in target if n not in voters)
    if set(observers) != set(joining):
        return Change(voters, joining, f"observers {list(observers)} -> {list(joining)}")
    if joining:
        ready = [n for n in joining if n in state.caught_up]
        if not ready:
            return Wait(f"observers {list(joining)} catching up")
        new = ready[0]
        rest = tuple(n for n in observers if n != new)
        return Change((*voters, new), rest, f"promote {new} to voter")
    leaving = [v for v in voters if v not in target]
    if not leaving:
        return Complete(target)
    others = [v for v in leaving if v != state.me]
    if others:
        gone = others[0]
        return Change(tuple(v for v in voters if v != gone), observers, f"remove voter {gone}")
    heirs = [v for v in target if v in voters and v in state.caught_up and v != state.me]
    if not heirs:
        return Wait(f"no caught-up voter of {list(target)} to hand leadership to")
    return Transfer(heirs[0])


def caught_up(
    high_watermark: int, status: Sequence[tuple[int, int, int, int]], me: int
) -> frozenset[int]:
    """The replicas of a leader's `replica_status()` rows (id, acked LEO, lag, ms since
    fetch) that hold every committed record and fetched within `FRESH_MS`."""
    return frozenset(
        r
        for r, acked, _lag, ago_ms in status
        if r != me and acked >= high_watermark and 0 <= ago_ms <= FRESH_MS
    )


# -- the loop -------------------------------------------------------------------------------


@dataclass(slots=True)
class Progress:
    """What this node's controller last did for a partition it leads (for DescribeTopic)."""

    step: str
    error: str = ""
    attempts: int = 0  # failed attempts in a row
    retry_at: float = 0.0
    throttled: int = 0  # fetches of joining observers dropped by the throttle


def lag_bytes(lag_records: int, log_bytes: int, log_records: int) -> int:
    """About the bytes of `lag_records` records of a log that holds `log_records` records in
    `log_bytes` bytes (its average record size; the throttle's and the metrics' estimate)."""
    return lag_records * log_bytes // max(1, log_records)


class Throttle:
    """The catch-up throttle of one partition's joining observers (setting
    `reassignment_fetch_bytes_per_s`): a token bucket of bytes that may owe one fetch.

    The leader lets a fetch of a joining observer through while the bucket is not in debt,
    and takes what the fetch costs (the bucket may go below zero by that much); otherwise
    the fetch is dropped, and the observer asks again after its fetch retry interval (the
    protocol treats it as a lost message). A fetch costs what it lags by, estimated from
    the log's average record size, at most one answer (`answer_bytes`): a caught-up
    observer's fetch costs nothing. The bucket holds one second of the rate (at least one
    answer): what accrues while a dropped observer waits out its retry interval is kept, and
    a fetch is never refused for costing more than the bucket holds, so the rate achieved
    is the setting whatever the retry interval, while it is under a second.

    (Before: a bucket one answer deep that let a fetch through only if it held the whole
    cost: each refusal lost the rest of a retry interval, and the rate achieved was at
    most about one answer per retry interval: 0.61 of 128 KiB/s, 0.15 of 512 KiB/s with
    64 KiB answers and the default 800 ms retry, `bench/reassignment_throttle.py`.)"""

    def __init__(
        self, bytes_per_s: int, answer_bytes: int, progress: Progress, clock: Callable[[], float]
    ) -> None:
        assert bytes_per_s > 0 and answer_bytes > 0
        self.bytes_per_s = bytes_per_s
        self.answer_bytes = answer_bytes
        self.depth_bytes = max(bytes_per_s, answer_bytes)
        self.progress = progress
        self._clock = clock
        self._tokens = float(self.depth_bytes)
        self._at = clock()

    def allow(self, lag_bytes: int) -> bool:
        """Whether a fetch that lags by about `lag_bytes` may be answered now."""
        if lag_bytes <= 0:
            return True
        cost = min(lag_bytes, self.answer_bytes)
        now = self._clock()
        refill = (now - self._at) * self.bytes_per_s
        self._tokens = min(float(self.depth_bytes), self._tokens + refill)
        self._at = now
        if self._tokens >= 0:
            self._tokens -= cost
            return True
        self.progress.throttled += 1
        return False


class Reassigner:
    def __init__(
        self,
        node_id: int,
        image: MetadataImage,
        replicas: ReplicaManager,
        complete: Complete_,
        *,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        fetch_bytes_per_s: int = 0,
        answer_bytes: int = 1 << 20,
    ) -> None:
        """`complete(topic, topic_id, partition, replicas)` proposes the completion command
        on the metadata leader (forwarded there when that is another node).
        `fetch_bytes_per_s` (0: none): the catch-up throttle of joining observers
        (`Throttle`), for answers of `answer_bytes`."""
        self.fetch_bytes_per_s = fetch_bytes_per_s
        self.answer_bytes = answer_bytes
        # (topic, partition) -> the throttle of a partition led here while it is reassigned
        self.throttles: dict[tuple[str, int], Throttle] = {}
        self.node_id = node_id
        self.image = image
        self.replicas = replicas
        self._complete = complete
        self.timeout_s = timeout_s
        self._clock = clock
        self.progress: dict[tuple[str, int], Progress] = {}
        self._wake = asyncio.Event()
        self._rescan = True  # the metadata changed since `_keys` was made
        self._keys: list[tuple[str, int]] = []  # the partitions with a target, as last seen

    def wake(self) -> None:
        """The metadata changed: look again now."""
        self._rescan = True
        self._wake.set()

    def _moving(self) -> list[tuple[TopicMeta, int, tuple[int, ...]]]:
        """The partitions with a target: the image's index of them (`MetadataImage.moving`,
        kept by its apply) read again after the metadata changed (`wake`: targets change
        nowhere else), so that a pass costs the moves, never the topics."""
        if self._rescan:
            self._rescan = False
            self._keys = sorted(self.image.moving)
        out = []
        for name, p in self._keys:
            meta = self.image.topics.get(name)
            target = None if meta is None else meta.targets.get(p)
            if meta is not None and target is not None:
                out.append((meta, p, target))
        return out

    async def run(self) -> None:
        while True:
            busy = await self.run_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_S if busy else None)
            self._wake.clear()

    def status(self, topic: str, partition: int) -> Progress | None:
        return self.progress.get((topic, partition))

    async def run_once(self) -> bool:
        """One pass; returns whether some partition is being reassigned."""
        busy = False
        live: set[tuple[str, int]] = set()
        for meta, p, target in self._moving():
            busy = True
            live.add((meta.name, p))
            part = self.replicas.replica(meta, p)
            if part is None or part.closed or not part.is_leader:
                live.discard((meta.name, p))
                continue
            await self._step(meta, p, target, part)
        for key in [k for k in self.progress if k not in live]:
            del self.progress[key]
        for key in [k for k in self.throttles if k not in live]:
            del self.throttles[key]
        if self.fetch_bytes_per_s:
            for key in live:
                if key not in self.throttles:
                    self.throttles[key] = Throttle(
                        self.fetch_bytes_per_s, self.answer_bytes, self.progress[key], self._clock
                    )
        return busy

    def snapshot(self) -> tuple[int, list[Moving]]:
        """(partitions with a target in this node's image, those of them led here): what the
        metrics export (`metrics.watch_reassignments`). Called from the metrics thread: it
        only reads, and copies what it iterates."""
        in_progress = 0
        moving = []
        for meta in list(self.image.topics.values()):
            for p, target in list(meta.targets.items()):
                in_progress += 1
                part = self.replicas.replica(meta, p)
                if part is None or part.closed or not part.is_leader:
                    continue
                progress = self.progress.get((meta.name, p))
                moving.append(
                    Moving(
                        meta.name,
                        p,
                        _joining(part, target),
                        progress.attempts if progress else 0,
                        progress.throttled if progress else 0,
                    )
                )
        return in_progress, moving

    def throttle(self, topic: str, partition: int, replica_id: int) -> Throttle | None:
        """The throttle for a fetch of `replica_id` on a partition led here (None: none)."""
        throttle = self.throttles.get((topic, partition))
        if throttle is None:
            return None
        part = self.replicas.replicas.get((topic, partition))
        if part is None or replica_id not in part.driver.membership.observers:
            return None
        return throttle

    async def _step(
        self, meta: TopicMeta, p: int, target: tuple[int, ...], part: ReplicatedPartition
    ) -> None:
        key = (meta.name, p)
        progress = self.progress.setdefault(key, Progress("starting"))
        if progress.retry_at > self._clock():
            return
        driver = part.driver
        membership = driver.membership
        state = State(
            self.node_id,
            membership.voters,
            membership.observers,
            target,
            caught_up(part.log.high_watermark, driver.replica_status(), self.node_id),
        )
        step = decide(state)
        try:
            if isinstance(step, Change):
                progress.step = step.why
                await driver.change_membership(step.voters, step.observers, self.timeout_s)
            elif isinstance(step, Transfer):
                progress.step = f"hand leadership to {step.target}"
                await driver.transfer_leadership(step.target)
            elif isinstance(step, Complete):
                progress.step = "completing"
                # The latest membership may not be committed yet (an earlier change's caller
                # timed out): asking for it again appends nothing and returns once it is, so
                # the replicas left out are deleted only after their removal committed.
                await driver.change_membership(
                    membership.voters, membership.observers, self.timeout_s
                )
                await self._complete(meta.name, meta.topic_id, p, step.replicas)
            else:
                progress.step = step.why
                return
        except ReplogError as exc:
            self._failed(meta.name, p, progress, step, exc)
            return
        log(_log, "reassignment.step", topic=meta.name, partition=p, step=progress.step)
        progress.error, progress.attempts = "", 0
        # A hand-over takes an election; a completion takes its command's way to this
        # node's image: neither is asked for again before then.
        settle_s = 0.0 if isinstance(step, Change) else SETTLE_S
        progress.retry_at = self._clock() + settle_s

    def _failed(self, topic: str, p: int, progress: Progress, step: Step, exc: ReplogError) -> None:
        progress.attempts += 1
        if exc.retriable:
            delay_s = min(BACKOFF_S_MAX, BACKOFF_S_MIN * 2 ** (progress.attempts - 1))
            level = logging.INFO
        else:
            delay_s = BACKOFF_S_MAX
            level = logging.WARNING
        progress.error = f"{exc.reason}: {exc.message}"
        progress.retry_at = self._clock() + delay_s
        log(
            _log,
            "reassignment.refused",
            level,
            topic=topic,
            partition=p,
            step=repr(step),
            error=progress.error,
            retriable=exc.retriable,
            retry_in_ms=int(delay_s * 1000),
        )


def _joining(part: ReplicatedPartition, target: tuple[int, ...]) -> tuple[Joining, ...]:
    """The replicas of `target` that are not voters of `part` (led here) yet, and their lag."""
    driver, plog = part.driver, part.log
    leo = plog.log_end_offset
    acked = {r: lag for r, _leo, lag, _ago_ms in driver.replica_status()}
    held, size = leo - plog.log_start_offset, plog.size_bytes
    out = []
    for n in target:
        if n in driver.membership.voters:
            continue
        lag = acked.get(n, leo)  # not an observer yet: it has nothing
        out.append(Joining(n, lag, lag_bytes(lag, size, held)))
    return tuple(out)


def describe(
    meta: TopicMeta, p: int, progress: Mapping[tuple[str, int], Progress]
) -> tuple[tuple[int, ...], str, str]:
    """(target, step, error) of `meta`/`p` for DescribeTopic ((), "", "": none)."""
    target = meta.targets.get(p, ())
    if not target:
        return (), "", ""
    found = progress.get((meta.name, p))
    if found is None:
        return target, "", ""
    step = found.step
    if found.throttled:
        step += f" (throttled fetches: {found.throttled})"
    return target, step, found.error
