"""The reassignment controller's loop: it acts only on partitions this node leads and
serves, retries the core's busy refusals with backoff, reports a refusal it cannot retry
away, and proposes the completion once the membership is the target."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from replog.errors import MembershipChangeBusyError, MembershipChangeRefusedError, ReplogError
from replog.replication.membership import Membership
from replog.server.cluster.reassignment import BACKOFF_S_MAX, Progress, Reassigner, Throttle
from replog.server.meta.metadata import (
    CompleteReassignment,
    CreateTopic,
    MetadataImage,
    ReassignPartition,
    TopicMeta,
)


@dataclass
class FakeDriver:
    membership: Membership
    status: list[tuple[int, int, int, int]]
    refusals: list[ReplogError] = field(default_factory=list)
    changes: list[Membership] = field(default_factory=list)
    transfers: list[int] = field(default_factory=list)

    def replica_status(self) -> list[tuple[int, int, int, int]]:
        return self.status

    async def change_membership(self, voters: Any, observers: Any, timeout_s: float) -> int:
        if self.refusals:
            raise self.refusals.pop(0)
        self.membership = Membership(tuple(voters), tuple(observers))
        self.changes.append(self.membership)
        return 1

    async def transfer_leadership(self, target: int) -> None:
        self.transfers.append(target)


@dataclass
class FakeLog:
    high_watermark: int = 10


@dataclass
class FakePart:
    driver: FakeDriver
    is_leader: bool = True
    closed: bool = False
    log: FakeLog = field(default_factory=FakeLog)


class FakeReplicas:
    def __init__(self, part: FakePart) -> None:
        self.part = part

    def replica(self, meta: TopicMeta, partition: int) -> FakePart:
        return self.part


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def setup(driver: FakeDriver) -> tuple[Reassigner, FakePart, Clock, list[tuple[Any, ...]]]:
    image = MetadataImage()
    image.apply(3, CreateTopic("a", 1, ((1, 2, 3),)))
    image.apply(4, ReassignPartition("a", 3, 0, (2, 3, 4)))
    completed: list[tuple[Any, ...]] = []

    async def complete(*args: Any) -> None:
        completed.append(args)

    part = FakePart(driver)
    clock = Clock()
    controller = Reassigner(
        1,
        image,
        FakeReplicas(part),
        complete,
        timeout_s=1.0,
        clock=clock,  # type: ignore[arg-type]
    )
    return controller, part, clock, completed


def test_busy_refusals_are_retried_with_backoff_then_the_leader_hands_over() -> None:
    caught_up = [(1, 10, 0, 0), (2, 10, 0, 5), (3, 10, 0, 5), (4, 10, 0, 5)]
    driver = FakeDriver(Membership((1, 2, 3)), caught_up)
    busy = MembershipChangeBusyError("busy", refusal="MEMBERSHIP_CHANGE_IN_PROGRESS")
    driver.refusals = [busy]
    controller, _part, clock, completed = setup(driver)

    async def scenario() -> None:
        await controller.run_once()
        progress = controller.status("a", 0)
        assert progress is not None and "MEMBERSHIP_CHANGE_BUSY" in progress.error
        await controller.run_once()  # backing off: nothing tried
        assert driver.changes == []
        for _ in range(6):
            clock.now += BACKOFF_S_MAX
            await controller.run_once()
        # observer 4, promoted, then the leader (1) must go: it hands over to 2 and waits
        assert driver.changes == [Membership((1, 2, 3), (4,)), Membership((1, 2, 3, 4))]
        assert set(driver.transfers) == {2}
        assert completed == []
        progress = controller.status("a", 0)
        assert progress is not None and progress.error == ""

    asyncio.run(scenario())


def test_a_refusal_that_no_retry_fixes_is_reported_and_a_follower_does_nothing() -> None:
    driver = FakeDriver(Membership((1, 2, 3)), [])
    driver.refusals = [MembershipChangeRefusedError("no", refusal="INVALID_MEMBERSHIP")]
    controller, part, clock, _completed = setup(driver)

    async def scenario() -> None:
        await controller.run_once()
        progress = controller.status("a", 0)
        assert progress is not None
        assert progress.error.startswith("MEMBERSHIP_CHANGE_REFUSED")
        assert progress.retry_at == BACKOFF_S_MAX
        part.is_leader = False
        clock.now += BACKOFF_S_MAX
        await controller.run_once()
        assert driver.changes == []

    asyncio.run(scenario())


def test_the_membership_equal_to_the_target_is_completed_on_the_metadata_leader() -> None:
    driver = FakeDriver(Membership((2, 3, 4)), [])
    controller, _part, _clock, completed = setup(driver)

    async def scenario() -> None:
        await controller.run_once()
        assert completed == [("a", 3, 0, (2, 3, 4))]
        # it waited for the membership's record to commit (asking for the same one again)
        assert driver.changes == [Membership((2, 3, 4))]

    asyncio.run(scenario())


def test_the_catch_up_throttle_lets_through_what_its_rate_allows() -> None:
    clock = Clock()
    progress = Progress("observers [4] catching up")
    throttle = Throttle(1000, 4000, progress, clock)  # 4000 deep: one answer > 1 s of rate
    assert throttle.allow(0)  # a caught-up observer costs nothing
    assert throttle.allow(10_000)  # a full answer (4000) from a full bucket: 0 left
    assert throttle.allow(100)  # not in debt yet: let through, 100 owed
    assert not throttle.allow(100)
    assert throttle.allow(0)  # (caught up: never refused)
    clock.now += 0.1  # +100 bytes: out of debt
    assert throttle.allow(4000)  # a whole answer, though the bucket holds none: 4000 owed
    clock.now += 3.9
    assert not throttle.allow(1)
    clock.now += 10.0  # full again (the bucket holds one answer here, never more)
    assert throttle.allow(4000) and throttle.allow(1) and not throttle.allow(1)
    assert progress.throttled == 3


def test_the_throttle_keeps_to_its_rate_whatever_the_retry_interval() -> None:
    """An observer that asks for a full answer at once after each one it gets, and after
    `retry_s` after each refusal, gets the setting's rate over a minute (once the bucket's
    first second is spent), where a bucket that refused what it could not pay in full gave
    about one answer per retry interval."""
    for rate, answer, retry_s in [(131_072, 65_536, 0.8), (524_288, 65_536, 0.8)]:
        for retry in (retry_s, 0.3, 0.05):
            clock = Clock()
            throttle = Throttle(rate, answer, Progress(""), clock)
            got = 0
            while clock.now < 60.0:
                if throttle.allow(answer):
                    got += answer
                    clock.now += 0.001  # the answer's round trip
                else:
                    clock.now += retry
            burst = max(rate, answer) + answer
            assert rate * 60 <= got <= rate * 60 + burst + answer, (rate, retry, got / 60)


def test_a_throttled_move_throttles_only_the_joining_observers_of_partitions_led_here() -> None:
    driver = FakeDriver(Membership((1, 2, 3), (4,)), [(4, 0, 10, 5)])
    controller, part, _clock, _completed = setup(driver)
    controller.fetch_bytes_per_s = 1000
    controller.replicas.replicas = {("a", 0): part}  # type: ignore[attr-defined]

    async def scenario() -> None:
        await controller.run_once()
        assert controller.throttle("a", 0, 4) is not None
        assert controller.throttle("a", 0, 2) is None  # a voter
        part.is_leader = False
        await controller.run_once()
        assert controller.throttle("a", 0, 4) is None

    asyncio.run(scenario())


def test_a_pass_looks_at_every_topic_only_after_the_metadata_changed() -> None:
    driver = FakeDriver(Membership((1, 2, 3), (4,)), [(4, 0, 10, 5)])
    controller, _part, _clock, _completed = setup(driver)
    image = controller.image

    async def scenario() -> None:
        assert await controller.run_once()
        assert controller.status("a", 0) is not None
        image.apply(5, CreateTopic("b", 1, ((1, 2, 3),)))
        image.apply(6, ReassignPartition("b", 5, 0, (1, 2, 4)))
        await controller.run_once()  # the same partitions as before: a/0
        assert controller.status("b", 0) is None
        controller.wake()  # (the node wakes it after each batch of commands it applies)
        await controller.run_once()
        assert controller.status("b", 0) is not None
        image.apply(7, CompleteReassignment("a", 3, 0, (2, 3, 4)))
        image.apply(8, CompleteReassignment("b", 5, 0, (1, 2, 4)))
        assert not await controller.run_once()  # a target gone is never acted on
        assert controller.progress == {}

    asyncio.run(scenario())
