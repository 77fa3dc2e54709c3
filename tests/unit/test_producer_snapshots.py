"""Producer-state snapshots: the file framing (storage/snapshots.py), the table's payload
(replication/producer_snapshot.py), their lifecycle against the log's (truncation, reset,
retention, a crash that lost a tail), and the start from a snapshot plus a scan of the tail
(replication/producer_state.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from replog.errors import CorruptDataError
from replog.replication import producer_snapshot, producer_state
from replog.replication.producers import BatchHeader, ProducerTable
from replog.storage import FlushPolicy, PartitionLog, StorageConfig, snapshots

CONFIG = StorageConfig(segment_bytes_max=512, flush=FlushPolicy.NEVER)


def open_log(tmp_path: Path, config: StorageConfig = CONFIG) -> PartitionLog:
    return PartitionLog(tmp_path / "t" / "partition_0", "t", 0, config)


def append_batch(log: PartitionLog, table: ProducerTable, pid: int, seq: int, n: int = 3) -> None:
    """A leader's idempotent append: header + records in one write, recorded in `table`."""
    header = BatchHeader(pid, 0, seq, n, 1000 + seq)
    at = log.log_end_offset
    log.append_pieces([(header.encode(), [b"v%d" % (seq + i) for i in range(n)])])
    table.record(at, header)


def full_scan(log: PartitionLog) -> ProducerTable:
    table = ProducerTable()
    producer_state.scan(table, log, log.log_start_offset, 4096)
    return table


def snapshot(log: PartitionLog, table: ProducerTable) -> int:
    offset = log.log_end_offset
    log.write_snapshot(offset, producer_snapshot.encode(table))
    return offset


def test_a_snapshot_file_round_trips_and_any_damage_is_detected(tmp_path: Path) -> None:
    data = snapshots.encode(77, b"payload bytes")
    assert data[:4] == b"RLSN" and len(data) == 18 + 13 + 4
    assert snapshots.decode(77, data) == b"payload bytes"
    with pytest.raises(CorruptDataError):
        snapshots.decode(78, data)  # renamed: the offset inside must match the name's
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0x10
        with pytest.raises(CorruptDataError):
            snapshots.decode(77, bytes(flipped))
    for cut in range(len(data)):
        with pytest.raises(CorruptDataError):
            snapshots.decode(77, data[:cut])
    with pytest.raises(CorruptDataError):
        snapshots.decode(77, data + b"\0")


def test_a_table_round_trips_through_its_payload_with_its_partial_batch_and_order() -> None:
    table = ProducerTable()
    for k in range(8):  # producer 1 has more batches than are kept
        table.record(10 * k, BatchHeader(1 + k % 3, k // 4, k, 2, 5000 + k))
    table.truncate(65)  # producer 3 keeps its epoch with no batch left
    table.apply_frames(b"", 0)
    partial = (90, BatchHeader(9, 2, 40, 5, 123))
    table.restore(table.entries(), partial)
    payload = producer_snapshot.encode(table)
    back = ProducerTable()
    producer_snapshot.load(payload, back)
    assert back.state() == table.state()
    assert back.entries() == table.entries()  # least recently active first, timestamps
    assert back.partial == partial
    for cut in range(len(payload)):
        with pytest.raises(producer_snapshot.SnapshotFormatError):
            producer_snapshot.decode(payload[:cut])


def test_a_start_takes_the_newest_snapshot_and_scans_only_the_records_after_it(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    table = ProducerTable()
    for seq in range(0, 60, 3):
        append_batch(log, table, pid=seq % 4 + 1, seq=seq)
    at = snapshot(log, table)
    for seq in range(60, 90, 3):
        append_batch(log, table, pid=seq % 4 + 1, seq=seq)
    log.close()
    log = open_log(tmp_path)  # a clean close: the recovery point is the LEO
    loaded = producer_state.load(log, 4096)
    assert loaded.snapshot_offset == at and loaded.scanned_from == at
    assert loaded.table.state() == table.state() == full_scan(log).state()
    log.close()


def test_a_corrupt_snapshot_falls_back_to_an_older_one_then_to_the_scan(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(tmp_path)
    table = ProducerTable()
    taken = []
    for seq in range(0, 45, 3):
        append_batch(log, table, pid=7, seq=seq)
        if seq % 15 == 12:
            taken.append(snapshot(log, table))
    log.close()
    directory = tmp_path / "t" / "partition_0"
    newest = directory / snapshots.snapshot_name(taken[-1])
    newest.write_bytes(newest.read_bytes()[:-1] + b"\xff")
    log = open_log(tmp_path)
    with caplog.at_level(logging.WARNING, "replog.replication"):
        loaded = producer_state.load(log, 4096)
    assert loaded.snapshot_offset == taken[-2]
    assert "not used" in caplog.text and "checksum" in caplog.text
    assert loaded.table.state() == full_scan(log).state()
    for offset in taken:
        (directory / snapshots.snapshot_name(offset)).write_bytes(b"junk")
    loaded = producer_state.load(log, 4096)
    assert loaded.snapshot_offset is None and loaded.scanned_from == log.log_start_offset
    assert loaded.table.state() == full_scan(log).state() == table.state()
    log.close()


def test_truncation_below_a_snapshot_deletes_it_and_a_reset_deletes_them_all(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    table = ProducerTable()
    taken = []
    for seq in range(0, 60, 3):
        append_batch(log, table, pid=1, seq=seq)
        if seq % 15 == 12:
            taken.append(snapshot(log, table))
    assert log.snapshot_offsets() == taken[-snapshots.SNAPSHOTS_KEPT :]
    cut = taken[-2]  # a snapshot exactly at the truncation point stays: it is below it
    log.truncate_to(cut)
    table.truncate(cut)
    assert log.snapshot_offsets() == [o for o in taken[-3:] if o <= cut]
    # Records appended in place of the truncated ones are never described by the old state.
    append_batch(log, table, pid=2, seq=0)
    loaded = producer_state.load(log, 4096)
    assert loaded.snapshot_offset is None  # nothing flushed (flush=never): no recovery point
    log.flush()
    log.checkpoint_high_watermark()
    loaded = producer_state.load(log, 4096)
    assert loaded.snapshot_offset == cut
    assert loaded.table.state() == full_scan(log).state()
    log.reset_to(log.log_end_offset + 5)
    assert log.snapshot_offsets() == []
    log.close()


def test_a_crash_that_lost_the_tail_a_snapshot_describes_deletes_it_on_open(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    table = ProducerTable()
    for seq in range(0, 30, 3):
        append_batch(log, table, pid=1, seq=seq)
    log.flush()
    log.checkpoint_high_watermark()  # the recovery point: here
    kept = snapshot(log, table)
    for seq in range(30, 90, 3):
        append_batch(log, table, pid=1, seq=seq)
    lost = snapshot(log, table)
    log.crash()
    # The crash lost the unflushed segments past the recovery point (a power failure).
    directory = tmp_path / "t" / "partition_0"
    bases = sorted(int(p.name.split(".")[0]) for p in directory.glob("*.log"))
    gone = [b for b in bases if b > kept]
    assert gone and gone[-1] < lost
    for b in gone:
        for p in directory.glob(f"{b:020d}.*"):
            p.unlink()
    log = open_log(tmp_path)
    assert log.log_end_offset < lost
    assert log.snapshot_offsets() == [kept]
    loaded = producer_state.load(log, 4096)
    assert loaded.snapshot_offset == kept
    assert loaded.table.state() == full_scan(log).state()
    log.close()


def test_a_snapshot_above_the_recovery_point_is_not_used(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    table = ProducerTable()
    for seq in range(0, 30, 3):
        append_batch(log, table, pid=1, seq=seq)
    log.flush()
    log.checkpoint_high_watermark()
    below = snapshot(log, table)
    append_batch(log, table, pid=1, seq=30)
    snapshot(log, table)  # records below it not flushed
    log.crash()
    log = open_log(tmp_path)
    loaded = producer_state.load(log, 4096)
    assert loaded.snapshot_offset == below
    assert loaded.table.state() == table.state()
    log.close()


def test_the_newest_snapshot_a_crash_may_use_is_kept_past_the_newest_three(
    tmp_path: Path,
) -> None:
    """A busy partition rolls (and snapshots) more often than it checkpoints its recovery
    point: the newest snapshot at or below that point stays, so a start after a crash
    scans from it, not the whole log."""
    log = open_log(tmp_path)
    table = ProducerTable()
    for seq in range(0, 30, 3):
        append_batch(log, table, pid=1, seq=seq)
    snapshot(log, table)  # an older one: not kept
    append_batch(log, table, pid=2, seq=0)
    log.flush()
    log.checkpoint_high_watermark()  # the recovery point on disk: here
    usable = snapshot(log, table)
    above = []
    for seq in range(30, 30 + 3 * (snapshots.SNAPSHOTS_KEPT + 2), 3):
        append_batch(log, table, pid=1, seq=seq)
        above.append(snapshot(log, table))  # no flush, no checkpoint: above the point
    kept = above[-snapshots.SNAPSHOTS_KEPT :]
    assert log.snapshot_offsets() == [usable, *kept]
    log.crash()
    log = open_log(tmp_path)
    loaded = producer_state.load(log, 4096)
    assert loaded.snapshot_offset == loaded.scanned_from == usable
    assert loaded.table.state() == full_scan(log).state()
    log.flush()
    log.checkpoint_high_watermark()  # the point moves up: the one kept for it goes
    snapshot(log, full_scan(log))
    assert usable not in log.snapshot_offsets()
    assert len(log.snapshot_offsets()) == snapshots.SNAPSHOTS_KEPT
    log.close()


def test_retention_deletes_the_snapshots_below_the_new_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path, StorageConfig(segment_bytes_max=512, retention_bytes=1024))
    table = ProducerTable()
    first = None
    for seq in range(0, 90, 3):
        append_batch(log, table, pid=1, seq=seq)
        if seq == 9:
            first = snapshot(log, table)
    log.set_high_watermark(log.log_end_offset)
    newest = snapshot(log, table)
    assert first is not None and first in log.snapshot_offsets()
    assert log.apply_retention(0) > 0
    assert log.log_start_offset > first
    assert log.snapshot_offsets() == [newest]
    log.close()


def test_the_driver_writes_snapshots_at_rolls_and_a_clean_close_and_starts_from_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A single voter under flush=interval (appends performed in the caller's task): the
    owner writes a snapshot after each roll and at the close; the replica that starts on
    the log again takes the one at the log end (no scan) and still answers a retry of the
    last batch with its offsets."""
    import asyncio
    import random

    from replog.replication import Acks, ReplicaConfig, Role
    from replog.replication.driver import ReplicaDriver
    from replog.replication.producers import ProducerBatch
    from tests.unit.test_replication_driver import DEADLINE_S, LocalNetwork, Transport, wait_for

    storage = StorageConfig(segment_bytes_max=2048, flush=FlushPolicy.INTERVAL)

    async def solo(close_records_min: int) -> tuple[PartitionLog, ReplicaDriver]:
        log = PartitionLog(tmp_path / "solo", "t", 0, storage)
        driver = ReplicaDriver(
            log,
            ReplicaConfig(1, (1,), flush_always=False),
            Transport(LocalNetwork(), 1),
            rng=random.Random(1),
            snapshot_close_records_min=close_records_min,
        )
        await driver.start()
        await wait_for(lambda: driver.role is Role.LEADER)
        return log, driver

    async def main() -> None:
        log, driver = await solo(close_records_min=1)
        answers = []
        for seq in range(0, 90, 3):
            values = [b"%03d" % (seq + i) + bytes(100) for i in range(3)]
            batch = ProducerBatch(9, 0, seq)
            answers.append(await driver.append(values, Acks.ALL, DEADLINE_S, batch))
        await wait_for(lambda: driver.snapshots_written >= 2)
        rolled = log.snapshot_offsets()
        assert rolled and rolled[-1] < log.log_end_offset
        await driver.close()
        leo = log.log_end_offset
        log.close()
        assert snapshots.offsets(tmp_path / "solo")[-1] == leo
        with caplog.at_level(logging.INFO, "replog.replication"):
            log, driver = await solo(close_records_min=1)
        assert "scanning the whole log" not in caplog.text
        last = [b"%03d" % (87 + i) + bytes(100) for i in range(3)]
        again = await driver.append(last, Acks.ALL, DEADLINE_S, ProducerBatch(9, 0, 87))
        assert again == answers[-1]
        await driver.close()
        log.close()

    asyncio.run(main())


def test_replog_verify_reports_a_damaged_snapshot_and_one_above_the_log_end(
    tmp_path: Path,
) -> None:
    from replog.storage.verify import WARNING, verify_data_dir

    log = open_log(tmp_path)
    table = ProducerTable()
    append_batch(log, table, pid=1, seq=0)
    good = snapshot(log, table)
    append_batch(log, table, pid=1, seq=3)
    damaged = snapshot(log, table)
    leo = log.log_end_offset
    log.close()
    directory = tmp_path / "t" / "partition_0"
    path = directory / snapshots.snapshot_name(damaged)
    path.write_bytes(path.read_bytes()[:-2])
    (directory / snapshots.snapshot_name(leo + 10)).write_bytes(snapshots.encode(leo + 10, b""))
    report = verify_data_dir(tmp_path)
    found = {f.path.name: f for f in report.findings}
    assert snapshots.snapshot_name(good) not in found
    assert found[snapshots.snapshot_name(damaged)].severity == WARNING
    assert "above the log end" in found[snapshots.snapshot_name(leo + 10)].detail
