"""Majority math: the high watermark a leader may publish."""

from __future__ import annotations

from collections.abc import Iterable


def majority_match(matches: Iterable[int], majority: int) -> int:
    """The largest X such that at least `majority` of `matches` are `>= X`."""
    ordered = sorted(matches, reverse=True)
    assert 0 < majority <= len(ordered), (majority, ordered)
    return ordered[majority - 1]


def next_high_watermark(
    current: int, matches: Iterable[int], majority: int, control_offset: int
) -> int:
    """The leader's HW after a match change: majority match, only once it is past this
    epoch's control record (`X > control_offset`), never backwards."""
    candidate = majority_match(matches, majority)
    if candidate <= control_offset:
        return current
    return max(current, candidate)
