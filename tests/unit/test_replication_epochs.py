"""The epoch history: epoch lookups, divergence ends, truncation."""

from __future__ import annotations

import pytest

from replog.replication.epochs import EpochHistory, EpochStart


def history(*entries: tuple[int, int]) -> EpochHistory:
    return EpochHistory(EpochStart(e, s) for e, s in entries)


def test_the_epoch_of_an_offset_is_the_last_epoch_that_starts_at_or_before_it() -> None:
    h = history((1, 0), (3, 5), (4, 9))
    assert [h.epoch_of(o) for o in (0, 4, 5, 8, 9, 100)] == [1, 1, 3, 3, 4, 4]


def test_an_empty_log_has_last_epoch_zero() -> None:
    assert history().last_epoch(0) == 0
    assert history((2, 0)).last_epoch(0) == 0
    assert history((2, 0)).last_epoch(1) == 2


def test_an_epoch_without_records_is_replaced_by_the_next_one_starting_at_the_same_offset() -> None:
    h = history((1, 0), (2, 5))
    h.append(3, 5)
    assert h.entries == (EpochStart(1, 0), EpochStart(3, 5))


def test_epochs_and_start_offsets_never_go_back() -> None:
    with pytest.raises(AssertionError):
        history((2, 0), (1, 3))
    with pytest.raises(AssertionError):
        history((1, 5), (2, 3))


def test_the_end_of_an_epoch_is_where_the_next_one_starts_or_the_log_end() -> None:
    h = history((1, 0), (3, 5), (4, 9))
    assert h.end_offset_for(1, 12) == (1, 5)
    assert h.end_offset_for(3, 12) == (3, 9)
    assert h.end_offset_for(4, 12) == (4, 12)


def test_an_unknown_epoch_ends_where_the_largest_known_epoch_below_it_ends() -> None:
    h = history((1, 0), (3, 5), (4, 9))
    assert h.end_offset_for(2, 12) == (1, 5)
    assert h.end_offset_for(7, 12) == (4, 12)
    assert history((2, 0)).end_offset_for(1, 4) == (0, 0)


def test_truncation_forgets_the_epochs_that_start_at_or_after_the_new_end() -> None:
    h = history((1, 0), (3, 5), (4, 9))
    assert h.truncate_to(9)
    assert h.entries == (EpochStart(1, 0), EpochStart(3, 5))
    assert not h.truncate_to(7)
    assert h.truncate_to(0)
    assert len(h) == 0


def test_boundaries_name_the_epoch_of_the_first_record_and_each_epoch_starting_inside() -> None:
    h = history((1, 0), (3, 5), (4, 9))
    assert h.boundaries(6, 12) == (EpochStart(3, 6), EpochStart(4, 9))
    assert h.boundaries(0, 5) == (EpochStart(1, 0),)
    assert h.boundaries(5, 5) == ()
