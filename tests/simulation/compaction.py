"""Compacted topics in the simulator (`SimConfig.compaction`): every replica runs the log
cleaner on its own seeded schedule, and the replicas never disagree below the HW.

The simulator models a replica's storage (`Node.log`, one record per offset), so this
module models what the cleaner does to it, deciding with the cleaner's own pure rule
(`replog.storage.cleaner.map_keys` and `kept_offsets` on the real frames of the records):

* values are real envelopes (`replog.records.encode`): one of `keys` keys, a tombstone
  (null value) for a `tombstones` share of the appends, the append's simulated time as the
  timestamp (`EPOCH_MS` + ms) and a header that makes every value unique;
* segments: each node rolls a new segment every `roll_at` records (its own, seeded, so
  replicas' segments differ), and a follower's copy that ends in a gap rolls at its end
  (`SegmentLog.append`); the last segment is the active one, never cleaned;
* a pass (`clean`, at seeded random times per node, before and after the heal): the
  closed segments ending at or below min(HW, flushed offset), up to the first one holding
  a record newer than `min_compaction_lag_ms`; it runs when the real `dirty_ratio` of the
  segments after `cleaned_end` reaches `dirty_ratio`; the offset map covers the dirty
  segments up to `offset_map_keys_max` keys; then each segment below the map's end,
  oldest first, is one swap (an event of its own: other events, crashes included, run in
  between; a share of the swaps crash the node just before or just after their commit
  point), and the pass ends by moving `cleaned_end`. Dropped offsets are gaps
  (`NodeCleaning.gone`): a stand-in record stays in `Node.log` (the checker's hash chains
  go on), but reads skip it. Swapped segments and `cleaned_end` are durable;
* reads (`reach`, `past_gap`): a fetch answer carries up to `fetch_records_max` records
  present, and ends past a gap that reaches the answer's end (`PartitionLog.reached`); the
  follower takes the frames with `frames.scan_ascending` (offsets ascending inside the
  range, gaps allowed) and a gap becomes a stand-in on its log (`append_frames`).

Checks (on top of checker.py's, which still see every offset through the stand-ins):

* a pass drops no control record, and a keyed record only when a newer record of its key
  is below the map's end, or it is a tombstone older than `delete_retention_ms`; a
  tombstone it drops leaves no older record of its key on that replica;
* a gap in a fetch answer lies below the committed end and is a record any cleaner may
  drop by the same rule;
* views (after every pass and at the end, per replica, below its HW): for every key whose
  latest committed record (the ledger: the checker's uncompacted committed log, which
  holds every acknowledged record) lies there, the replica's latest record of that key is
  that one; or, for a tombstone, nothing (it expired), or an older value whose tombstone
  reached this replica as a gap (`resurrections`, see below);
* at the end, after the usual convergence: every replica holds the same records wherever
  two of them both hold one, and the views above hold on all of them.

A **resurrection** is Kafka's documented limit of `delete.retention.ms`: a replica that
copied a key's old value, then fell behind for longer than `delete_retention_ms`, copies
the range where its leader already dropped both the later tombstone (expired) and, being
superseded, nothing else of it: the old value stays on that replica. The checks allow it
only in exactly that shape (an older value, and the tombstone's offset a gap this replica
received, after the tombstone was `delete_retention_ms` old) and count it in the outcome;
the schedules with a `delete_retention_ms` longer than any lag must have none.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from replog import frames, records
from replog.replication import Records
from replog.storage.cleaner import dirty_ratio, kept_offsets, map_keys
from tests.simulation.checker import SimRecord, check

if TYPE_CHECKING:
    from tests.simulation.sim import Node, Simulation

EPOCH_MS = 1_700_000_000_000  # envelope timestamps: this plus the simulated ms
SWAP_DELAY_MS_MAX = 20  # between a pass's swaps (other events run in between)
SWAP_CRASH = 0.05  # share of swaps during the chaos that crash their node (before/after)


@dataclass(frozen=True)
class CompactionConfig:
    keys: int = 8
    tombstones: float = 0.1  # share of appends that are tombstones
    clean_interval_ms: int = 150  # each node's passes, +-50%
    delete_retention_ms: int = 1000
    min_compaction_lag_ms: int = 0
    dirty_ratio: float = 0.0
    offset_map_keys_max: int = 1_000_000
    segment_records_max: int = 8  # each node rolls every 2..this many records

    @staticmethod
    def random(seed: int, shape: str) -> CompactionConfig:
        rng = random.Random(f"compaction-{seed}-{shape}")
        return CompactionConfig(
            keys=rng.choice([2, 5, 12, 40]),
            tombstones=rng.choice([0.0, 0.1, 0.3]),
            clean_interval_ms=rng.choice([20, 100, 500]),
            delete_retention_ms=rng.choice([0, 100, 1000, 10**7]),
            min_compaction_lag_ms=rng.choice([0, 0, 200]),
            dirty_ratio=rng.choice([0.0, 0.0, 0.3, 0.6]),
            offset_map_keys_max=rng.choice([1, 3, 1_000_000]),
            segment_records_max=rng.choice([2, 6, 20]),
        )


@dataclass(frozen=True)
class Meta:
    """A committed record's key, whether it is a tombstone, and its timestamp (ms)."""

    key: bytes | None
    tombstone: bool
    timestamp_ms: int


@dataclass
class NodeCleaning:
    """One node's cleaner files and segments (durable), and its pass in flight."""

    roll_at: int
    bases: list[int] = field(default_factory=lambda: [0])  # ascending; last: active
    gone: set[int] = field(default_factory=set)  # offsets the cleaner (or a leader) dropped
    cleaned_end: int = 0
    gaps_received: dict[int, int] = field(default_factory=dict)  # offset -> sim ms
    token: int = 0  # bumped by what ends a pass in flight (crash, reset)
    running: bool = False


@dataclass(frozen=True, slots=True)
class _Swap:
    node: int
    token: int
    latest: dict[bytes, int]
    map_end: int
    horizon_ms: int
    segments: tuple[tuple[int, int], ...]


@dataclass
class CompactionStats:
    passes: int = 0  # passes that ran (were due)
    passes_done: int = 0
    passes_cut: int = 0  # by a crash, a reset or retention
    swaps: int = 0  # segments rewritten
    dropped: int = 0
    tombstones_dropped: int = 0
    gaps_received: int = 0
    swap_crashes: int = 0
    resurrections: int = 0


class Compaction:
    def __init__(self, sim: Simulation, config: CompactionConfig) -> None:
        self.sim = sim
        self.config = config
        self.stats = CompactionStats()
        self.nodes: dict[int, NodeCleaning] = {}
        for node_id in sim.ids:
            rng = random.Random(f"segments-{sim.config.seed}-{node_id}")
            self.nodes[node_id] = NodeCleaning(rng.randint(2, max(2, config.segment_records_max)))
        self.rng = random.Random(f"cleaner-{sim.config.seed}-{sim.config.shape}")
        self.meta: list[Meta] = []  # per committed offset (grows with checker.committed)
        self.latest: dict[bytes, int] = {}  # key -> offset of its latest committed record
        self.script: list[tuple[int, bool]] = []  # scenarios: the next values' (key, tombstone)

    def schedule(self) -> None:
        for node_id in self.sim.ids:
            self.sim._schedule(self._interval(), "clean", node_id)

    def _interval(self) -> int:
        interval = self.config.clean_interval_ms
        return self.rng.randint(interval // 2, interval * 3 // 2)

    def now_ms(self) -> int:
        return EPOCH_MS + self.sim.now

    # -- values ----------------------------------------------------------------------------

    def value(self, number: int) -> bytes:
        """The envelope of the client's `number`th value: keyed, a tombstone now and then."""
        rng, cfg = self.sim.rng, self.config
        if self.script:
            number_of_key, tombstone = self.script.pop(0)
        else:
            number_of_key, tombstone = rng.randrange(cfg.keys), rng.random() < cfg.tombstones
        key = f"k{number_of_key}".encode()
        tag = f"s{self.sim.config.seed}-v{number}".encode()
        return records.encode(
            None if tombstone else tag, key=key, headers=[("id", tag)], timestamp_ms=self.now_ms()
        )

    def _meta(self, offset: int) -> Meta:
        """The committed record at `offset` (the ledger grows lazily)."""
        committed = self.sim.checker.committed
        check(offset < len(committed), f"offset {offset} is not committed (a cleaner read it)")
        while len(self.meta) < len(committed):
            at = len(self.meta)
            rec = committed[at]
            meta = Meta(None, False, 0)
            if not rec.control:
                decoded = records.decode(rec.value)
                meta = Meta(decoded.key, decoded.value is None, decoded.timestamp_ms)
                if decoded.key is not None:
                    self.latest[decoded.key] = at
            self.meta.append(meta)
        return self.meta[offset]

    def _superseded(self, offset: int, below: int) -> bool:
        """Whether a newer committed record of the same key lies in (`offset`, `below`)."""
        key = self._meta(offset).key
        committed = len(self.sim.checker.committed)
        self._meta(committed - 1)
        return any(self.meta[o].key == key for o in range(offset + 1, min(below, committed)))

    # -- segments, as the node's log changes ---------------------------------------------------

    def appended(self, node_id: int, offset: int) -> None:
        st = self.nodes[node_id]
        if offset - st.bases[-1] >= st.roll_at:
            st.bases.append(offset)

    def truncated(self, node_id: int, offset: int) -> None:
        st = self.nodes[node_id]
        check(not any(o >= offset for o in st.gone), f"node {node_id}: truncated a cleaned gap")
        st.bases = [b for b in st.bases if b < offset] or [offset]
        if any(o >= st.bases[-1] for o in st.gone):  # never a sparse segment last
            st.bases.append(offset)

    def reset(self, node_id: int, offset: int) -> None:
        st = self.nodes[node_id]
        st.bases, st.gone, st.token, st.running = [offset], set(), st.token + 1, False
        st.gaps_received.clear()
        st.cleaned_end = min(st.cleaned_end, offset)

    def retention(self, node_id: int, start: int) -> None:
        st = self.nodes[node_id]
        st.bases = [start] + [b for b in st.bases if b > start]
        st.gone = {o for o in st.gone if o >= start}

    def crashed(self, node: Node) -> None:
        st = self.nodes[node.id]
        st.token, st.running = st.token + 1, False
        end = len(node.log)  # (a power loss lost the unflushed tail)
        st.bases = [b for b in st.bases if b <= end] or [end]
        st.gone = {o for o in st.gone if o < end}

    # -- reads and a follower's copy -------------------------------------------------------

    def gone(self, node_id: int) -> set[int]:
        return self.nodes[node_id].gone

    def reach(self, node: Node, start: int, end: int, count: int) -> int:
        """Where a read of up to `count` records present from `start` (below `end`) ends:
        past its last record (`start` when there is none)."""
        gone = self.nodes[node.id].gone
        reached = start
        for offset in range(start, end):
            if offset not in gone:
                reached = offset + 1
                count -= 1
                if count == 0:
                    break
        return reached

    def past_gap(self, node: Node, end: int, available_end: int) -> int:
        """`PartitionLog.reached`: an answer ending at `end` ends at `available_end` when the
        node holds nothing in between."""
        gone = self.nodes[node.id].gone
        if all(o in gone for o in range(end, available_end)):
            return available_end
        return end

    def append_frames(self, node: Node, got: Records) -> None:
        """A follower's `append_frames(raw, end_offset=end)`: frames ascending inside the
        range, gaps allowed; each gap a stand-in (the committed record) the node lacks."""
        sim, st = self.sim, self.nodes[node.id]
        start, end = got.start_offset, got.end_offset
        check(start == len(node.log), f"node {node.id}: frames not at LEO")
        try:
            frames.scan_ascending(got.frames, start, end)
        except frames.FrameError as exc:
            check(False, f"node {node.id}: frames not inside [{start}, {end}): {exc}")
        decoded = frames.decode(got.frames)
        controls = decoded.control or [False] * len(decoded)
        pairs = zip(decoded.values, controls, strict=True)
        present = dict(zip(decoded.offsets, pairs, strict=True))
        for offset in range(start, end):
            if offset in present:
                value, control = present[offset]
                sim._append(node, value, control=control, assigned_here=False)
                continue
            self._check_gap(node, offset)
            sim._append(node, b"", control=False, assigned_here=False,
                        standin=sim.checker.committed[offset])  # fmt: skip
            st.gone.add(offset)
            st.gaps_received[offset] = sim.now
            self.stats.gaps_received += 1
        if end - 1 in st.gone and st.bases[-1] < end:
            st.bases.append(end)  # a copy ending in a gap rolls at its end

    def _check_gap(self, node: Node, offset: int) -> None:
        committed = self.sim.checker.committed
        check(offset < len(committed), f"node {node.id}: a gap at {offset}, not committed")
        meta = self._meta(offset)
        check(
            not committed[offset].control and meta.key is not None,
            f"node {node.id}: a gap at {offset} over a control record or an unkeyed one",
        )
        expired = (
            meta.tombstone and meta.timestamp_ms < self.now_ms() - self.config.delete_retention_ms
        )
        check(
            expired or self._superseded(offset, len(committed)),
            f"node {node.id}: a gap at {offset}, whose record no cleaner may drop",
        )
        if meta.tombstone and not self._superseded(offset, len(committed)):
            older = self._held_older(node, meta.key, offset)
            if older is not None:  # Kafka's limit of delete.retention.ms (module doc)
                self.stats.resurrections += 1

    def _held_older(self, node: Node, key: bytes | None, offset: int) -> int | None:
        gone = self.nodes[node.id].gone
        for o in range(offset - 1, node.log_start - 1, -1):
            if o not in gone and o < len(self.meta) and self.meta[o].key == key:
                return o
        return None

    # -- the cleaner -------------------------------------------------------------------------

    def read(self, node: Node, base: int, end: int) -> bytes | None:
        """The frames of the records present in `[base, end)`; None when the checksums
        refuse a damaged one (the pass ends; the node repairs itself, as for a fetch)."""
        if any(base <= o < end for o in node.corrupt):
            self.sim._schedule(1, "repair", node.id)
            return None
        gone = self.nodes[node.id].gone
        return b"".join(
            frames.encode(o, [node.log[o].value], control=node.log[o].control)
            for o in range(base, end)
            if o not in gone
        )

    def handle(self, kind: str, payload: object) -> None:
        if kind == "clean":
            assert isinstance(payload, int)
            self.clean(payload)
            self.sim._schedule(self._interval(), "clean", payload)
        else:
            assert isinstance(payload, _Swap)
            self.swap(payload)

    def _segments(self, node: Node) -> list[tuple[int, int, int]]:
        """`cleanable_segments`: (base, end, bytes) of the closed segments ending at or below
        min(HW, flushed), up to the first one with a record newer than the lag allows."""
        st, cfg = self.nodes[node.id], self.config
        limit = min(node.hw, node.flushed)
        newest_ms_max = self.now_ms() - cfg.min_compaction_lag_ms
        out = []
        for base, end in itertools.pairwise(st.bases):
            if end > limit:
                break
            present = [o for o in range(max(base, node.log_start), end) if o not in st.gone]
            newest = max((self._meta(o).timestamp_ms for o in present), default=0)
            if cfg.min_compaction_lag_ms and newest > newest_ms_max:
                break
            size = sum(frames.HEADER_BYTES + len(node.log[o].value) for o in present)
            out.append((base, end, size))
        return out

    def clean(self, node_id: int) -> None:
        """Start a pass on node `node_id` (module doc): the map now, the swaps later."""
        sim, cfg = self.sim, self.config
        node, st = sim.nodes[node_id], self.nodes[node_id]
        if node.replica is None or st.running or node.paused_until > sim.now:
            return
        segments = self._segments(node)
        dirty = [s for s in segments if s[1] > st.cleaned_end]
        if not dirty or dirty_ratio(segments, st.cleaned_end) < cfg.dirty_ratio:
            return
        latest: dict[bytes, int] = {}
        map_end = dirty[0][0]
        for base, end, _ in dirty:
            data = self.read(node, base, end)
            if data is None:
                return
            map_keys(data, latest)
            map_end = end
            if len(latest) >= cfg.offset_map_keys_max:
                break
        self.stats.passes += 1
        st.running = True
        horizon_ms = self.now_ms() - cfg.delete_retention_ms
        plan = tuple((b, e) for b, e, _ in segments if b < map_end)
        swap = _Swap(node_id, st.token, latest, map_end, horizon_ms, plan)
        sim._schedule(self.rng.randint(0, SWAP_DELAY_MS_MAX), "swap", swap)

    def swap(self, swap: _Swap) -> None:
        """The next segment of a pass: its cleaned copy swapped in (if it drops anything)."""
        sim = self.sim
        node, st = sim.nodes[swap.node], self.nodes[swap.node]
        if st.token != swap.token:  # (a crash or a reset ended it)
            self.stats.passes_cut += 1
            return
        if node.paused_until > sim.now:  # a paused process: later
            sim._schedule(node.paused_until - sim.now, "swap", swap)
            return
        (base, end), rest = swap.segments[0], swap.segments[1:]
        if base < node.log_start:  # retention deleted it: the pass ends (OffsetOutOfRange)
            st.running = False
            self.stats.passes_cut += 1
            return
        crash = sim.chaos and self.rng.random() < SWAP_CRASH
        if crash and self.rng.random() < 0.5:  # before the commit point: the old segment
            self._crash(node.id)
            return
        data = self.read(node, base, end)
        if data is None:  # a corrupt range: the pass ends (`cleaner.failed`)
            st.running = False
            self.stats.passes_cut += 1
            return
        kept = set(kept_offsets(data, swap.latest, swap.horizon_ms))
        dropped = [o for o in range(base, end) if o not in st.gone and o not in kept]
        st.gone.update(dropped)
        for offset in dropped:
            self._check_drop(node, offset, swap)
        if dropped:
            self.stats.swaps += 1
            self.stats.dropped += len(dropped)
        if crash:  # after the commit point: the new segment
            self._crash(node.id)
            return
        if rest:
            again = _Swap(swap.node, swap.token, swap.latest, swap.map_end, swap.horizon_ms, rest)
            sim._schedule(self.rng.randint(0, SWAP_DELAY_MS_MAX), "swap", again)
            return
        st.running = False
        st.cleaned_end = swap.map_end
        self.stats.passes_done += 1
        for other in sim.nodes.values():
            if other.replica is not None:
                self.check_views(other)

    def _crash(self, node_id: int) -> None:
        self.stats.swap_crashes += 1
        self.nodes[node_id].running = False
        self.sim.crash(node_id)
        self.sim._schedule(self.rng.randint(20, 400), "restart", node_id)

    def _check_drop(self, node: Node, offset: int, swap: _Swap) -> None:
        rec = node.log[offset]
        meta = self._meta(offset)
        check(not rec.control, f"node {node.id}: the cleaner dropped control record {offset}")
        check(meta.key is not None, f"node {node.id}: the cleaner dropped unkeyed {offset}")
        if self._superseded(offset, swap.map_end):
            return
        check(
            meta.tombstone and meta.timestamp_ms < swap.horizon_ms,
            f"node {node.id}: the cleaner dropped {offset}, its key's latest below "
            f"{swap.map_end} (tombstone {meta.tombstone})",
        )
        self.stats.tombstones_dropped += 1
        older = self._held_older(node, meta.key, offset)
        check(older is None, f"node {node.id}: dropped tombstone {offset}, holds {older}")

    # -- views -------------------------------------------------------------------------------

    def check_views(self, node: Node) -> None:
        """Below the node's HW: each key's latest committed record is its latest there (or,
        for a tombstone, expired or a resurrection: module doc)."""
        committed = self.sim.checker.committed
        if not committed:
            return
        self._meta(len(committed) - 1)
        gone, hw = self.nodes[node.id].gone, node.hw
        held: dict[bytes, int] = {}
        for offset in range(node.log_start, hw):
            key = self.meta[offset].key
            if key is not None and offset not in gone:
                held[key] = offset
        for key, latest in self.latest.items():
            if not node.log_start <= latest < hw or held.get(key) == latest:
                continue
            meta, at = self.meta[latest], held.get(key)
            check(
                meta.tombstone,
                f"node {node.id}: key {key!r}'s latest value (at {latest}) is not its latest "
                f"below HW {hw} (it holds {at})",
            )
            check(
                at is None or (at < latest and latest in self.nodes[node.id].gaps_received),
                f"node {node.id}: key {key!r} tombstoned at {latest}, holds {at}",
            )

    def check_final(self) -> None:
        """After convergence: replicas hold the same record wherever two hold one; views."""
        sim = self.sim
        up = [n for n in sim.nodes.values() if n.replica is not None]
        for node in up:
            self.check_views(node)
            gone = self.nodes[node.id].gone
            for offset in range(node.log_start, node.hw):
                if offset not in gone:
                    rec: SimRecord = node.log[offset]
                    check(
                        rec.value == sim.checker.committed[offset].value,
                        f"node {node.id} holds another record at {offset}",
                    )
        acked = sim.checker.acked_all
        for offset, value in acked.items():
            meta = self._meta(offset)
            if meta.key is None or self.latest[meta.key] != offset or meta.tombstone:
                continue
            for node in up:
                if node.log_start <= offset < node.hw:
                    check(
                        offset not in self.nodes[node.id].gone and node.log[offset].value == value,
                        f"node {node.id} lost acknowledged latest value at {offset}",
                    )
