"""`frames.next_offset`: the offset after the last frame of a read, without decoding."""

from __future__ import annotations

import pytest

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
