"""A follower copying its leader's log while the leader's cleaner compacts it (a state
machine against the leader itself as the model): writes with keys, tombstones and records
without keys, cleaning passes at any time, fetches of any size (the driver's way:
`PartitionLog.reached`, then `append_frames(end_offset=)`), crashes and clean restarts
of the follower. After every step the follower holds exactly the records the leader held
when it copied them, at the same offsets, and its log ends where the leader's range did;
once caught up, it holds every record the leader holds (and those the leader's cleaner
dropped after they were copied, which its own cleaner drops in turn)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from replog import frames, records
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from replog.storage.cleaner import CleanerConfig, clean
from tests.storage_helpers import as_after_a_crash

CONFIG = StorageConfig(
    segment_bytes_max=240,
    index_interval_bytes=40,
    index_bytes_initial=24,
    record_bytes_max=1000,
    flush=FlushPolicy.NEVER,
    checksum_chunk_bytes=64,
)
CLEANER = CleanerConfig(min_cleanable_dirty_ratio=0.0, delete_retention_ms=100)
NOW = 10_000


def rows(log: PartitionLog, upto: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    offset = log.log_start_offset
    while offset < upto:
        data = log.read_uncommitted(offset, 70, end_offset=upto)
        if not data:
            break
        batch = frames.decode(data)
        out += batch.rows
        offset = batch.offsets[-1] + 1
    return out


class CopyMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="gapped-"))
        self.leader = PartitionLog(self.root / "leader", "t", 0, CONFIG)
        self.follower = PartitionLog(self.root / "follower", "t", 0, CONFIG)
        self.copied: list[tuple[int, bytes]] = []  # what the follower must hold

    def teardown(self) -> None:
        self.leader.close()
        self.follower.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(
        keys=st.lists(st.sampled_from([b"a", b"b", b"c", b"d", None]), min_size=1, max_size=6),
        tombstone=st.booleans(),
        ts=st.sampled_from([0, NOW]),
    )
    def write(self, keys: list[bytes | None], tombstone: bool, ts: int) -> None:
        values = [
            records.encode(None if tombstone and k else b"v", key=k, timestamp_ms=ts) for k in keys
        ]
        self.leader.append(values)
        self.leader.set_high_watermark(self.leader.log_end_offset)

    @rule()
    def compact(self) -> None:
        clean(self.leader, CLEANER, NOW)

    @precondition(lambda self: self.follower.log_end_offset < self.leader.log_end_offset)
    @rule(fetch_bytes=st.integers(min_value=1, max_value=300))
    def fetch(self, fetch_bytes: int) -> None:
        start, end = self.follower.log_end_offset, self.leader.log_end_offset
        data = self.leader.read_uncommitted(start, fetch_bytes, end_offset=end)
        reached = self.leader.reached(data, start, end)
        assert start < reached <= end, "a fetch answer always moves the follower on"
        self.follower.append_frames(data, end_offset=reached)
        self.copied += frames.decode(data).rows if data else []

    @rule(clean_close=st.booleans())
    def restart_follower(self, clean_close: bool) -> None:
        directory = self.follower.directory
        if clean_close:
            self.follower.close()
        else:
            self.follower.crash()
            as_after_a_crash(directory)
        self.follower = PartitionLog(directory, "t", 0, CONFIG)

    @invariant()
    def follower_holds_what_it_copied(self) -> None:
        assert rows(self.follower, self.follower.log_end_offset) == self.copied
        assert self.follower.integrity_issues() == []

    @invariant()
    def caught_up_means_the_same_records(self) -> None:
        end = self.leader.log_end_offset
        if self.follower.log_end_offset == end and self.copied:
            leader_rows = set(rows(self.leader, end))
            assert leader_rows <= set(self.copied), "no record the follower lacks"


TestCopy = CopyMachine.TestCase
TestCopy.settings = settings(max_examples=30, stateful_step_count=30, deadline=None)
