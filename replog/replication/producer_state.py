"""A replica's producer table at start: the newest valid snapshot plus a scan of the tail.
The driver's I/O side (blocking: called in a thread by the owner).

`load` takes the newest producer-state snapshot (`producer_snapshot.py`, files of
`replog.storage.snapshots`) whose offset is in [log start, recovery point] (every record
below it is on disk, so the records it was built from are the log's), then scans only the
records from its offset to the LEO for batch headers. A snapshot that cannot be read or
decoded is logged and the next older one is tried; with none left the whole log is scanned
(as before snapshots existed). A snapshot above the recovery point is not used (after a
crash the records under it may not all be there), though it stays: once the log holds them
again, flushed, it is valid (storage deletes it first if a truncation goes below it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial

from replog import frames
from replog.errors import CorruptDataError, ReplogError
from replog.replication import producer_snapshot
from replog.replication.outputs import Output
from replog.replication.performing import Performer
from replog.replication.producers import ProducerTable
from replog.storage import PartitionLog

_log = logging.getLogger("replog.replication")


@dataclass(frozen=True, slots=True)
class Loaded:
    table: ProducerTable
    snapshot_offset: int | None  # the snapshot used (None: none, the whole log was scanned)
    scanned_from: int  # where the scan of the log started
    scanned_to: int  # where it stopped (the LEO, unless corrupt data stopped it)


def load(log: PartitionLog, fetch_bytes_max: int) -> Loaded:
    table = ProducerTable()
    start, bound = log.log_start_offset, min(log.durable_offset, log.log_end_offset)
    where = f"replica {log.topic}/{log.partition}"
    used: int | None = None
    for offset in reversed(log.snapshot_offsets()):
        if not start <= offset <= bound:
            continue
        try:
            producer_snapshot.load(log.read_snapshot(offset), table)
        except (CorruptDataError, producer_snapshot.SnapshotFormatError) as exc:
            _log.warning("%s: producer snapshot at %d not used: %s", where, offset, exc)
            continue
        except ReplogError as exc:  # an I/O error reading it: the scan reads the log anyway
            _log.warning("%s: producer snapshot at %d unreadable: %s", where, offset, exc)
            continue
        used = start = offset
        break
    if used is None and log.log_end_offset > log.log_start_offset:
        _log.info("%s: no producer snapshot to start from: scanning the whole log", where)
    end = scan(table, log, start, fetch_bytes_max)
    return Loaded(table, used, start, end)


def scan(table: ProducerTable, log: PartitionLog, offset: int, fetch_bytes_max: int) -> int:
    """Apply every batch header from `offset` to the LEO to `table`, read in
    `fetch_bytes_max` chunks; returns where it stopped."""
    end = log.log_end_offset
    while offset < end:
        try:
            data = log.read_uncommitted(offset, fetch_bytes_max, end_offset=end)
        except CorruptDataError as exc:
            # The replica starts all the same: the repair loop refetches its log (the
            # table is rebuilt as it does); until then it knows the batches before here.
            _log.warning(
                "replica %s/%s: producer state scan stops at %d: %s",
                log.topic,
                log.partition,
                offset,
                exc,
            )
            break
        if not data:
            break
        offset = frames.next_offset(data, offset)
        table.apply_frames(data, offset)
    return offset


class ProducerSnapshots(Performer):
    """The owner's side (a base of `ReplicaDriver`, its state the driver's): load the table
    at start or rebuild, write a snapshot when the log rolled a segment and at a clean close."""

    snapshot_close_records_min: int
    snapshots_written: int
    _snapshot_offset: int  # the newest snapshot's offset (or where the start's scan began)
    _snapshot_base: int  # the active segment's base offset when it was written
    _producers_loaded: bool
    _failed: ReplogError | None
    _offline: ReplogError | None
    _stopped_because: str | None
    _handoff: list[Output]

    async def _load_producers(self) -> None:
        """The producer table of the log as it is on disk: the newest valid snapshot and a
        scan of the records after it (`load`, in a thread)."""
        loaded = await self._io(partial(load, self.log, self.fetch_bytes_max))
        self.replica.producers = loaded.table
        self._snapshot_offset = loaded.scanned_from
        # A scan that crossed a segment roll is worth a snapshot at once (the owner's next
        # pass writes it): the next start need not scan it again.
        active = self.log.active_base_offset
        self._snapshot_base = -1 if loaded.scanned_from < active else active
        self._producers_loaded = True

    def _snapshot_due(self) -> bool:
        """The log rolled a segment since the last snapshot (or the start scanned past a
        roll), and the core's view is the log's (nothing failed, nothing left to perform)."""
        return (
            self._producers_loaded
            and self._snapshot_base != self.log.active_base_offset
            and not (self._handoff or self._failed or self._offline or self.log.closed)
        )

    def _snapshot_at_close(self) -> bool:
        """At a clean close: worth a snapshot when the next start would otherwise scan at
        least `snapshot_close_records_min` records (an idle or small partition costs no
        write, so closing many of them stays quick)."""
        if not self._producers_loaded or self._stopped_because is not None:
            return False
        if self._handoff or self._failed or self._offline or self.log.closed:
            return False
        leo = self.log.log_end_offset
        if self.replica.log_end_offset != leo:
            return False
        last = self._snapshot_offset
        if last > leo:  # a truncation went below it (and deleted it): the newest left
            try:
                last = max((o for o in self.log.snapshot_offsets() if o <= leo), default=0)
            except ReplogError:
                last = 0
        return leo - max(last, self.log.log_start_offset) >= self.snapshot_close_records_min

    async def _write_snapshot(self) -> None:
        """Write the producer table as a snapshot at the LEO (the owner, between two passes:
        the table is exactly the log's). A failure (a full disk) is only logged: the older
        snapshots stay valid, the next start scans more."""
        self._snapshot_base = self.log.active_base_offset
        offset = self.log.log_end_offset
        assert self.replica.log_end_offset == offset, (self.replica.log_end_offset, offset)
        payload = producer_snapshot.encode(self.replica.producers)
        try:
            await self._io(partial(self.log.write_snapshot, offset, payload))
        except ReplogError as exc:
            _log.warning(
                "replica %s/%s: producer snapshot at %d not written: %s",
                self.log.topic,
                self.log.partition,
                offset,
                exc,
            )
            return
        self._snapshot_offset = offset
        self.snapshots_written += 1
