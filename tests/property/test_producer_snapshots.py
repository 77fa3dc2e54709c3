"""A replica's producer table after a restart (the newest valid snapshot at or below the
recovery point, plus a scan of the records after it) against a full scan of its log, over
random histories: idempotent batches appended by a leader and fetched by a follower in
parts (some never whole: torn by a new leader's marker), epoch bumps, leader changes,
truncations, flushes, clean restarts and crashes, with a snapshot at every segment roll and
(sometimes) at a clean close, as the replica's driver writes them.

The claims:
* with no truncation in the history, the restarted table *is* the full scan's;
* with truncations, every producer of the full scan is in it with a suffix of the scan's
  batches (a truncation keeps the live table's newest epoch and last batches, which a
  snapshot written later keeps too) and no older epoch, and the partial batch is the same;
* after a clean close that wrote a snapshot, the restarted table is exactly the table
  before the restart.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replog import frames
from replog.replication import producer_snapshot, producer_state
from replog.replication.producers import BatchHeader, ProducerTable
from replog.storage import FlushPolicy, PartitionLog, StorageConfig

CONFIG = StorageConfig(segment_bytes_max=400, flush=FlushPolicy.NEVER)
MARKER = b"\x08\x01"  # any control record that is not a batch header (an epoch marker)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("batch"), st.integers(1, 4), st.integers(1, 4), st.integers(0, 5)),
        st.tuples(st.just("deliver")),
        st.tuples(st.just("bump"), st.integers(1, 4)),
        st.tuples(st.just("lead")),
        st.tuples(st.just("follow")),
        st.tuples(st.just("truncate"), st.integers(0, 12)),
        st.tuples(st.just("flush")),
        st.tuples(st.just("restart"), st.booleans(), st.booleans()),
    ),
    max_size=60,
)


class Replica:
    """The log and the table as the driver keeps them (snapshots at rolls and closes)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.log = PartitionLog(directory, "t", 0, CONFIG)
        self.table = ProducerTable()
        self.snapshot_base = self.log.active_base_offset
        self.leading = True
        self.pending: bytes | None = None  # the rest of a batch a follower fetched in part
        self.epochs = dict.fromkeys(range(1, 5), 0)
        self.sequences = dict.fromkeys(range(1, 5), 0)
        self.truncated = False

    def after(self) -> None:
        if self.log.active_base_offset != self.snapshot_base:  # a roll
            self.snapshot()

    def snapshot(self) -> None:
        self.snapshot_base = self.log.active_base_offset
        self.log.write_snapshot(self.log.log_end_offset, producer_snapshot.encode(self.table))

    def fetched(self, buf: bytes) -> None:
        result = self.log.append_frames(buf)
        self.table.apply_frames(buf, result.last_offset + 1)

    def batch(self, pid: int, n: int, cut: int) -> None:
        header = BatchHeader(pid, self.epochs[pid], self.sequences[pid], n, 7)
        self.sequences[pid] += n
        values = [b"%d-%d" % (pid, self.sequences[pid] + i) for i in range(n)]
        if self.leading:
            at = self.log.log_end_offset
            self.log.append_pieces([(header.encode(), values)])
            self.table.record(at, header)
            return
        self.deliver()
        at = self.log.log_end_offset
        buf = frames.encode(at, [header.encode()], control=True) + frames.encode(at + 1, values)
        ends = frames.scan(buf, at)
        split = ends[min(cut, len(ends) - 1)]
        self.fetched(buf[:split])
        self.pending = buf[split:] or None

    def deliver(self) -> None:
        if self.pending is not None and not self.leading:
            self.fetched(self.pending)
        self.pending = None

    def lead(self) -> None:
        self.pending = None
        self.table.drop_partial()
        self.log.append([MARKER], control=True)
        self.leading = True

    def follow(self) -> None:
        self.pending = None
        self.leading = False
        self.fetched(frames.encode(self.log.log_end_offset, [MARKER], control=True))

    def truncate(self, back: int) -> None:
        self.pending = None
        offset = max(self.log.log_start_offset, self.log.log_end_offset - back)
        self.log.truncate_to(offset)
        self.table.truncate(offset)
        self.truncated = True
        self.leading = False  # a follower's (a replica leads again only through `lead`)

    def restart(self, crash: bool, close_snapshot: bool) -> None:
        self.pending = None
        before = self.table.state(), self.table.partial
        if crash:
            self.log.crash()
        else:
            if close_snapshot:
                self.snapshot()
            self.log.close()
        self.log = PartitionLog(self.directory, "t", 0, CONFIG)
        loaded = producer_state.load(self.log, 256)
        assert loaded.scanned_to == self.log.log_end_offset
        self.table = loaded.table
        self.snapshot_base = self.log.active_base_offset  # as the driver: see below
        if loaded.scanned_from < self.snapshot_base:
            self.snapshot()
        scan = ProducerTable()
        producer_state.scan(scan, self.log, self.log.log_start_offset, 256)
        check_against_scan(self.table, scan, exact=not self.truncated)
        if not crash and close_snapshot:
            assert loaded.snapshot_offset == self.log.log_end_offset
            assert (self.table.state(), self.table.partial) == before


def check_against_scan(restarted: ProducerTable, scan: ProducerTable, *, exact: bool) -> None:
    assert restarted.partial == scan.partial
    if exact:
        assert restarted.state() == scan.state()
        return
    mine = restarted.state()
    for pid, (epoch, batches) in scan.state().items():
        assert pid in mine, pid
        my_epoch, my_batches = mine[pid]
        assert my_epoch >= epoch
        assert batches[len(batches) - len(my_batches) :] == my_batches, (pid, my_batches)
    for pid, (_epoch, my_batches) in mine.items():
        assert pid in scan.state() or not my_batches, pid


@settings(
    max_examples=int(os.environ.get("REPLOG_PSNAP_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(ops)
def test_a_restarted_replica_has_the_producer_state_of_a_full_scan(
    history: list[tuple[object, ...]],
) -> None:
    with tempfile.TemporaryDirectory(prefix="replog-psnap-") as root:
        r = Replica(Path(root) / "t" / "partition_0")
        for op in history:
            kind = op[0]
            if kind == "batch":
                r.batch(*op[1:])
            elif kind == "deliver":
                r.deliver()
            elif kind == "bump":
                r.epochs[op[1]] += 1
                r.sequences[op[1]] = 0
            elif kind == "lead":
                r.lead()
            elif kind == "follow":
                r.follow()
            elif kind == "truncate":
                r.truncate(op[1])
            elif kind == "flush":
                r.log.flush()
                r.log.checkpoint_high_watermark()
            else:
                r.restart(op[1], op[2])
            r.after()
        r.restart(crash=False, close_snapshot=True)
        r.restart(crash=True, close_snapshot=False)
        r.log.close()
