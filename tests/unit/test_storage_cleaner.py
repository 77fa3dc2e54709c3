"""The log cleaner (storage/cleaner.py): what a reader sees after compaction, on disk and
after a crash at every step of a swap."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from replog import frames, records
from replog.storage import FlushPolicy, PartitionLog, StorageConfig, swaps
from replog.storage.cleaner import CleanerConfig, Throttle, clean, dirty_ratio
from replog.storage.verify import VerifyReport, verify_partition
from tests.storage_helpers import as_after_a_crash

CONFIG = StorageConfig(
    segment_bytes_max=200,
    index_interval_bytes=48,
    index_bytes_initial=24,
    record_bytes_max=1000,
    flush=FlushPolicy.NEVER,
    checksum_chunk_bytes=64,
)
ALWAYS = CleanerConfig(min_cleanable_dirty_ratio=0.0, delete_retention_ms=1000)
NOW = 1_000_000


def rec(key: bytes | None, value: bytes | None, ts: int = NOW) -> bytes:
    return records.encode(value, key=key, timestamp_ms=ts)


def open_log(directory: Path) -> PartitionLog:
    return PartitionLog(directory, "t", 0, CONFIG)


def committed(log: PartitionLog, values: list[bytes]) -> None:
    log.append(values)
    log.set_high_watermark(log.log_end_offset)


def read_from(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every committed record from the log start, in small reads."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = log.log_start_offset
    while offset < log.high_watermark:
        batch = frames.decode(log.read(offset, 90))
        assert batch.offsets, "a read below HW returns at least one record"
        assert batch.offsets[0] >= offset
        for o, v in zip(batch.offsets, batch.values, strict=True):
            r = records.decode(v, o)
            out.append((o, r.key, r.value))
        offset = batch.offsets[-1] + 1
    offsets = [o for o, _, _ in out]
    assert offsets == sorted(set(offsets)), "offsets ascend"
    return out


def updates(log: PartitionLog, rounds: int, keys: int = 3) -> None:
    for r in range(rounds):
        committed(log, [rec(b"k%d" % k, b"v%d-%d" % (k, r)) for k in range(keys)])


def test_a_compacted_log_keeps_each_keys_latest_value_at_its_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    updates(log, 12)
    before = read_from(log)
    sizes = log.size_bytes
    result = clean(log, ALWAYS, NOW)
    assert result is not None and result.segments_rewritten > 0
    after = read_from(log)
    assert set(after) < set(before), "records are dropped, none changed or moved"
    active_base = log.cleanable_segments(None)[-1][1]
    assert [r for r in after if r[0] >= active_base] == [r for r in before if r[0] >= active_base]
    latest = {k: (o, v) for o, k, v in before}
    assert {k: (o, v) for o, k, v in after} == latest
    assert log.size_bytes < sizes
    assert log.log_end_offset == 36 and log.cleaned_end == active_base


def test_a_read_from_an_offset_in_a_gap_starts_at_the_next_record(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    updates(log, 12)
    clean(log, ALWAYS, NOW)
    present = [o for o, _, _ in read_from(log)]
    gaps = [o for o in range(present[-1]) if o not in present]
    assert gaps
    for gap in gaps:
        first = frames.decode(log.read(gap, 1000)).offsets[0]
        assert first == min(o for o in present if o > gap)


def test_nothing_above_the_high_watermark_nor_the_active_segment_is_cleaned(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    updates(log, 6)
    log.append([rec(b"k0", b"late") for _ in range(20)])  # not committed
    cleanable = log.cleanable_segments(None)
    assert all(end <= log.high_watermark for _, end, _ in cleanable)
    clean(log, ALWAYS, NOW)
    tail = frames.decode(log.read_uncommitted(log.high_watermark, 10_000)).values
    assert tail == [rec(b"k0", b"late")] * 20


def test_tombstones_stay_for_delete_retention_then_go(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    committed(log, [rec(b"a", b"1"), rec(b"b", b"1")])
    committed(log, [rec(b"a", None, ts=NOW)])
    updates(log, 8, keys=2)  # keys k0, k1 push the tombstone out of the active segment
    clean(log, ALWAYS, NOW + 500)
    kept = {k: v for _, k, v in read_from(log)}
    assert b"a" in kept and kept[b"a"] is None, "a young tombstone stays, read as None"
    assert kept[b"b"] == b"1"
    updates(log, 3, keys=2)  # a pass needs dirty records: the next one after the horizon
    clean(log, ALWAYS, NOW + 1001)
    kept = {k: v for _, k, v in read_from(log)}
    assert b"a" not in kept, "the tombstone and every older value of its key are gone"
    assert kept[b"b"] == b"1"


def test_records_without_a_key_are_dropped_and_control_records_kept(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append([b"epoch-marker"], control=True)
    committed(log, [rec(None, b"keyless"), rec(b"k", b"v")])
    updates(log, 8)
    clean(log, ALWAYS, NOW)
    batch = frames.decode(log.read(0, 10_000))
    assert batch.records(include_control=True)[0] == frames.Record(0, b"epoch-marker", True)
    assert rec(None, b"keyless") not in batch.values
    assert rec(b"k", b"v") in batch.values


def test_a_cleaned_log_reads_the_same_after_a_clean_close_and_after_a_crash(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    updates(log, 12)
    clean(log, ALWAYS, NOW)
    expected = read_from(log)
    log.close()
    log = open_log(tmp_path)
    assert read_from(log) == expected
    log.close()
    as_after_a_crash(tmp_path)  # every segment is recovered (scanned): gaps are not cut
    log = open_log(tmp_path)
    assert log.segments_recovered > 1
    assert read_from(log) == expected
    assert log.integrity_issues() == []
    committed(log, [rec(b"k0", b"new")])
    assert read_from(log)[-1] == (36, b"k0", b"new")
    log.close()


def test_an_index_rebuilt_from_a_cleaned_segment_finds_its_records(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    updates(log, 12)
    clean(log, ALWAYS, NOW)
    expected = read_from(log)
    log.close()
    for idx in tmp_path.glob("*.idx"):
        idx.unlink()
    log = open_log(tmp_path)
    assert read_from(log) == expected
    log.close()


def test_a_second_pass_drops_what_newer_updates_superseded(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    updates(log, 8)
    clean(log, ALWAYS, NOW)
    first_end = log.cleaned_end
    updates(log, 8)
    result = clean(log, ALWAYS, NOW)
    assert result is not None and log.cleaned_end > first_end
    after = read_from(log)
    below = [k for o, k, _ in after if o < log.cleaned_end]
    assert len(below) == len(set(below)), "one record per key in the cleaned range"


def test_a_pass_waits_for_the_dirty_ratio(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    updates(log, 12)
    clean(log, ALWAYS, NOW)
    committed(log, [rec(b"k0", b"x" * 150)])
    committed(log, [rec(b"k0", b"y")])
    segments = log.cleanable_segments(None)
    ratio = dirty_ratio(segments, log.cleaned_end)
    assert 0 < ratio < 1
    lazy = CleanerConfig(min_cleanable_dirty_ratio=min(1.0, ratio + 0.01))
    assert clean(log, lazy, NOW) is None
    assert clean(log, CleanerConfig(min_cleanable_dirty_ratio=ratio), NOW) is not None


def test_the_throttle_sleeps_to_keep_the_byte_rate() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    throttle = Throttle(1000, clock=lambda: now[0], sleep=sleep)
    for _ in range(5):
        throttle.spend(500)
    assert now[0] == pytest.approx(2.5)
    assert len(slept) == 5


def test_a_crash_at_any_step_of_a_swap_leaves_old_or_new_and_no_record_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = tmp_path / "ref"
    log = open_log(reference)
    updates(log, 5)  # 3 closed segments, 6 renames each
    before = read_from(log)
    clean(log, ALWAYS, NOW)
    after = read_from(log)
    log.close()
    real_replace = os.replace
    step = 0
    while True:
        step += 1
        directory = tmp_path / f"crash-{step}"
        log = open_log(directory)
        updates(log, 5)
        log.flush()
        log.checkpoint_high_watermark()
        calls = [0]

        def failing(src: Path, dst: Path, calls: list[int] = calls, step: int = step) -> None:
            calls[0] += 1
            if calls[0] == step:
                raise OSError(5, "injected crash")
            real_replace(src, dst)

        monkeypatch.setattr(swaps.os, "rename", failing)
        monkeypatch.setattr(swaps.os, "replace", failing)
        crashed = True
        try:
            clean(log, ALWAYS, NOW)
            crashed = False
        except Exception:
            pass
        monkeypatch.undo()
        log.crash()
        as_after_a_crash(directory)
        log = open_log(directory)
        seen = read_from(log)
        assert set(after) <= set(seen) <= set(before)
        assert {k: (o, v) for o, k, v in seen} == {k: (o, v) for o, k, v in before}
        assert not (directory / swaps.CLEANING_DIR).exists() or not any(
            (directory / swaps.CLEANING_DIR).iterdir()
        )
        assert not list(directory.glob("*.swap"))
        clean(log, ALWAYS, NOW)  # the next pass finishes the job
        assert read_from(log) == after
        log.close()
        if not crashed:
            break
    assert step > 12, "every rename of several swaps was cut once"


def test_a_time_lookup_in_a_cleaned_segment_finds_the_first_record_at_or_after_it(
    tmp_path: Path,
) -> None:
    config = StorageConfig(
        segment_bytes_max=200,
        index_interval_bytes=48,
        index_bytes_initial=24,
        flush=FlushPolicy.NEVER,
        timestamps=records.frame_timestamps,
    )
    log = PartitionLog(tmp_path, "t", 0, config)
    for r in range(12):
        log.append([rec(b"k%d" % k, b"v", ts=1000 + 3 * r + k) for k in range(3)])
    log.set_high_watermark(log.log_end_offset)
    clean(log, ALWAYS, NOW)
    present = {o: 1000 + o for o, _, _ in read_from(log)}  # offset o was stamped 1000 + o
    for ts in range(1000, 1036):
        want = min((o for o in present if present[o] >= ts), default=None)
        found = log.offset_for_time(ts)
        assert found == (None if want is None else (want, present[want]))
    log.close()


def test_replog_verify_finds_a_cleaned_partition_whole(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    updates(log, 12)
    clean(log, ALWAYS, NOW)
    log.close()
    report = VerifyReport()
    verify_partition(tmp_path, report)
    assert report.findings == []
    assert report.records == len(read_from(open_log(tmp_path)))


def test_retention_deleting_segments_under_a_pass_ends_it_and_the_next_one_finishes(
    tmp_path: Path,
) -> None:
    log = PartitionLog(tmp_path, "t", 0, replace(CONFIG, retention_bytes=700))
    updates(log, 12)
    before = {k: (o, v) for o, k, v in read_from(log)}
    fired = []

    def sleep(_: float) -> None:  # the pass pauses for its budget: retention runs meanwhile
        if not fired:
            fired.append(log.apply_retention(NOW))

    result = clean(log, ALWAYS, NOW, Throttle(1, clock=lambda: 0.0, sleep=sleep))
    assert fired and fired[0] > 0, "retention deleted segments during the pass"
    assert result is not None and log.cleaned_end == 0, "the pass ended without completing"
    assert clean(log, ALWAYS, NOW) is not None
    after = {k: (o, v) for o, k, v in read_from(log)}
    assert after == before, "each key's latest value survives both"
    log.close()


def test_a_truncation_never_leaves_a_cleaned_segment_last(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    updates(log, 5)
    hw = log.high_watermark
    for _ in range(20):  # roll to a segment that starts at HW
        if log.cleanable_segments(None)[-1][1] == hw:
            break
        log.append([rec(b"k0", b"uncommitted")])
    assert log.cleanable_segments(None)[-1][1] == hw
    clean(log, ALWAYS, NOW)  # cleans the segment that ends at HW too
    kept = read_from(log)
    log.truncate_to(hw)  # drops every uncommitted record: the segment at HW is emptied
    assert log.log_end_offset == hw
    committed(log, [rec(b"k1", b"after")])
    log.close()
    as_after_a_crash(tmp_path)
    log = open_log(tmp_path)
    assert log.log_end_offset == hw + 1, "the log end survives a recovery of every segment"
    assert read_from(log) == [*kept, (hw, b"k1", b"after")]
    log.close()


def test_an_append_rolls_an_active_segment_older_than_segment_ms(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, "t", 0, replace(CONFIG, segment_ms=60_000))
    log.append([rec(b"k", b"v")])
    log.append([rec(b"k", b"w")])
    assert log.segment_count == 1, "young: no roll"
    log._log.active.created_ms -= 60_000  # (as if a minute went by)
    log.append([rec(b"k", b"x")])
    assert log.segment_count == 2 and log.active_base_offset == 2
    log.set_high_watermark(log.log_end_offset)
    assert log.cleanable_segments(None) == [(0, 2, log.size_bytes - log._log.active.size)]
    log.close()
