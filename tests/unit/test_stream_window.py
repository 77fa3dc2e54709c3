"""StreamFrom reply windows: small for idle readers, large for readers catching up that
asked for it, and never more than the node's pool above the floors, whatever readers do."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from replog.server.edge.limits import Limits, LimitsConfig

KIB = 1024


def limits(pool_bytes: int) -> Limits:
    return Limits(LimitsConfig(stream_bytes_pool_max=pool_bytes))


def test_a_reader_behind_gets_the_reply_size_it_asked_for_and_gives_it_back_once_caught_up() -> (
    None
):
    node = limits(64 * 1024 * KIB)
    window = node.stream_window(64 * KIB, 1024 * KIB)
    assert window.size_bytes == 64 * KIB
    assert window.widen() == 1024 * KIB
    assert node.stream_pool_bytes == 960 * KIB
    window.shrink()
    assert (window.size_bytes, node.stream_pool_bytes) == (64 * KIB, 0)


def test_a_reader_that_asked_for_nothing_more_stays_at_the_floor() -> None:
    node = limits(64 * 1024 * KIB)
    window = node.stream_window(64 * KIB, 64 * KIB)
    assert window.widen() == 64 * KIB
    assert node.stream_pool_bytes == 0


def test_when_the_pool_is_spent_streams_get_what_is_left_and_at_least_their_floor() -> None:
    node = limits(200 * KIB)
    first = node.stream_window(64 * KIB, 1024 * KIB)
    second = node.stream_window(64 * KIB, 1024 * KIB)
    assert first.widen() == 264 * KIB
    assert second.widen() == 64 * KIB
    first.close()
    assert second.widen() == 264 * KIB


@given(
    pool_kib=st.integers(0, 4096),
    steps=st.lists(
        st.tuples(st.integers(0, 7), st.sampled_from(["widen", "shrink"])), max_size=200
    ),
)
def test_streams_never_hold_more_than_the_pool_above_their_floors(
    pool_kib: int, steps: list[tuple[int, str]]
) -> None:
    node = limits(pool_kib * KIB)
    windows = [node.stream_window(64 * KIB, 1024 * KIB) for _ in range(8)]
    for index, op in steps:
        getattr(windows[index], op)()
        above = sum(w.size_bytes - w.floor_bytes for w in windows)
        assert above == node.stream_pool_bytes <= pool_kib * KIB
        assert all(w.floor_bytes <= w.size_bytes <= w.ceiling_bytes for w in windows)
    for window in windows:
        window.close()
    assert node.stream_pool_bytes == 0
