"""The leader's high-watermark rule."""

from __future__ import annotations

from replog.replication.quorum import majority_match, next_high_watermark


def test_the_majority_match_is_the_offset_a_majority_has_reached() -> None:
    assert majority_match([9, 4, 7], 2) == 7
    assert majority_match([9, 4, 7, 1, 8], 3) == 7
    assert majority_match([3], 1) == 3


def test_hw_stays_until_a_majority_is_past_this_epochs_control_record() -> None:
    # control record at offset 5: a majority holding [0, 5) is not enough
    assert next_high_watermark(2, [5, 5, 0], 2, control_offset=5) == 2
    assert next_high_watermark(2, [6, 5, 0], 2, control_offset=5) == 2
    assert next_high_watermark(2, [6, 6, 0], 2, control_offset=5) == 6


def test_hw_never_moves_back_on_a_leader() -> None:
    assert next_high_watermark(8, [7, 7, 7], 2, control_offset=3) == 8
