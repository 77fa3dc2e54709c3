"""A group member's rules (`replog.client.member_rules`), once for both consumers: each
case is a script of events (joined, heartbeat answered or failed, reconcile, ...) and what
the core decides, with no threads, loop or network."""

from __future__ import annotations

from typing import Any

import pytest

from replog.client.member_rules import Answer, Heartbeat, Membership

A, B, C = ("t", 0), ("t", 1), ("t", 2)
SESSION_MS = 10_000


def answer(generation: int, *partitions: tuple[str, int], interval_ms: int = 1000) -> Answer:
    return Answer("m1", generation, frozenset(partitions), interval_ms, False)


# Steps (the member consumes `consuming`, a set the script keeps as the driver would):
#   ("joined", answer, now)               a JoinGroup answer
#   ("heartbeat", expected)               the heartbeat to send: (member, generation, owned) | None
#   ("answered", answer, now)             the last heartbeat's answer
#   ("failed", unknown_member, now)       the last heartbeat failed
#   ("needs_join", bool)
#   ("reconcile", (revoked, added) | None)   and the driver then consumes accordingly
#   ("lost", member)                      a commit answered UNKNOWN_MEMBER
#   ("auto_commit", now, due)
#   ("rebalances", n) / ("interval_s", s)
CASES: list[tuple[str, list[tuple[Any, ...]]]] = [
    (
        "a new member joins, takes its partitions, then heartbeats what it owns",
        [
            ("needs_join", True),
            ("heartbeat", None),
            ("joined", answer(1, A, B, interval_ms=2000), 0.0),
            ("needs_join", False),
            ("interval_s", 2.0),
            ("reconcile", (set(), {A, B})),
            ("rebalances", 1),
            ("reconcile", None),
            ("heartbeat", ("m1", 1, [A, B])),
        ],
    ),
    (
        "a new assignment revokes before it adds, and the heartbeat reports both until released",
        [
            ("joined", answer(1, A, B), 0.0),
            ("reconcile", (set(), {A, B})),
            ("heartbeat", ("m1", 1, [A, B])),
            ("answered", answer(2, B, C), 1.0),
            ("heartbeat", ("m1", 2, [A, B, C])),  # A not released yet
            ("reconcile", ({A}, {C})),
            ("heartbeat", ("m1", 2, [B, C])),
            ("rebalances", 2),
        ],
    ),
    (
        "the same answer again changes nothing",
        [
            ("joined", answer(1, A), 0.0),
            ("reconcile", (set(), {A})),
            ("heartbeat", ("m1", 1, [A])),
            ("answered", answer(1, A), 1.0),
            ("reconcile", None),
        ],
    ),
    (
        "UNKNOWN_MEMBER loses the membership: no heartbeat, join again, drop without reconcile",
        [
            ("joined", answer(1, A), 0.0),
            ("reconcile", (set(), {A})),
            ("heartbeat", ("m1", 1, [A])),
            ("failed", True, 1.0),
            ("heartbeat", None),
            ("needs_join", True),
            ("reconcile", None),
        ],
    ),
    (
        "failed heartbeats lose the membership only once a whole session went unanswered",
        [
            ("joined", answer(1, A), 0.0),
            ("reconcile", (set(), {A})),
            ("heartbeat", ("m1", 1, [A])),
            ("failed", False, 5.0),
            ("needs_join", False),
            ("heartbeat", ("m1", 1, [A])),
            ("failed", False, SESSION_MS / 1000 + 0.1),
            ("needs_join", True),
        ],
    ),
    (
        "an answer to a heartbeat of a member lost meanwhile is ignored",
        [
            ("joined", answer(1, A), 0.0),
            ("reconcile", (set(), {A})),
            ("heartbeat", ("m1", 1, [A])),
            ("lost", "m1"),
            ("answered", answer(2, B), 1.0),
            ("needs_join", True),
            ("joined", answer(3, C), 2.0),
            ("needs_join", False),
            ("reconcile", (set(), {C})),  # A was dropped (uncommitted) before the join
        ],
    ),
    (
        "a commit refused as another member's does not lose this one",
        [
            ("joined", answer(1, A), 0.0),
            ("lost", "m0"),
            ("needs_join", False),
        ],
    ),
    (
        "auto-commit is due every interval",
        [
            ("auto_commit", 4.9, False),
            ("auto_commit", 5.0, True),
            ("auto_commit", 9.9, False),
            ("auto_commit", 10.0, True),
        ],
    ),
]


@pytest.mark.parametrize("steps", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_member_rules(steps: list[tuple[Any, ...]]) -> None:
    member = Membership(auto_commit=True, auto_commit_interval_s=5.0, now=0.0)
    consuming: set[tuple[str, int]] = set()
    beat: Heartbeat | None = None
    for step in steps:
        op, *args = step
        where = f"step {step!r}"
        if op == "joined":
            member.joined(args[0], SESSION_MS, args[1])
        elif op == "heartbeat":
            beat = member.heartbeat(consuming)
            got = None if beat is None else (beat.member_id, beat.generation, beat.owned)
            assert got == args[0], where
        elif op == "answered":
            assert beat is not None, where
            member.heartbeat_answered(beat, args[0], args[1])
        elif op == "failed":
            assert beat is not None, where
            member.heartbeat_failed(beat, args[0], args[1])
        elif op == "needs_join":
            assert member.needs_join() is args[0], where
            if args[0]:
                consuming.clear()  # the driver drops everything before it joins
        elif op == "reconcile":
            plan = member.reconcile(consuming)
            assert plan == args[0], where
            if plan is not None and (plan[0] or plan[1]):
                consuming = (consuming - plan[0]) | plan[1]
                member.rebalanced()
        elif op == "lost":
            member.mark_lost(args[0])
        elif op == "auto_commit":
            assert member.auto_commit_due(args[0]) is args[1], where
        elif op == "rebalances":
            assert member.rebalances == args[0], where
        elif op == "interval_s":
            assert member.heartbeat_interval_s == args[0], where
        else:
            raise AssertionError(f"unknown step {op}")


def test_a_heartbeat_retries_for_half_the_session() -> None:
    beat = Heartbeat("m1", 1, [], 10.0)
    assert (beat.deadline_ms, beat.timeout_s) == (5000, 5.0)


def test_without_auto_commit_no_commit_is_ever_due() -> None:
    member = Membership(auto_commit=False, auto_commit_interval_s=0.0, now=0.0)
    assert not member.auto_commit_due(100.0)
