"""`frames.next_offset`: the offset after the last frame of a read, without decoding."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replog import frames


@pytest.mark.parametrize(
    "values",
    [
        [b"x" * 100] * 50,
        [b""] * 7,
        [b"a", b"bb", b"ccc"],
        [b"ab", b"cd", b"e" * 14],  # same total size as a uniform run of 2-byte values
        [b"q" * 300],
    ],
)
def test_next_offset_is_one_past_the_last_frame(values: list[bytes]) -> None:
    buf = frames.encode(40, values)
    assert frames.next_offset(buf, 40) == 40 + len(values)


def test_next_offset_of_nothing_is_the_start() -> None:
    assert frames.next_offset(b"", 9) == 9


def test_control_frames_count_like_any_frame() -> None:
    buf = frames.encode(5, [b"m"] * 3, control=True) + frames.encode(8, [b"data"])
    assert frames.next_offset(buf, 5) == 9


@given(
    start=st.integers(min_value=0, max_value=2**40),
    runs=st.lists(
        st.tuples(st.booleans(), st.integers(0, 40), st.integers(1, 200)), min_size=1, max_size=12
    ),
)
@settings(max_examples=200, deadline=None)
def test_mixed_runs_end_where_a_full_scan_says(
    start: int, runs: list[tuple[bool, int, int]]
) -> None:
    """Batch headers (control) between runs of equal and unequal records: the run-hopping
    walk lands on the same last frame as `scan`, which checks every frame."""
    parts, offset = [], start
    for control, length, count in runs:
        values = [bytes([i % 251]) * (length + (i % 3 == 0 and length > 20)) for i in range(count)]
        parts.append(frames.encode(offset, values[:1] if control else values, control=control))
        offset += 1 if control else count
    buf = b"".join(parts)
    assert frames.next_offset(buf, start) == offset
    assert frames.last_offset(buf, frames.scan(buf, start)) + 1 == offset


def test_a_cut_tail_is_a_frame_error() -> None:
    buf = frames.encode(0, [b"h" * 36], control=True) + frames.encode(1, [b"v" * 10] * 40)
    with pytest.raises(frames.FrameError):
        frames.next_offset(buf[:-3], 0)
