"""The reassignment controller's decisions: from a partition's membership, its target and
who is caught up, the next step; replayed to the end, every path reaches the target one
voter at a time and never removes the leader."""

from __future__ import annotations

import pytest

from replog.server.cluster.reassignment import (
    Change,
    Complete,
    State,
    Transfer,
    Wait,
    caught_up,
    decide,
)


def state(
    voters: tuple[int, ...],
    observers: tuple[int, ...] = (),
    target: tuple[int, ...] = (2, 3, 4),
    me: int = 1,
    ready: tuple[int, ...] = (1, 2, 3, 4, 5, 6),
) -> State:
    return State(me, voters, observers, target, frozenset(ready))


def test_the_new_replicas_join_as_observers_first() -> None:
    assert decide(state((1, 2, 3))) == Change((1, 2, 3), (4,), "observers [] -> [4]")


def test_an_observer_is_promoted_only_once_it_has_caught_up() -> None:
    assert isinstance(decide(state((1, 2, 3), (4,), ready=(2, 3))), Wait)
    step = decide(state((1, 2, 3), (4,)))
    assert step == Change((1, 2, 3, 4), (), "promote 4 to voter")


def test_old_voters_are_removed_after_the_promotions_other_replicas_before_the_leader() -> None:
    step = decide(state((1, 2, 3, 4), target=(4, 2, 1)))
    assert step == Change((1, 2, 4), (), "remove voter 3")


def test_a_leader_that_must_go_hands_over_to_a_caught_up_voter_of_the_target() -> None:
    assert decide(state((1, 2, 3, 4), ready=(3, 4))) == Transfer(3)
    assert isinstance(decide(state((1, 2, 3, 4), ready=())), Wait)


def test_the_membership_equal_to_the_target_completes() -> None:
    assert decide(state((3, 4, 2), me=2)) == Complete((2, 3, 4))


def test_a_cancel_drops_the_observers_then_the_voters_not_in_the_target() -> None:
    back = (1, 2, 3)
    assert decide(state((1, 2, 3), (4,), target=back)) == Change(
        (1, 2, 3), (), "observers [4] -> []"
    )
    assert decide(state((1, 2, 3, 4), target=back)) == Change((1, 2, 3), (), "remove voter 4")


def run(start: State, max_steps: int = 50) -> list[tuple[int, ...]]:
    """Apply the steps as a perfect cluster would; the voter sets seen on the way."""
    s, seen = start, [start.voters]
    for _ in range(max_steps):
        step = decide(s)
        if isinstance(step, Complete):
            assert set(s.voters) == set(s.target) and not s.observers
            return seen
        if isinstance(step, Transfer):
            s = State(step.target, s.voters, s.observers, s.target, s.caught_up | {s.me})
            continue
        assert isinstance(step, Change), step
        assert len(set(step.voters) ^ set(s.voters)) <= 1, (s, step)  # one voter at a time
        assert s.me in step.voters  # the core refuses LEADER_REMOVAL: never asked
        s = State(s.me, step.voters, step.observers, s.target, s.caught_up)
        seen.append(s.voters)
    raise AssertionError(f"no completion from {start}")


@pytest.mark.parametrize(
    ("voters", "target", "me"),
    [
        ((1, 2, 3), (2, 3, 4), 2),
        ((1, 2, 3), (2, 3, 4), 1),
        ((1, 2, 3), (4, 5, 6), 1),
        ((1, 2, 3), (4,), 3),
        ((1,), (2, 3, 4), 1),
        ((1, 2, 3), (3, 2, 1, 4, 5), 2),
    ],
)
def test_every_reassignment_reaches_its_target_never_below_the_smaller_size(
    voters: tuple[int, ...], target: tuple[int, ...], me: int
) -> None:
    seen = run(state(voters, target=target, me=me))
    assert set(seen[-1]) == set(target)
    assert min(map(len, seen)) >= min(len(voters), len(target))


def test_caught_up_means_every_committed_record_and_a_fresh_fetch() -> None:
    rows = [(1, 100, 0, 0), (2, 90, 10, 5), (3, 80, 20, 5), (4, 95, 5, -1), (5, 99, 1, 99_999)]
    assert caught_up(90, rows, me=1) == frozenset({2})
