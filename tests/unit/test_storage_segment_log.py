"""Segments: rotation, batching, reads across segments, truncation, retention, the index."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from replog import frames
from replog.errors import (
    EmptyBatchError,
    InvalidFramesError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from replog.storage import StorageConfig
from replog.storage.index import ENTRY
from tests.storage_helpers import TINY, open_log, read_all, segment_files


def values_of(n: int, size: int = 20) -> list[bytes]:
    return [bytes([i % 251]) * size for i in range(n)]


def test_a_segment_never_exceeds_its_size_limit(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(0, 300, 13):
        log.append([bytes([i % 256]) * (i % 50) for i in range(i, i + 13)])
    assert log.segment_count > 10
    for path in segment_files(tmp_path):
        assert path.stat().st_size <= TINY.segment_bytes_max


def test_a_record_larger_than_a_segment_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append([b"a" * 10])
    log.append([b"b" * 500])
    log.append([b"c" * 10])
    sizes = [p.stat().st_size for p in segment_files(tmp_path)]
    assert sizes == [22, 512, 22]
    assert read_all(log) == [b"a" * 10, b"b" * 500, b"c" * 10]


def test_segment_files_are_named_by_base_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(values_of(30))
    names = [p.name for p in segment_files(tmp_path)]
    assert names[0] == "00000000000000000000.log"
    bases = [int(n[:20]) for n in names]
    assert bases == sorted(bases) and len(names) == log.segment_count
    assert all((tmp_path / f"{b:020d}.idx").exists() for b in bases)


def test_a_batch_costs_one_write_per_segment_it_touches_plus_one_for_its_checksums(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path)
    calls: list[tuple[str, int]] = []
    real_write = os.write

    def counting_write(fd: int, data: bytes) -> int:
        calls.append((Path(os.readlink(f"/proc/self/fd/{fd}")).suffix, len(data)))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counting_write)
    log.append(values_of(40))  # 40 * 32 bytes = 1280 bytes: 5 segments of 8 records
    log_writes = [n for suffix, n in calls if suffix == ".log"]
    assert len(log_writes) == log.segment_count == 5
    assert sum(log_writes) == 40 * 32
    crc_writes = [n for suffix, n in calls if suffix == ".crc"]
    assert len(crc_writes) == 5 + 4, "one per segment written, plus a header per new segment"


def test_reads_cross_segment_boundaries_and_respect_the_byte_budget(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    vals = [bytes([i]) * (i % 37) for i in range(120)]
    for i in range(0, 120, 9):
        log.append(vals[i : i + 9])
    for chunk in (1, 13, 64, 200, 5000):
        assert read_all(log, chunk=chunk) == vals
    buf = log.read_uncommitted(3, 5000)
    assert frames.decode(buf).values == vals[3:]
    budgeted = log.read_uncommitted(0, 100)
    assert len(budgeted) <= 100 and frames.scan(budgeted, 0)


def test_a_read_returns_one_whole_record_even_past_the_budget(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append([b"x" * 90, b"y"])
    assert frames.decode(log.read_uncommitted(0, 1)).values == [b"x" * 90]


def test_a_read_stops_before_the_end_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(values_of(50))
    decoded = frames.decode(log.read_uncommitted(5, 10_000, end_offset=23))
    assert decoded.offsets == list(range(5, 23))


def test_every_offset_is_readable_by_itself(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    vals = [bytes([i]) * (i % 29) for i in range(150)]
    log.append(vals[:70])
    log.append(vals[70:])
    for offset, value in enumerate(vals):
        decoded = frames.decode(log.read_uncommitted(offset, 1))
        assert (decoded.offsets, decoded.values) == ([offset], [value])


def test_the_index_holds_the_first_record_and_then_one_entry_per_interval(
    tmp_path: Path,
) -> None:
    config = StorageConfig(segment_bytes_max=10_000, index_interval_bytes=100, record_bytes_max=99)
    log = open_log(tmp_path, config)
    log.append([b"v" * 28] * 20)  # 40-byte frames: entries at 0, 120, 240, ...
    log.close()
    raw = (tmp_path / "00000000000000000000.idx").read_bytes()
    assert [pos for _, pos in ENTRY.iter_unpack(raw)] == [0, 120, 240, 360, 480, 600, 720]
    assert [rel for rel, _ in ENTRY.iter_unpack(raw)] == [0, 3, 6, 9, 12, 15, 18]


def test_the_index_grows_by_doubling_and_is_trimmed_on_close(tmp_path: Path) -> None:
    config = StorageConfig(
        segment_bytes_max=100_000, index_interval_bytes=1, index_bytes_initial=24
    )
    log = open_log(tmp_path, config)
    idx = tmp_path / "00000000000000000000.idx"
    assert idx.stat().st_size == 24
    log.append([b"a"] * 3)
    assert idx.stat().st_size == 48
    log.append([b"a"] * 2)
    assert idx.stat().st_size == 96
    log.close()
    assert idx.stat().st_size == 5 * 12


def test_truncate_drops_records_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    vals = values_of(60)
    log.append(vals)
    before = log.segment_count
    log.truncate_to(17)
    assert log.log_end_offset == 17
    assert log.segment_count < before
    assert read_all(log) == vals[:17]
    log.append([b"new"])
    assert read_all(log) == [*vals[:17], b"new"]
    log.truncate_to(0)
    assert log.log_end_offset == 0 and read_all(log) == []
    log.append([b"again"])
    assert read_all(log) == [b"again"]


def test_truncate_outside_the_log_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(values_of(3))
    with pytest.raises(OffsetOutOfRangeError):
        log.truncate_to(4)


def test_retention_by_size_deletes_whole_closed_segments_below_hw(tmp_path: Path) -> None:
    config = StorageConfig(
        segment_bytes_max=256, index_interval_bytes=64, retention_bytes=600, record_bytes_max=99
    )
    log = open_log(tmp_path, config)
    vals = values_of(80)
    log.append(vals)
    assert log.apply_retention(now_ms=0) == 0, "nothing below HW yet"
    log.set_high_watermark(80)
    deleted = log.apply_retention(now_ms=0)
    assert deleted > 0
    assert log.size_bytes <= 600
    start = log.log_start_offset
    assert start > 0 and start % 8 == 0
    assert read_all(log, uncommitted=False) == vals[start:]
    with pytest.raises(OffsetOutOfRangeError) as err:
        log.read(start - 1, 100)
    assert err.value.log_start_offset == start


def test_retention_by_age_keeps_the_active_segment(tmp_path: Path) -> None:
    config = StorageConfig(segment_bytes_max=256, retention_ms=1000, record_bytes_max=99)
    log = open_log(tmp_path, config)
    log.append(values_of(40))
    log.set_high_watermark(40)
    far_future_ms = 10**15
    assert log.apply_retention(now_ms=far_future_ms) == 4
    assert log.segment_count == 1
    assert log.log_start_offset == 32
    assert read_all(log, uncommitted=False) == values_of(40)[32:]


def test_bad_appends_are_refused_and_change_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append([b"ok"])
    with pytest.raises(EmptyBatchError):
        log.append([])
    with pytest.raises(RecordTooLargeError) as err:
        log.append([b"fine", b"x" * 1001])
    assert err.value.record_bytes_max == 1000
    with pytest.raises(InvalidFramesError):
        log.append_frames(frames.encode(5, [b"wrong start"]))
    with pytest.raises(InvalidFramesError):
        log.append_frames(frames.encode(1, [b"cut"])[:-1])
    assert log.log_end_offset == 1
    assert read_all(log) == [b"ok"]


def test_followers_append_raw_frames_as_they_are(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    follower = open_log(tmp_path / "follower")
    vals = [bytes([i]) * (i % 23) for i in range(70)]
    leader.append(vals[:30])
    leader.append([b"marker"], control=True)
    leader.append(vals[30:])
    offset = 0
    while offset < leader.log_end_offset:
        chunk = leader.read_uncommitted(offset, 150)
        result = follower.append_frames(chunk)
        assert result.base_offset == offset
        offset = result.last_offset + 1
    leader.close()
    follower.close()
    for a, b in zip(
        segment_files(tmp_path / "leader"), segment_files(tmp_path / "follower"), strict=True
    ):
        assert a.name == b.name and a.read_bytes() == b.read_bytes()
