"""Golden files: the seed 003 format written by hand here, not by the code under test."""

from __future__ import annotations

from pathlib import Path

from replog import frames
from replog.storage import StorageConfig
from tests.storage_helpers import open_log, read_all

CONFIG = StorageConfig(segment_bytes_max=200, index_interval_bytes=50, record_bytes_max=100)
VALUES = [b"alpha", b"", b"gamma" * 6, b"delta!", b"e" * 40, b"zeta", b"eta" * 10, b"theta"]


def u64(n: int) -> bytes:
    return n.to_bytes(8, "big")


def u32(n: int) -> bytes:
    return n.to_bytes(4, "big")


def golden_files() -> dict[str, bytes]:
    """Segments of at most 200 bytes; index entries at the first record, then for the first
    record starting >= 50 bytes after the last indexed one."""
    files: dict[str, bytes] = {}
    base, log, idx, last_indexed = 0, b"", b"", None
    for offset, value in enumerate(VALUES):
        frame = u64(offset) + u32(len(value)) + value
        if log and len(log) + len(frame) > 200:
            files[f"{base:020d}.log"], files[f"{base:020d}.idx"] = log, idx
            base, log, idx, last_indexed = offset, b"", b"", None
        if last_indexed is None or len(log) - last_indexed >= 50:
            idx += u32(offset - base) + u64(len(log))
            last_indexed = len(log)
        log += frame
    files[f"{base:020d}.log"], files[f"{base:020d}.idx"] = log, idx
    return files


def test_the_golden_files_split_where_the_rules_say() -> None:
    files = golden_files()
    assert sorted(files) == [
        "00000000000000000000.idx",
        "00000000000000000000.log",
        "00000000000000000007.idx",
        "00000000000000000007.log",
    ]
    assert len(files["00000000000000000000.idx"]) == 3 * 12


def test_hand_written_segments_are_read_correctly(tmp_path: Path) -> None:
    for name, data in golden_files().items():
        (tmp_path / name).write_bytes(data)
    log = open_log(tmp_path, CONFIG)
    assert log.log_end_offset == len(VALUES)
    assert read_all(log) == VALUES
    for offset, value in enumerate(VALUES):
        assert frames.decode(log.read_uncommitted(offset, 1)).values == [value]
    log.close()
    for name, data in golden_files().items():
        assert (tmp_path / name).read_bytes() == data, f"{name} changed by a clean reopen"


def test_the_code_writes_the_golden_files_byte_for_byte(tmp_path: Path) -> None:
    log = open_log(tmp_path, CONFIG)
    log.append(VALUES[:3])
    log.append(VALUES[3:])
    log.close()
    written = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix in (".log", ".idx")}
    assert written == golden_files()
