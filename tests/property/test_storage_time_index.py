"""The time index (`storage/time_index.py`): offsets by time match a brute-force scan on
random data; the index built with appends, the file written at close and the index rebuilt
from the log are the same; recovery from a torn tail at every byte keeps answers right."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from replog import records
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from replog.storage.config import NO_TIMESTAMP
from replog.storage.time_index import TimeIndex, time_index_file_name

CONFIG = StorageConfig(
    segment_bytes_max=400,
    index_interval_bytes=64,
    index_bytes_initial=24,
    record_bytes_max=200,
    checksum_chunk_bytes=64,
    flush=FlushPolicy.NEVER,
    timestamps=records.frame_timestamps,
)

stamps = st.integers(-50, 50)  # a small range: ties, repeats and going back in time
batches = st.lists(
    st.one_of(
        st.lists(st.tuples(st.binary(max_size=30), stamps), min_size=1, max_size=6),
        st.just([]),  # a control record (no timestamp)
    ),
    min_size=1,
    max_size=25,
)
Model = list[int]  # per offset: the record's timestamp, NO_TIMESTAMP for control records


def fill(log: PartitionLog, plan: list[list[tuple[bytes, int]]]) -> Model:
    model: Model = []
    for batch in plan:
        if not batch:
            log.append([b"marker"], control=True)
            model.append(NO_TIMESTAMP)
            continue
        log.append([records.encode(v, timestamp_ms=t) for v, t in batch])
        model += [t for _, t in batch]
    log.set_high_watermark(log.log_end_offset)
    return model


def brute_force(model: Model, t: int, upper: int) -> tuple[int, int] | None:
    for offset, ts in enumerate(model[:upper]):
        if ts != NO_TIMESTAMP and ts >= t:
            return offset, ts
    return None


def check_answers(log: PartitionLog, model: Model) -> None:
    upper = log.high_watermark
    for t in range(-52, 53, 7):
        assert log.offset_for_time(t) == brute_force(model, t, upper), t


def rebuilt(directory: Path) -> list[TimeIndex | None]:
    """Each segment's time index built from its log alone (files removed first)."""
    for p in directory.glob("*.timeindex"):
        p.unlink()
    log = PartitionLog(directory, "t", 0, CONFIG)
    try:
        segments = log._opened()
        return [segments.use(seg).times() for seg in segments.segments]
    finally:
        log.crash()  # no files written: the directory stays as it was


@given(batches, st.booleans())
@settings(max_examples=60)
def test_offsets_by_time_match_a_brute_force_scan(
    tmp_path_factory: object, plan: list[list[tuple[bytes, int]]], look_first: bool
) -> None:
    directory = Path(tmp_path_factory.mktemp("ti")) / "p"  # type: ignore[attr-defined]
    log = PartitionLog(directory, "t", 0, CONFIG)
    if look_first:  # the index is built at once and kept up to date by the appends
        assert log.offset_for_time(0) is None
    model = fill(log, plan)
    check_answers(log, model)
    live = [seg.times() for seg in log._opened().segments]
    log.close()  # writes the files
    written = written_indexes(directory)
    assert written == live
    assert rebuilt(directory) == written
    again = PartitionLog(directory, "t", 0, CONFIG)  # from the files
    check_answers(again, model)
    again.close()


def written_indexes(directory: Path) -> list[TimeIndex | None]:
    """Each segment's `.timeindex` file as loaded (None: none, or not for these bytes)."""
    out = []
    for path in sorted(directory.glob("*.idx")):
        raw = path.read_bytes()
        rels = np.frombuffer(raw, dtype=[("rel", ">u4"), ("pos", ">u8")])["rel"].tolist()
        base = int(path.stem)
        size = (directory / f"{base:020d}.log").stat().st_size
        out.append(TimeIndex.load(directory / time_index_file_name(base), size, rels))
    return out


last_batches = st.lists(st.tuples(st.binary(max_size=20), stamps), min_size=1, max_size=4)


@given(batches, batches, last_batches)
@settings(max_examples=10)
def test_recovery_from_a_torn_tail_at_every_byte_keeps_answers_right(
    tmp_path_factory: object,
    before: list[list[tuple[bytes, int]]],
    after: list[list[tuple[bytes, int]]],
    last: list[tuple[bytes, int]],
) -> None:
    # `before` is appended and closed cleanly (time index files written); `after` is
    # appended on reopen and flushed, then `last`, and the node crashes with `last`, its
    # unflushed write, torn at any byte (damage to flushed bytes is corruption, which
    # test_storage_corruption covers).
    root = Path(tmp_path_factory.mktemp("torn"))  # type: ignore[attr-defined]
    template = root / "template"
    log = PartitionLog(template, "t", 0, CONFIG)
    log.offset_for_time(0)  # built early: appends keep it, close writes it
    model = fill(log, before)
    log.close()
    log = PartitionLog(template, "t", 0, CONFIG)
    model += fill(log, after)
    log.flush()  # what recovery may cut is what was written since the last flush
    sizes = {p.name: p.stat().st_size for p in template.glob("*.log")}
    model += fill(log, [last])
    log.crash()
    saved = {p.name: p.read_bytes() for p in template.iterdir() if p.is_file()}
    active = max(n for n in saved if n.endswith(".log"))
    # A write that rolled to a new segment: recovery of a segment never flushed has rules
    # of its own (segment.py, Recovery: the bytes before its last index entry are trusted),
    # tested in test_storage_recovery.
    assume(active in sizes)
    work = root / "work"
    for cut in range(sizes[active], len(saved[active])):  # every byte of `last`
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        for name, data in saved.items():
            (work / name).write_bytes(data[:cut] if name == active else data)
        torn = PartitionLog(work, "t", 0, CONFIG)
        torn.set_high_watermark(torn.log_end_offset)
        assert torn.log_end_offset < len(model)  # the cut lost at least one record
        check_answers(torn, model[: torn.log_end_offset])
        torn.close()
        for got, expected in zip(written_indexes(work), rebuilt(work), strict=True):
            assert got is None or got == expected  # None: never needed, never written
