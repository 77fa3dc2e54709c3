"""Crash recovery: torn tails, zero and random garbage, stale indexes, gaps between segments.

The seed format has no checksum, so the promise is structural: after damage at byte `p` of
the last segment, reopening yields every record whose frame ends at or before `p`, and at most
one more record (the one whose header lies before `p`, if its length still fits), never a
record at a wrong offset, and the log accepts appends right after.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from replog import frames
from replog.storage import StorageConfig
from tests.storage_helpers import open_log, read_all, segment_files

CONFIG = StorageConfig(
    segment_bytes_max=4096, index_interval_bytes=64, index_bytes_initial=48, record_bytes_max=200
)
VALUES = [bytes([65 + i % 26]) * (i * 7 % 45) for i in range(40)]


def write_log(directory: Path) -> list[int]:
    """Write VALUES in a few batches, crash (index untrimmed); return frame end positions."""
    log = open_log(directory, CONFIG)
    for i in range(0, len(VALUES), 6):
        log.append(VALUES[i : i + 6])
    log.crash()
    return frames.frame_ends(VALUES)


def check_prefix(directory: Path, damage_at: int, ends: list[int]) -> None:
    log = open_log(directory, CONFIG)
    got = read_all(log)
    whole = sum(1 for e in ends if e <= damage_at)
    assert whole <= len(got) <= whole + 1, f"damage at {damage_at}: {len(got)} records"
    assert got[:whole] == VALUES[:whole]
    result = log.append([b"after"])
    assert result.base_offset == len(got)
    assert read_all(log)[-1] == b"after"
    log.close()
    reopened = open_log(directory, CONFIG)
    assert read_all(reopened)[: len(got)] == got
    reopened.close()


def test_a_tail_cut_at_every_byte_reopens_as_a_prefix(tmp_path: Path) -> None:
    template = tmp_path / "template"
    ends = write_log(template)
    data = (template / "00000000000000000000.log").read_bytes()
    index = (template / "00000000000000000000.idx").read_bytes()
    for cut in range(ends[-6] - 30, len(data) + 1):
        case = tmp_path / f"cut{cut}"
        case.mkdir()
        (case / "00000000000000000000.log").write_bytes(data[:cut])
        (case / "00000000000000000000.idx").write_bytes(index)
        log = open_log(case, CONFIG)
        whole = sum(1 for e in ends if e <= cut)
        assert read_all(log) == VALUES[:whole], f"cut at {cut}"
        assert log.log_end_offset == whole
        log.append([b"x"])
        log.close()


@pytest.mark.parametrize("filler", ["zeros", "random"])
def test_a_tail_overwritten_with_garbage_reopens_as_a_prefix(tmp_path: Path, filler: str) -> None:
    template = tmp_path / "template"
    ends = write_log(template)
    data = (template / "00000000000000000000.log").read_bytes()
    index = (template / "00000000000000000000.idx").read_bytes()
    rng = random.Random(7)
    for start in range(ends[-8], len(data), 3):
        case = tmp_path / f"{filler}{start}"
        case.mkdir()
        n = len(data) - start + rng.randrange(0, 40)
        garbage = bytes(n) if filler == "zeros" else rng.randbytes(n)
        (case / "00000000000000000000.log").write_bytes(data[:start] + garbage)
        (case / "00000000000000000000.idx").write_bytes(index)
        check_prefix(case, start, ends)


def test_a_zero_padded_index_after_a_crash_is_not_trusted(tmp_path: Path) -> None:
    write_log(tmp_path)
    idx = tmp_path / "00000000000000000000.idx"
    assert idx.stat().st_size % 48 == 0, "a crash leaves the pre-sized file"
    idx.write_bytes(idx.read_bytes() + bytes(4096))
    log = open_log(tmp_path, CONFIG)
    assert read_all(log) == VALUES
    for offset in range(len(VALUES)):
        assert frames.decode(log.read_uncommitted(offset, 1)).values == [VALUES[offset]]


@pytest.mark.parametrize("damage", ["missing", "empty", "random", "points-past-end", "shifted"])
def test_a_damaged_index_is_rebuilt_from_the_log(tmp_path: Path, damage: str) -> None:
    write_log(tmp_path)
    idx = tmp_path / "00000000000000000000.idx"
    raw = idx.read_bytes()
    if damage == "missing":
        idx.unlink()
    elif damage == "empty":
        idx.write_bytes(b"")
    elif damage == "random":
        idx.write_bytes(random.Random(1).randbytes(len(raw)))
    elif damage == "points-past-end":
        idx.write_bytes(raw[:24] + (99).to_bytes(4, "big") + (10**9).to_bytes(8, "big"))
    else:  # entries that are increasing and inside the log but not at frame starts
        idx.write_bytes(raw[:12] + (5).to_bytes(4, "big") + (7).to_bytes(8, "big"))
    log = open_log(tmp_path, CONFIG)
    assert read_all(log) == VALUES
    for offset in range(len(VALUES)):
        assert frames.decode(log.read_uncommitted(offset, 1)).offsets == [offset]
    log.close()
    assert len(idx.read_bytes()) >= 12


def test_segments_after_a_gap_are_dropped(tmp_path: Path) -> None:
    config = StorageConfig(segment_bytes_max=128, index_interval_bytes=32, record_bytes_max=100)
    log = open_log(tmp_path, config)
    vals = [bytes([i]) * 20 for i in range(20)]
    log.append(vals)
    log.crash()
    files = segment_files(tmp_path)
    assert len(files) >= 4
    files[1].write_bytes(files[1].read_bytes()[:40])  # a middle segment lost its tail
    reopened = open_log(tmp_path, config)
    got = read_all(reopened)
    assert got == vals[: len(got)]
    assert reopened.log_end_offset == len(got) < 20
    assert len(segment_files(tmp_path)) == 2
    reopened.append([b"continues"])
    assert read_all(reopened)[-1] == b"continues"
