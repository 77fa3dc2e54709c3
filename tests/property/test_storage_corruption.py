"""Any single flipped bit in a segment (`.log`), its index (`.idx`) or its checksum sidecar
(`.crc`) is detected, both by a node that reads the partition and by `replog verify`; and
no read ever returns a byte that differs from what was appended.

The template partition has several segments, appends of mixed sizes (so sidecars hold
superseded entries too) and small checksum blocks, and was closed cleanly (flushed).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from replog import frames
from replog.errors import CorruptDataError
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from replog.storage.integrity import CORRUPT, INDEX_REBUILT, SIDECAR_DAMAGED
from replog.storage.verify import verify_data_dir

CONFIG = StorageConfig(
    segment_bytes_max=1024,
    index_interval_bytes=64,
    index_bytes_initial=48,
    record_bytes_max=300,
    checksum_chunk_bytes=96,
    flush=FlushPolicy.INTERVAL,
)
VALUES = [bytes([97 + i % 26]) * (i * 11 % 53) for i in range(90)]


def partition(root: Path) -> Path:
    return root / "t" / "partition_0"


@cache
def template() -> Path:
    root = Path(tempfile.mkdtemp(prefix="replog-flip-"))
    atexit.register(shutil.rmtree, root, True)
    log = PartitionLog(partition(root), "t", 0, CONFIG)
    i = 0
    for size in (1, 5, 1, 1, 9, 2, 1, 14, 3, 1, 1, 20, 4, 1, 26):
        log.append(VALUES[i : i + size])
        i += size
    assert i == len(VALUES)
    log.set_high_watermark(len(VALUES))
    log.close()
    assert verify_data_dir(root).ok
    return root


def files(suffix: str) -> list[str]:
    return sorted(p.name for p in partition(template()).glob(f"*{suffix}"))


def read_everything(log: PartitionLog) -> bool:
    """Read each record alone and the log in large chunks; assert every byte served is
    right; return whether any read was refused as corrupt."""
    refused = False
    for offset in range(log.log_start_offset, log.log_end_offset):
        try:
            got = frames.decode(log.read_uncommitted(offset, 1, end_offset=offset + 1))
        except CorruptDataError:
            refused = True
            continue
        assert got.offsets == [offset] and got.values == [VALUES[offset]]
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        try:
            got = frames.decode(log.read_uncommitted(offset, 700))
        except CorruptDataError:
            refused = True
            offset += 1
            continue
        assert got.offsets == list(range(offset, offset + len(got)))
        assert got.values == VALUES[offset : offset + len(got)]
        offset += len(got)
    return refused


@settings(max_examples=400, deadline=None)
@given(suffix=st.sampled_from([".log", ".idx", ".crc"]), data=st.data())
def test_any_single_flipped_bit_is_detected_on_read_and_by_verify(
    suffix: str, data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(files(suffix)), label="file")
    size = (partition(template()) / name).stat().st_size
    bit = data.draw(st.integers(min_value=0, max_value=size * 8 - 1), label="bit")
    root = Path(tempfile.mkdtemp(prefix="replog-flip-case-"))
    try:
        shutil.copytree(template(), root, dirs_exist_ok=True)
        path = partition(root) / name
        raw = bytearray(path.read_bytes())
        raw[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(bytes(raw))

        report = verify_data_dir(root)
        assert not report.ok, f"verify missed bit {bit} of {name}"

        log = PartitionLog(partition(root), "t", 0, CONFIG)
        try:
            assert log.log_end_offset == len(VALUES), "flushed records are never cut"
            refused = read_everything(log)
            kinds = {issue.kind for issue in log.integrity_issues()}
            assert refused or kinds & {CORRUPT, INDEX_REBUILT, SIDECAR_DAMAGED}, (
                f"bit {bit} of {name} went unnoticed by the node"
            )
            if suffix == ".log":
                assert refused and CORRUPT in kinds, "changed data is refused, not served"
            if suffix == ".idx":
                assert not refused, "a damaged index is rebuilt from intact data"
        finally:
            log.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
