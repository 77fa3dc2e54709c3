"""CRC32C sidecars (`.crc`): written with the data, verified by reads, recovery, the scrubber
and `replog verify`; kept consistent by truncation, reset, retention and rolls."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import google_crc32c
import pytest

from replog import cli, frames
from replog.errors import CorruptDataError
from replog.storage import FlushPolicy, PartitionLog, PartitionRegistry, StorageConfig
from replog.storage.integrity import CORRUPT, INDEX_REBUILT, SIDECAR_DAMAGED, UNVERIFIED
from replog.storage.scrub import Scrubber
from replog.storage.verify import verify_data_dir
from tests.storage_helpers import as_after_a_crash, read_all

CONFIG = StorageConfig(
    segment_bytes_max=2048,
    index_interval_bytes=64,
    index_bytes_initial=48,
    record_bytes_max=300,
    checksum_chunk_bytes=128,
    flush=FlushPolicy.ALWAYS,
)
VALUES = [bytes([65 + i % 26]) * (i * 7 % 45) for i in range(120)]
SEG0 = "00000000000000000000"


def partition(root: Path) -> Path:
    return root / "t" / "partition_0"


def open_log(root: Path, config: StorageConfig = CONFIG) -> PartitionLog:
    return PartitionLog(partition(root), "t", 0, config)


def write_template(root: Path, config: StorageConfig = CONFIG) -> PartitionLog:
    log = open_log(root, config)
    for i in range(0, len(VALUES), 7):
        log.append(VALUES[i : i + 7])
    log.set_high_watermark(len(VALUES))
    return log


def flip(path: Path, bit: int) -> None:
    data = bytearray(path.read_bytes())
    data[bit // 8] ^= 1 << (bit % 8)
    path.write_bytes(bytes(data))


def u32(n: int) -> bytes:
    return n.to_bytes(4, "big")


def crc(data: bytes) -> int:
    return google_crc32c.value(data)


def test_the_sidecar_format_is_the_documented_one_byte_for_byte(tmp_path: Path) -> None:
    config = StorageConfig(checksum_chunk_bytes=32, flush=FlushPolicy.NEVER)
    log = open_log(tmp_path, config)
    log.append([b"x" * 10])  # frame of 22 bytes: block 0 [0, 22)
    log.append([b"y" * 20])  # 32 bytes at 22: block 0 to 32, block 1 [32, 54)
    log.close()
    seg = partition(tmp_path) / f"{SEG0}.log"
    data = seg.read_bytes()
    assert data == frames.encode(0, [b"x" * 10]) + frames.encode(1, [b"y" * 20]), "seed frames"

    def entry(kind: int, end: int, value: int) -> bytes:
        body = bytes([kind, 0, 0, 0]) + u32(end) + u32(value)
        return body + u32(crc(body))

    head = b"RLCK" + (1).to_bytes(2, "big") + bytes(2) + u32(32)
    expected = (
        head
        + u32(crc(head))
        + entry(1, 22, crc(data[:22]))
        + entry(1, 32, crc(data[:32]))  # supersedes the entry above: same block, larger end
        + entry(1, 54, crc(data[32:54]))
        + entry(2, 54, 0)  # flushed on close
    )
    assert (partition(tmp_path) / f"{SEG0}.crc").read_bytes() == expected


def test_a_flipped_bit_in_a_value_is_never_served(tmp_path: Path) -> None:
    write_template(tmp_path).close()
    seg = partition(tmp_path) / f"{SEG0}.log"
    flip(seg, 300 * 8 + 3)
    log = open_log(tmp_path)
    assert log.log_end_offset == len(VALUES), "recovery keeps flushed data, even damaged"
    with pytest.raises(CorruptDataError) as caught:
        read_all(log, uncommitted=False)
    err = caught.value
    assert (err.code, err.reason, err.retriable) == ("DATA_LOSS", "CORRUPT_DATA", False)
    assert int(err.metadata["start_position"]) <= 300 < int(err.metadata["end_position"])
    [bad] = log.corrupt_ranges()
    assert bad.kind == CORRUPT and bad.start_position <= 300 < bad.end_position
    assert bad.first_offset <= int(err.metadata["offset"]) < bad.end_offset
    for offset in range(len(VALUES)):  # every record outside the range still reads
        if not bad.first_offset <= offset < bad.end_offset:
            got = frames.decode(log.read(offset, 1, end_offset=offset + 1))
            assert got.values == [VALUES[offset]]
    with pytest.raises(CorruptDataError):  # and the range stays refused
        log.read(bad.first_offset, 10_000)
    log.close()


def test_corruption_in_the_middle_of_the_active_segment_is_marked_not_truncated(
    tmp_path: Path,
) -> None:
    config = StorageConfig(**{**_fields(CONFIG), "segment_bytes_max": 8192})
    write_template(tmp_path, config).close()
    seg = partition(tmp_path) / f"{SEG0}.log"
    size = seg.stat().st_size
    idx = (partition(tmp_path) / f"{SEG0}.idx").read_bytes()
    last_indexed = int.from_bytes(idx[-8:], "big")
    ends = frames.frame_ends(VALUES)
    victim = next(i for i, e in enumerate(ends) if e > last_indexed) + 1  # recovery scans it
    flip(seg, (ends[victim - 1] + 7) * 8)  # the low byte of that frame's offset field
    as_after_a_crash(partition(tmp_path))  # a clean stop's marker would skip the recovery
    log = open_log(tmp_path, config)
    assert log.log_end_offset == len(VALUES), "no committed record is cut"
    assert seg.stat().st_size == size
    [bad] = log.corrupt_ranges()
    assert bad.first_offset <= victim < bad.end_offset
    assert frames.decode(log.read(0, 1)).offsets == [0]
    with pytest.raises(CorruptDataError):
        log.read(victim, 10_000)
    log.append([b"continues"])
    assert frames.decode(log.read_uncommitted(len(VALUES), 100)).values == [b"continues"]
    log.close()


def _fields(config: StorageConfig) -> dict[str, object]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


def test_a_torn_tail_at_every_byte_reopens_as_a_prefix_with_valid_checksums(
    tmp_path: Path,
) -> None:
    config = StorageConfig(**{**_fields(CONFIG), "segment_bytes_max": 8192})
    template = tmp_path / "template"
    log = open_log(template, config)
    appends: list[int] = []  # frame count after each append
    for i in range(0, 60, 5):
        log.append(VALUES[i : i + 5])
        appends.append(i + 5)
    flushed = log.log_end_offset
    nconfig = StorageConfig(**{**_fields(config), "flush": FlushPolicy.NEVER})
    log.close()
    log = open_log(template, nconfig)
    for i in range(60, 75, 3):  # unflushed appends: a crash may tear any of them
        log.append(VALUES[i : i + 3])
        appends.append(i + 3)
    log.crash()
    ends = frames.frame_ends(VALUES[:75])
    data = (partition(template) / f"{SEG0}.log").read_bytes()
    flushed_pos = ends[flushed - 1]
    for cut in range(flushed_pos, len(data) + 1):
        case = tmp_path / f"cut{cut}"
        shutil.copytree(template, case)
        (partition(case) / f"{SEG0}.log").write_bytes(data[:cut])
        log = open_log(case, nconfig)
        got = read_all(log)
        whole_frames = sum(1 for e in ends if e <= cut)
        whole_appends = max([n for n in appends if ends[n - 1] <= cut], default=0)
        assert whole_appends <= len(got) <= whole_frames, f"cut at {cut}"
        assert got == VALUES[: len(got)], f"cut at {cut}"
        assert log.corrupt_ranges() == [], f"cut at {cut}: a torn tail is not corruption"
        log.append([b"after"])
        log.close()
        report = verify_data_dir(case)
        assert report.ok, f"cut at {cut}: {[str(f) for f in report.findings]}"
        shutil.rmtree(case)


def test_losing_flushed_bytes_is_reported_as_corruption(tmp_path: Path) -> None:
    write_template(tmp_path, StorageConfig(**{**_fields(CONFIG), "segment_bytes_max": 8192}))
    open_log(tmp_path).close()
    seg = partition(tmp_path) / f"{SEG0}.log"
    data = seg.read_bytes()
    seg.write_bytes(data[:1000] + bytes(len(data) - 1000))  # zeros over flushed bytes
    as_after_a_crash(partition(tmp_path))
    log = open_log(tmp_path)
    assert log.corrupt_ranges(), "flushed bytes that changed are corruption, never a torn tail"
    log.close()
    assert not verify_data_dir(tmp_path).ok


def test_truncate_reset_retention_and_rolls_keep_every_sidecar_valid(tmp_path: Path) -> None:
    config = StorageConfig(
        **{**_fields(CONFIG), "segment_bytes_max": 1024, "retention_bytes": 3000}
    )
    log = write_template(tmp_path, config)
    assert log.segment_count > 2
    for offset in (117, 100, 61, 60, 33):
        log.truncate_to(offset)
        log.append(VALUES[offset : offset + 4])
        log.truncate_to(offset)
        assert read_all(log) == VALUES[:offset]
        assert verify_data_dir(tmp_path).ok
    log.append(VALUES[33:])
    log.set_high_watermark(log.log_end_offset)
    assert log.apply_retention(now_ms=0) > 0
    assert verify_data_dir(tmp_path).ok
    start = log.log_start_offset
    log.close()
    log = open_log(tmp_path, config)
    assert read_all(log) == VALUES[start:]
    log.reset_to(500)
    log.append([b"fresh"])
    log.close()
    report = verify_data_dir(tmp_path)
    assert report.ok and report.segments == 1
    assert sorted(p.suffix for p in partition(tmp_path).glob("000*")) == [".crc", ".idx", ".log"]


def test_segments_without_a_sidecar_read_unverified_and_the_log_rolls_before_appending(
    tmp_path: Path,
) -> None:
    write_template(tmp_path).close()
    for crc_file in partition(tmp_path).glob("*.crc"):
        crc_file.unlink()  # as an older version left them
    log = open_log(tmp_path)
    assert read_all(log) == VALUES
    issues = log.integrity_issues()
    assert issues and {i.kind for i in issues} == {UNVERIFIED}
    segments = log.segment_count
    log.append([b"new"])
    assert log.segment_count == segments + 1, "new bytes go to a new, checksummed segment"
    log.close()
    report = verify_data_dir(tmp_path)
    assert report.ok, "unverified is a warning, not corruption"
    assert any("before checksums" in f.detail for f in report.findings)
    assert len(list(partition(tmp_path).glob("*.crc"))) == 1


def test_a_damaged_index_entry_is_rebuilt_and_reported(tmp_path: Path) -> None:
    write_template(tmp_path).close()
    idx = partition(tmp_path) / f"{SEG0}.idx"
    assert idx.stat().st_size >= 5 * 12
    flip(idx, (3 * 12 + 11) * 8)  # entry 3's position: still increasing, now wrong
    assert not verify_data_dir(tmp_path).ok
    log = open_log(tmp_path)
    for offset in range(len(VALUES)):
        assert frames.decode(log.read(offset, 1)).values == [VALUES[offset]]
    assert INDEX_REBUILT in {i.kind for i in log.integrity_issues()}
    log.close()
    assert verify_data_dir(tmp_path).ok, "the rebuilt index is written back"


def test_a_damaged_sidecar_entry_is_reported_and_its_data_never_served_unverified(
    tmp_path: Path,
) -> None:
    write_template(tmp_path).close()
    side = partition(tmp_path) / f"{SEG0}.crc"
    flip(side, (16 + 16 * 4 + 6) * 8)  # entry 4's end position
    as_after_a_crash(partition(tmp_path))
    log = open_log(tmp_path)
    kinds = {i.kind for i in log.integrity_issues()}
    assert SIDECAR_DAMAGED in kinds
    try:
        assert read_all(log) == VALUES
    except CorruptDataError:
        assert log.corrupt_ranges()
    log.close()
    assert not verify_data_dir(tmp_path).ok


def test_the_scrubber_finds_corruption_no_read_touched_at_a_bounded_rate(tmp_path: Path) -> None:
    write_template(tmp_path).close()
    flip(partition(tmp_path) / f"{SEG0}.log", 700 * 8)
    log = open_log(tmp_path)
    assert log.corrupt_ranges() == []
    size = log.size_bytes
    found: list[str] = []
    scrubber = Scrubber(
        lambda: [log],
        bytes_per_s=size * 4,  # the pass takes about 1/4 s
        step_bytes=512,
        on_corrupt=lambda plog, issue: found.append(issue.segment),
    )
    started = time.monotonic()
    result = scrubber.run_pass()
    elapsed = time.monotonic() - started
    assert found == [f"{SEG0}.log"] and len(result.found) == 1
    assert result.bytes_verified >= size
    assert elapsed >= 0.8 * (size - 512) / (size * 4), "paced to bytes_per_s"
    with pytest.raises(CorruptDataError):
        read_all(log)
    assert scrubber.run_pass().found == [], "a known range is not reported twice"
    stop = threading.Event()
    stop.set()
    scrubber.run(stop)  # returns at once when stopped
    log.close()


def test_the_scrubber_passes_over_a_log_closed_under_it(tmp_path: Path) -> None:
    """A topic deleted while the scrubber walks it (its log closed between two steps, or
    before the pass reached it) ends that partition's scrub, not the scrubber (which the
    supervisor would turn into the node's exit)."""
    log = write_template(tmp_path)
    closed_midway = write_template(tmp_path / "other")
    steps = 0

    def on_step() -> list[PartitionLog]:
        return [log, closed_midway]

    log.close()  # closed before the pass reaches it
    scrubber = Scrubber(on_step, bytes_per_s=1 << 30, step_bytes=512)
    original = closed_midway.scrub_step

    def step_then_close(cursor: tuple[int, int] | None, max_bytes: int) -> object:
        nonlocal steps
        steps += 1
        out = original(cursor, max_bytes)
        if steps == 2:
            closed_midway.close()
        return out

    closed_midway.scrub_step = step_then_close  # type: ignore[method-assign]
    result = scrubber.run_pass()
    assert result.partitions == 2 and result.found == []
    assert steps >= 2


def test_replog_verify_prints_findings_and_exits_non_zero_on_corruption(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_template(tmp_path).close()
    assert cli.run(["verify", str(tmp_path)]) == 0
    assert "OK" in capsys.readouterr().out
    flip(partition(tmp_path) / f"{SEG0}.log", 100 * 8)
    assert cli.run(["verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "ERROR" in out and "CRC32C mismatch" in out and "CORRUPT" in out
    assert cli.run(["verify", str(tmp_path / "missing")]) == 2


def test_verify_changes_no_file(tmp_path: Path) -> None:
    log = write_template(tmp_path)
    log.crash()
    before = {p: p.read_bytes() for p in partition(tmp_path).iterdir()}
    verify_data_dir(tmp_path)
    assert {p: p.read_bytes() for p in partition(tmp_path).iterdir()} == before


def test_the_registry_lists_the_corrupt_ranges_of_its_open_partitions(tmp_path: Path) -> None:
    registry = PartitionRegistry(tmp_path, CONFIG, background_flush=False)
    registry.create_topic("t", 1)
    registry.get("t", 0).append(VALUES)
    registry.close_all()
    flip(partition(tmp_path) / f"{SEG0}.log", 40 * 8)
    registry = PartitionRegistry(tmp_path, CONFIG, background_flush=False)
    plog = registry.get("t", 0)
    assert registry.corrupt_ranges() == {}
    with pytest.raises(CorruptDataError):
        plog.read_uncommitted(0, 100)
    [(key, [issue])] = registry.corrupt_ranges().items()
    assert key == ("t", 0) and issue.first_offset == 0
    registry.close_all()


def test_a_log_that_lost_flushed_bytes_still_takes_and_serves_new_appends(tmp_path: Path) -> None:
    write_template(tmp_path).close()
    for seg in partition(tmp_path).glob("*.log"):
        if seg.name != f"{SEG0}.log":
            seg.write_bytes(b"")  # the last segment's bytes are gone, its sidecar is not
    log = open_log(tmp_path)
    assert log.corrupt_ranges(), "flushed bytes that vanished are reported"
    end = log.log_end_offset
    log.append([b"new", b"data"])
    assert frames.decode(log.read_uncommitted(end, 100)).values == [b"new", b"data"]
    log.close()


def test_a_sealed_segment_of_small_appends_keeps_one_sidecar_entry_per_block(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path, StorageConfig(**{**_fields(CONFIG), "flush": FlushPolicy.NEVER}))
    for value in VALUES:
        log.append([value])  # one entry each, mostly superseding the previous one
    assert log.segment_count > 1
    first = partition(tmp_path) / f"{SEG0}.crc"
    log_bytes = (partition(tmp_path) / f"{SEG0}.log").stat().st_size
    blocks = -(-log_bytes // CONFIG.checksum_chunk_bytes)
    assert (first.stat().st_size - 16) // 16 <= blocks + 1, "compacted when the log rolled"
    log.crash()
    assert verify_data_dir(tmp_path).ok
    log = open_log(tmp_path)
    assert read_all(log) == VALUES
    log.close()


def test_a_torn_sidecar_tail_at_every_byte_reopens_as_a_prefix_with_valid_checksums(
    tmp_path: Path,
) -> None:
    config = StorageConfig(**{**_fields(CONFIG), "segment_bytes_max": 8192})
    template = tmp_path / "template"
    write_template(template, config).close()  # flushed: a flushed entry closes the file
    nconfig = StorageConfig(**{**_fields(config), "flush": FlushPolicy.NEVER})
    log = open_log(template, nconfig)
    for i in range(0, 12, 3):  # unflushed appends whose sidecar entries a crash may lose
        log.append(VALUES[i : i + 3])
    log.crash()
    side = (partition(template) / f"{SEG0}.crc").read_bytes()
    kinds = side[16::16]  # the kind byte of each entry
    flushed_end = 16 + 16 * (kinds.rindex(2) + 1)  # just after the last flushed entry
    for cut in range(flushed_end, len(side) + 1):
        case = tmp_path / f"cut{cut}"
        shutil.copytree(template, case)
        (partition(case) / f"{SEG0}.crc").write_bytes(side[:cut])
        log = open_log(case, nconfig)
        got = read_all(log)
        assert len(VALUES) <= len(got) <= len(VALUES) + 12, f"cut at {cut}"
        assert got == (VALUES + VALUES[:12])[: len(got)], f"cut at {cut}"
        assert log.corrupt_ranges() == [], f"cut at {cut}"
        log.close()
        assert verify_data_dir(case).ok, f"cut at {cut}"
        shutil.rmtree(case)
