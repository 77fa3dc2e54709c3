"""A follower's log copying a range its leader's cleaner compacted (offset gaps): it ends
with the same records at the same offsets, through crashes and later appends."""

from __future__ import annotations

from pathlib import Path

import pytest

from replog import frames
from replog.errors import InvalidFramesError
from replog.storage import PartitionLog
from replog.storage.cleaner import clean
from tests.storage_helpers import as_after_a_crash
from tests.unit.test_storage_cleaner import ALWAYS, NOW, committed, open_log, rec, updates


def rows(log: PartitionLog) -> list[tuple[int, bytes]]:
    """(offset, frame value) of every record to the LEO, control records included."""
    out: list[tuple[int, bytes]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read_uncommitted(offset, 90)
        if not data:
            break
        batch = frames.decode(data)
        out += batch.rows
        offset = batch.offsets[-1] + 1
    return out


def copy(leader: PartitionLog, follower: PartitionLog, fetch_bytes: int = 90) -> int:
    """Fetch as a follower's driver does (`performing._fill`, then `append_frames`) until
    the follower's LEO is the leader's; returns the fetches it took."""
    fetches = 0
    while follower.log_end_offset < leader.log_end_offset:
        start, end = follower.log_end_offset, leader.log_end_offset
        data = leader.read_uncommitted(start, fetch_bytes, end_offset=end)
        reached = leader.reached(data, start, end)
        follower.append_frames(data, end_offset=reached)
        assert follower.log_end_offset == reached
        fetches += 1
    return fetches


def test_a_follower_copies_a_compacted_log_with_the_same_records_at_the_same_offsets(
    tmp_path: Path,
) -> None:
    leader = open_log(tmp_path / "leader")
    updates(leader, 12)
    committed(leader, [rec(b"k9", b"last")])
    assert clean(leader, ALWAYS, NOW) is not None
    expected = rows(leader)
    assert len(expected) < leader.log_end_offset, "the leader's log has gaps"
    follower = open_log(tmp_path / "follower")
    assert copy(leader, follower) > 1
    assert rows(follower) == expected
    follower.close()
    follower = open_log(tmp_path / "follower")
    assert rows(follower) == expected and follower.log_end_offset == leader.log_end_offset
    follower.crash()
    as_after_a_crash(tmp_path / "follower")
    follower = open_log(tmp_path / "follower")
    assert rows(follower) == expected, "recovery keeps every record after a gap"
    assert follower.integrity_issues() == []
    follower.append([b"next"])  # appends of its own go on at the LEO, dense
    assert rows(follower)[-1] == (leader.log_end_offset, b"next")
    follower.close()
    leader.close()


def test_a_range_that_is_all_gap_moves_the_log_end_and_a_crash_keeps_it(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    log.append([b"a", b"b"])
    log.append_frames(frames.encode(5, [b"f"]), end_offset=9)  # a gap on both sides
    log.append_frames(b"", end_offset=12)  # nothing at all in [9, 12)
    assert log.log_end_offset == 12
    assert rows(log) == [(0, b"a"), (1, b"b"), (5, b"f")]
    log.crash()
    as_after_a_crash(tmp_path)
    log = open_log(tmp_path)
    assert log.log_end_offset == 12, "the end of a trailing gap survives a crash"
    assert rows(log) == [(0, b"a"), (1, b"b"), (5, b"f")]
    assert log.read_uncommitted(2, 90) == frames.encode(5, [b"f"])
    log.append([b"c"])
    assert rows(log)[-1] == (12, b"c")
    log.truncate_to(6)  # a follower's divergent tail, cut inside a gap
    assert log.log_end_offset == 6 and rows(log)[-1] == (5, b"f")
    log.close()


def test_only_a_leaders_range_may_have_gaps(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append([b"a"])
    gapped = frames.encode(3, [b"x"])
    with pytest.raises(InvalidFramesError):
        log.append_frames(gapped)  # without the leader's range: consecutive from the LEO
    with pytest.raises(InvalidFramesError):
        log.append_frames(gapped, end_offset=3)  # a frame past the range's end
    with pytest.raises(InvalidFramesError):
        log.append_frames(frames.encode(0, [b"x"]), end_offset=5)  # below the LEO
    assert rows(log) == [(0, b"a")] and log.log_end_offset == 1
    log.close()
