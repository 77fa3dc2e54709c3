"""Idempotent producers: the batch header control record and the per-partition table that
tells a first append from a retry. Pure logic (no I/O, no asyncio).

A producer has an id and an epoch (from `InitProducer`, see `docs/api.md`) and numbers its
records per partition: a batch carries the sequence of its first record, and the batch after
it starts at the next one. The leader writes each idempotent batch as a **header** control
record followed by the batch's records, in one write; the header says who wrote them.
Control records are skipped by readers, so the header costs one offset per batch.

Header value, byte by byte (big-endian), 36 bytes::

    0   u8    0x00   (a LeaderEpochMarker protobuf never starts with 0: field 0 is invalid)
    1   u8    0x01   record type: producer batch header
    2   u16   1      header version
    4   u64   producer_id
    12  u32   producer_epoch
    16  u64   base_sequence   sequence of the first record of the batch
    24  u32   record_count    records that follow the header: offsets o+1 .. o+record_count
    28  u64   timestamp_ms    the leader's wall clock when it appended the batch

The table is a function of the log: the leader updates it as it assigns offsets, a follower
as it appends what it fetched (`apply_frames`), and a replica that starts rebuilds it by
scanning its log for headers. So a new leader knows every producer's last batches without
any extra replication message. Per producer it keeps the last `batches_kept` batches (the
window within which a retry is answered with the batch's original offsets, like Kafka's
five in-flight batches) and the newest epoch seen; the number of producers per partition is
bounded (`producers_max`, least recently active evicted first: an evicted producer is
treated as new, its next batch accepted at any sequence).
"""

from __future__ import annotations

import enum
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from replog import frames

HEADER = struct.Struct(">BBHQIQIQ")
HEADER_BYTES = HEADER.size  # 36
HEADER_TYPE = 1
HEADER_VERSION = 1
PRODUCER_ID_MAX = 2**63 - 1
PRODUCER_EPOCH_MAX = 2**31 - 1
SEQUENCE_MAX = 2**63 - 1
BATCHES_KEPT = 5
PRODUCERS_MAX = 10_000


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """What a client's append says about its producer: id, epoch, first sequence."""

    producer_id: int
    producer_epoch: int
    base_sequence: int


@dataclass(frozen=True, slots=True)
class BatchHeader:
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    timestamp_ms: int

    def encode(self) -> bytes:
        return HEADER.pack(
            0,
            HEADER_TYPE,
            HEADER_VERSION,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.record_count,
            self.timestamp_ms,
        )

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + self.record_count - 1


def decode_header(value: bytes) -> BatchHeader | None:
    """The header in a control record's value; None for other control records (epoch
    markers) and for header versions this node does not know."""
    if len(value) < HEADER_BYTES or value[0] != 0 or value[1] != HEADER_TYPE:
        return None
    _, _, version, pid, epoch, seq, count, ts = HEADER.unpack_from(value)
    if version != HEADER_VERSION:
        return None
    return BatchHeader(pid, epoch, seq, count, ts)


def headers_in(buf: bytes | memoryview) -> list[tuple[int, BatchHeader]]:
    """(offset, header) of every producer batch header in a run of frames."""
    out = []
    for offset, value in frames.control_records(buf):
        header = decode_header(value)
        if header is not None:
            out.append((offset, header))
    return out


class Verdict(enum.Enum):
    APPEND = "append"  # a new batch: append it
    DUPLICATE = "duplicate"  # already in the log: answer with its offsets
    DUPLICATE_OLD = "duplicate_old"  # already in the log, offsets no longer known
    FENCED = "fenced"  # an older epoch than the newest seen
    OUT_OF_ORDER = "out_of_order"  # a gap (or a retry that does not match its first try)


@dataclass(frozen=True, slots=True)
class Check:
    verdict: Verdict
    base_offset: int = -1  # DUPLICATE: the batch's first and last record offsets
    last_offset: int = -1
    expected_sequence: int = -1  # OUT_OF_ORDER: the sequence the partition expects
    epoch: int = -1  # FENCED: the newest epoch seen


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """One producer of a table as a snapshot holds it: its newest epoch, newest batch's
    timestamp and last batches (header offset, epoch, first and last sequence), oldest
    first."""

    producer_id: int
    epoch: int
    timestamp_ms: int
    batches: tuple[tuple[int, int, int, int], ...]


@dataclass(frozen=True, slots=True)
class _Batch:
    header_offset: int
    epoch: int
    first_sequence: int
    last_sequence: int

    @property
    def base_offset(self) -> int:
        return self.header_offset + 1

    @property
    def last_offset(self) -> int:
        return self.header_offset + 1 + self.last_sequence - self.first_sequence


@dataclass(slots=True)
class _Producer:
    epoch: int
    batches: deque[_Batch] = field(default_factory=deque)
    timestamp_ms: int = 0


class ProducerTable:
    """Per partition: producer id -> its newest epoch and last batches (see module doc)."""

    def __init__(
        self, *, batches_kept: int = BATCHES_KEPT, producers_max: int = PRODUCERS_MAX
    ) -> None:
        assert batches_kept >= 1 and producers_max >= 1
        self.batches_kept = batches_kept
        self.producers_max = producers_max
        self._producers: dict[int, _Producer] = {}  # least recently active first
        # A header whose records have not all arrived yet (replicated or scanned frames).
        self._partial: tuple[int, BatchHeader] | None = None

    def __len__(self) -> int:
        return len(self._producers)

    def check(self, batch: ProducerBatch, record_count: int) -> Check:
        """What to do with `batch` of `record_count` records (changes nothing)."""
        p = self._producers.get(batch.producer_id)
        if p is None:
            return Check(Verdict.APPEND)  # new, or evicted/expired: any first sequence
        epoch, seq = batch.producer_epoch, batch.base_sequence
        if epoch < p.epoch:
            return Check(Verdict.FENCED, epoch=p.epoch)
        if epoch > p.epoch:
            if seq == 0:
                return Check(Verdict.APPEND)
            return Check(Verdict.OUT_OF_ORDER, expected_sequence=0)
        last_seq = seq + record_count - 1
        for b in p.batches:
            if b.epoch == epoch and b.first_sequence == seq:
                if b.last_sequence == last_seq:
                    return Check(Verdict.DUPLICATE, b.base_offset, b.last_offset)
                return Check(Verdict.OUT_OF_ORDER, expected_sequence=seq)
        newest = p.batches[-1] if p.batches else None
        if newest is None:  # its batches were truncated away: any sequence continues it
            return Check(Verdict.APPEND)
        if newest.epoch != epoch:  # the epoch's first batches were truncated away
            if seq == 0:
                return Check(Verdict.APPEND)
            return Check(Verdict.OUT_OF_ORDER, expected_sequence=0)
        expected = newest.last_sequence + 1
        if seq == expected:
            return Check(Verdict.APPEND)
        if seq < expected:
            return Check(Verdict.DUPLICATE_OLD)
        return Check(Verdict.OUT_OF_ORDER, expected_sequence=expected)

    def record(self, header_offset: int, header: BatchHeader) -> None:
        """The log now holds `header` at `header_offset` (and its records after it)."""
        pid = header.producer_id
        p = self._producers.pop(pid, None)
        if p is None:
            p = _Producer(header.producer_epoch)
            while len(self._producers) >= self.producers_max:
                del self._producers[next(iter(self._producers))]
        self._producers[pid] = p  # now the most recently active
        p.epoch = max(p.epoch, header.producer_epoch)
        p.timestamp_ms = max(p.timestamp_ms, header.timestamp_ms)
        p.batches.append(
            _Batch(header_offset, header.producer_epoch, header.base_sequence, header.last_sequence)
        )
        while len(p.batches) > self.batches_kept:
            p.batches.popleft()

    def record_all(self, headers: Iterable[tuple[int, BatchHeader]]) -> None:
        for offset, header in headers:
            self.record(offset, header)

    def apply_frames(self, buf: bytes | memoryview, end_offset: int) -> None:
        """Frames the log now holds, up to `end_offset` (exclusive), in order: each batch
        header is recorded once all its records are there. A batch is *torn* when another
        control record (an epoch marker) comes before its last record: a leader took over
        with part of it. A torn batch is never recorded, so no retry is answered with
        offsets that hold something else (its retry is appended again)."""
        for offset, value in frames.control_records(buf):
            self._settle_partial(offset)
            header = decode_header(value)
            if header is not None:
                self._partial = (offset, header)
        if (
            self._partial is not None
            and end_offset > self._partial[0] + self._partial[1].record_count
        ):
            self._settle_partial(end_offset)

    def _settle_partial(self, next_control_offset: int) -> None:
        partial = self._partial
        if partial is None:
            return
        self._partial = None
        header_offset, header = partial
        if next_control_offset > header_offset + header.record_count:  # whole
            self.record(header_offset, header)

    def drop_partial(self) -> None:
        """This replica's log goes on with records of its own (it leads now): a batch not
        whole by now stays torn."""
        self._partial = None

    def truncate(self, offset: int) -> None:
        """The log lost every record at or above `offset`: forget the batches there. A
        producer keeps its newest epoch (fencing holds) even when all its batches go. A batch
        cut in the middle is no longer whole: it goes too, and its header is the partial
        batch again, as a scan of the log would find it (torn by whatever comes next unless
        its records do)."""
        if self._partial is not None and self._partial[0] >= offset:
            self._partial = None
        for pid, p in self._producers.items():
            while p.batches and p.batches[-1].last_offset >= offset:
                b = p.batches.pop()
                if b.header_offset < offset:  # at most one: the log's last header
                    count = b.last_sequence - b.first_sequence + 1
                    header = BatchHeader(pid, b.epoch, b.first_sequence, count, p.timestamp_ms)
                    self._partial = (b.header_offset, header)

    def clear(self) -> None:
        self._producers.clear()
        self._partial = None

    def expire(self, now_ms: int, idle_ms: int) -> int:
        """Forget producers whose newest batch is older than `idle_ms`; returns how many."""
        old = [pid for pid, p in self._producers.items() if now_ms - p.timestamp_ms > idle_ms]
        for pid in old:
            del self._producers[pid]
        return len(old)

    def entries(self) -> list[ProducerEntry]:
        """Every producer, least recently active first (`producer_snapshot` encodes them)."""
        return [
            ProducerEntry(
                pid,
                p.epoch,
                p.timestamp_ms,
                tuple(
                    (b.header_offset, b.epoch, b.first_sequence, b.last_sequence) for b in p.batches
                ),
            )
            for pid, p in self._producers.items()
        ]

    @property
    def partial(self) -> tuple[int, BatchHeader] | None:
        """The header (and its offset) of a batch whose records have not all arrived."""
        return self._partial

    def restore(
        self, entries: Iterable[ProducerEntry], partial: tuple[int, BatchHeader] | None
    ) -> None:
        """Take the state `entries()` and `partial` described (a snapshot), replacing this
        table's; producers past `producers_max` (least recently active first) and batches
        past `batches_kept` (oldest first) are dropped as `record` would."""
        self.clear()
        for e in entries:
            while len(self._producers) >= self.producers_max:
                del self._producers[next(iter(self._producers))]
            batches = deque(_Batch(*b) for b in e.batches[-self.batches_kept :])
            self._producers.pop(e.producer_id, None)
            self._producers[e.producer_id] = _Producer(e.epoch, batches, e.timestamp_ms)
        self._partial = partial

    def state(self) -> dict[int, tuple[int, tuple[tuple[int, int, int, int], ...]]]:
        """A comparable picture of the table (tests): pid -> (epoch, batches)."""
        return {
            pid: (
                p.epoch,
                tuple(
                    (b.header_offset, b.epoch, b.first_sequence, b.last_sequence) for b in p.batches
                ),
            )
            for pid, p in self._producers.items()
        }
