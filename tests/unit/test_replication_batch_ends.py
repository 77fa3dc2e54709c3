"""Fetch answers above the HW end at batch boundaries (pure bookkeeping)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from replog.replication.batch_ends import BatchEnds, whole_batches_end


def ends(*offsets: int) -> BatchEnds:
    b = BatchEnds()
    for offset in offsets:
        b.appended(offset)
    return b


def test_a_read_that_stops_inside_a_batch_is_cut_back_to_the_last_boundary() -> None:
    b = ends(10, 20, 30)  # batches [0,10) [10,20) [20,30), HW 0
    assert b.cut(0, 25, 30, 0) == 20
    assert b.cut(0, 20, 30, 0) == 20  # already a boundary
    assert b.cut(0, 30, 30, 0) == 30  # everything available


def test_a_batch_larger_than_a_read_is_sent_whole() -> None:
    b = ends(10, 20, 30)
    assert b.cut(10, 15, 30, 0) == 20
    assert b.cut(0, 5, 30, 0) == 10


def test_below_the_hw_any_cut_is_safe_and_the_hw_itself_is_a_boundary() -> None:
    b = ends(10, 20, 30)
    b.committed(20)
    assert b.cut(0, 15, 30, 20) == 15  # committed: whole on a majority already
    assert b.cut(0, 25, 30, 20) == 20  # above the HW: back to the HW
    assert b.cut(20, 25, 30, 20) == 30


def test_truncation_forgets_the_batches_past_the_new_end() -> None:
    b = ends(10, 20, 30)
    b.truncated(20)
    b.appended(26)
    assert b.cut(0, 25, 26, 0) == 20
    assert b.cut(20, 23, 26, 0) == 26


def test_without_a_known_boundary_the_read_is_left_as_it_is() -> None:
    assert BatchEnds().cut(0, 7, 30, 0) == 7


def test_past_an_unknown_boundary_no_idempotent_batch_is_split() -> None:
    """A restarted leader's inherited tail (no boundary known): seed 156 of the membership
    schedules cut an answer after a batch header and one of its three records; the
    follower, elected, committed the half batch."""
    assert BatchEnds().known(5) is False and ends(5, 9).known(9)
    # [17, 19) holds the header at 18 of a 3-record batch (18..21): stop before the header
    assert whole_batches_end([(18, 3)], 17, 19) == 18
    # an answer that starts at the header: read on to the batch's end
    assert whole_batches_end([(18, 3)], 18, 20) == 22
    # every batch ends by the end (plain records around them too): the read as it is
    assert whole_batches_end([(2, 3), (7, 1)], 0, 12) == 12
    assert whole_batches_end([], 0, 7) == 7


@given(
    sizes=st.lists(st.integers(1, 50), min_size=1, max_size=40),
    hw_batches=st.integers(0, 40),
    data=st.data(),
)
def test_answers_above_the_hw_start_and_end_on_boundaries_whatever_the_read(
    sizes: list[int], hw_batches: int, data: st.DataObject
) -> None:
    """Fetches that each read an arbitrary amount, cut as the leader cuts them, leave a
    follower only at boundaries once above the HW."""
    bounds = [0]
    for size in sizes:
        bounds.append(bounds[-1] + size)
    leo = bounds[-1]
    hw = bounds[min(hw_batches, len(sizes))]
    b = ends(*bounds[1:])
    b.committed(hw)
    offset = data.draw(st.integers(0, hw))  # a follower somewhere in the committed part
    while offset < leo:
        read_end = data.draw(st.integers(offset + 1, leo))
        cut = b.cut(offset, read_end, leo, hw)
        assert offset < cut <= leo
        if cut > hw:
            assert cut in bounds, (offset, read_end, cut)
        offset = cut
