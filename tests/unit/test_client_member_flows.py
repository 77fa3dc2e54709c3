"""The group member's flows (`member_flows`), driven step by step as both consumers do."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from typing import Any

import pytest

from replog.client import member_flows as flows
from replog.client.client_calls import drive_blocking
from replog.client.fetch_rules import Positions, fetched
from replog.client.group_rpcs import CoordinatorMap, GroupRpc
from replog.client.group_wire import CommittedOffset
from replog.client.member_rules import Answer, Member, Membership
from replog.client.results import FetchResult
from replog.client.retry import RetryPolicy
from replog.errors import IllegalGenerationError, LeaderUnknownError, OffsetOutOfRangeError


class Settings:
    timeout_s = 30.0
    attempt_timeout_s = 2.0
    retry = RetryPolicy()


class FakeConsumer(Member):
    group, topics, client_id = "g", ["t"], "test"
    session_timeout_ms = rebalance_timeout_ms = 0
    auto_commit, auto_offset_reset = True, "earliest"

    def __init__(self) -> None:
        self.calls = CoordinatorMap(Settings())
        self._member = Membership(True, 5.0, 0.0)
        self._pos = Positions(10)
        self._poll_api = False
        self.lock = contextlib.nullcontext()
        self.clock = 0.0
        self.revoked: list[set[tuple[str, int]]] = []
        self.assigned: list[set[tuple[str, int]]] = []
        self.on_revoke = self.revoked.append
        self.on_assign = self.assigned.append

    def now(self) -> float:
        return self.clock


def script(answers: dict[str, Callable[[Any], Any]]) -> tuple[list[str], Callable[[Any], Any]]:
    """A driver's `perform` that records each step's name and answers from `answers`."""
    seen: list[str] = []

    def perform(step: Any) -> Any:
        name = step.method if isinstance(step, GroupRpc) else type(step).__name__
        seen.append(name)
        return answers.get(name, lambda _s: None)(step)

    return seen, perform


def run(flow: Generator[Any, Any, Any], perform: Callable[[Any], Any]) -> Any:
    return drive_blocking(flow, perform)


def joined(partitions: set[tuple[str, int]]) -> Callable[[Any], Any]:
    return lambda _step: (Answer("m1", 1, frozenset(partitions), 3000, False), 10_000)


def test_a_new_member_joins_then_takes_its_partitions_from_the_committed_offsets() -> None:
    c = FakeConsumer()
    committed = [CommittedOffset("t", 0, 7, "", 0), CommittedOffset("t", 1, -1, "", 0)]
    seen, perform = script(
        {
            "JoinGroup": joined({("t", 0), ("t", 1)}),
            "FetchCommittedOffsets": lambda _s: committed,
            "ResetOffset": lambda step: 3,  # "earliest" of t/1
        }
    )
    run(flows.maintain(c), perform)
    assert seen == [
        "JoinGroup",
        "StartHeartbeats",
        "FetchCommittedOffsets",
        "Restart",  # t/0 from its committed offset
        "ResetOffset",  # t/1 has none: from auto_offset_reset
        "Restart",
        "HeartbeatNow",
    ]
    assert (c.member_id, c._pos.position(("t", 0)), c._pos.position(("t", 1))) == ("m1", 7, 3)
    assert c.assigned == [{("t", 0), ("t", 1)}] and c.revoked == []


def test_a_revoked_partition_is_committed_before_on_revoke_and_dropped() -> None:
    c = FakeConsumer()
    first = {
        "JoinGroup": joined({("t", 0)}),
        "FetchCommittedOffsets": lambda _s: [],
        "ResetOffset": lambda _s: 0,
    }
    run(flows.maintain(c), script(first)[1])
    c._pos.partitions[("t", 0)].consumed = 5
    c._member.take(Answer("m1", 2, frozenset(), 3000, False))  # t/0 goes elsewhere
    commits: list[Any] = []
    seen, perform = script({"CommitOffsets": lambda step: commits.append(step.request)})
    run(flows.maintain(c), perform)
    assert seen == ["CommitOffsets", "StopFetch", "HeartbeatNow"]
    assert [(o.partition, o.offset) for o in commits[0].offsets] == [(0, 5)]
    assert commits[0].generation == 2
    assert c.revoked == [{("t", 0)}] and not c._pos.partitions


def test_a_commit_crossed_by_a_heartbeat_answer_waits_for_it_and_commits_once_more() -> None:
    c = FakeConsumer()
    c._member.joined(Answer("m1", 1, frozenset(), 3000, False), 10_000, 0.0)
    tries: list[int] = []

    def commit(step: Any) -> None:
        tries.append(step.request.generation)
        if len(tries) == 1:
            c._member.take(Answer("m1", 2, frozenset(), 3000, False))  # the heartbeat's news
            raise IllegalGenerationError("generation 1 is over")

    seen, perform = script({"CommitOffsets": commit})
    run(flows.commit(c, {("t", 0): 4}), perform)
    assert seen == ["CommitOffsets", "AwaitHeartbeat", "CommitOffsets"] and tries == [1, 2]


def test_a_failed_auto_commit_is_tried_again_next_time_and_leave_is_best_effort() -> None:
    c = FakeConsumer()
    c._member.joined(Answer("m1", 1, frozenset(), 3000, False), 10_000, 0.0)
    c._member.changed = False
    c.clock = 6.0  # an auto-commit is due
    c._pos.add(("t", 0), 2)
    c._member.assigned = frozenset({("t", 0)})

    def refused(_step: Any) -> None:
        raise LeaderUnknownError("no coordinator")

    seen, perform = script({"CommitOffsets": refused, "LeaveGroup": refused})
    run(flows.maintain(c), perform)
    run(flows.leave(c), perform)
    assert seen == ["CommitOffsets", "CommitOffsets", "LeaveGroup"]


def test_records_reset_a_partition_out_of_range_and_stop_at_a_rebalance() -> None:
    c = FakeConsumer()
    state = c._pos.add(("t", 0), 100)
    epoch = c._pos.restart(state)
    queue: list[object] = [(("t", 0), epoch, OffsetOutOfRangeError("gone"))]
    seen, perform = script(
        {"Take": lambda _s: queue.pop(0) if queue else None, "ResetOffset": lambda _s: 40}
    )
    assert run(flows.records(c, 0.0), perform) == []
    assert seen == ["Take", "ResetOffset", "Restart", "Take"]
    assert c._pos.position(("t", 0)) == 40


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (FetchResult([], 9, 0, 9), (9, 0.0, False, False)),  # nothing new: again at once
        (LeaderUnknownError("election"), (5, 0.5, False, False)),  # a while, then again
        (OffsetOutOfRangeError("gone"), (5, 0.0, True, True)),  # the caller decides
    ],
)
def test_the_fetch_loops_rule(item: Any, expected: tuple[Any, ...]) -> None:
    after = fetched(item, 5, 500)
    assert (after.offset, after.pause_s, after.deliver, after.last) == expected
