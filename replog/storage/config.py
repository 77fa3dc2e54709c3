"""Storage-layer configuration: one frozen dataclass, validated on construction."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from replog.errors import InvalidConfigError, RecordTooLargeError
from replog.frames import HEADER_BYTES, LENGTH_MASK

KIB = 1024
MIB = 1024 * KIB
DAY_MS = 86_400_000
NO_TIMESTAMP = -(2**63)  # a record without a timestamp (the smallest i64)

# The timestamps of the frames of `buf` that start at `starts` (NO_TIMESTAMP where a frame
# has none): how a partition's records are dated for its time index (`time_index.py`).
TimestampReader = Callable[[bytes | memoryview, np.ndarray], np.ndarray]


class FlushPolicy(enum.StrEnum):
    """When appended bytes are fsynced ("flush"; never to be confused with "commit")."""

    ALWAYS = "always"  # fsync every write group before it counts as written
    INTERVAL = "interval"  # fsync in the background every `flush_interval_ms`
    NEVER = "never"  # page cache only; durability comes from replication


@dataclass(frozen=True, slots=True)
class StorageConfig:
    segment_bytes_max: int = 1 * MIB
    index_interval_bytes: int = 4 * KIB
    index_bytes_initial: int = 12 * KIB
    record_bytes_max: int = 1 * MIB  # value bytes of one record
    # a topic's max.message.bytes: the leader's limit on new records only (replicated and
    # stored frames keep record_bytes_max, so lowering it never stalls a follower)
    topic_record_bytes_max: int | None = None
    retention_bytes: int | None = None  # per partition; None keeps everything
    retention_ms: int | None = None
    flush: FlushPolicy = FlushPolicy.INTERVAL
    flush_interval_ms: int = 1000
    read_bytes_max: int = 4 * MIB  # upper bound on one read's byte budget
    checksum_chunk_bytes: int = 16 * KIB  # CRC32C block size of new segments' `.crc` sidecars
    # None: the records have no timestamps (no time index; time retention by file age)
    timestamps: TimestampReader | None = None
    # roll the active segment at the first append once it is this old (Kafka's segment.ms;
    # its age counts from its creation, or from the log's open for one found on disk)
    segment_ms: int = 7 * DAY_MS
    # cleanup.policy=compact: the node's log cleaner compacts the log (`cleaner.py`) with
    # these topic configs (Kafka's delete.retention.ms, min.cleanable.dirty.ratio,
    # min.compaction.lag.ms); appends of records without a key are refused
    compact: bool = False
    delete_retention_ms: int = DAY_MS
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0

    def __post_init__(self) -> None:
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise InvalidConfigError(f"invalid storage config: {what}")

        need(self.segment_bytes_max >= 2 * HEADER_BYTES, "segment_bytes_max must be >= 24")
        need(self.segment_bytes_max <= 2**32 - 1, "segment_bytes_max must fit in u32 positions")
        need(self.index_interval_bytes >= 1, "index_interval_bytes must be >= 1")
        need(self.index_bytes_initial >= 12, "index_bytes_initial must hold one entry")
        need(1 <= self.record_bytes_max <= LENGTH_MASK, "record_bytes_max must be in [1, 2^31)")
        need(
            self.topic_record_bytes_max is None or self.topic_record_bytes_max >= 1,
            "topic_record_bytes_max must be >= 1",
        )
        need(
            self.retention_bytes is None or self.retention_bytes >= 0,
            "retention_bytes must be >= 0",
        )
        need(self.retention_ms is None or self.retention_ms >= 0, "retention_ms must be >= 0")
        need(self.flush_interval_ms >= 1, "flush_interval_ms must be >= 1")
        need(self.read_bytes_max >= HEADER_BYTES, "read_bytes_max must be >= 12")
        need(isinstance(self.flush, FlushPolicy), "flush must be a FlushPolicy")
        need(1 <= self.checksum_chunk_bytes <= 2**31, "checksum_chunk_bytes must be in [1, 2^31]")
        need(self.segment_ms >= 1, "segment_ms must be >= 1")
        need(self.delete_retention_ms >= 0, "delete_retention_ms must be >= 0")
        need(0.0 <= self.min_cleanable_dirty_ratio <= 1.0, "dirty ratio must be in [0, 1]")
        need(self.min_compaction_lag_ms >= 0, "min_compaction_lag_ms must be >= 0")

    def check_record_bytes(self, record_bytes: int, *, new: bool = False) -> None:
        """RECORD_TOO_LARGE when one record's value of `record_bytes` exceeds
        `record_bytes_max`: the one check of that limit (the leader before its driver sees a
        batch, the log on every append and on every replicated frame). `new`: a record the
        leader is asked to append, also held to the topic's `topic_record_bytes_max`."""
        limit = self.record_bytes_max
        if new and self.topic_record_bytes_max is not None:
            limit = min(limit, self.topic_record_bytes_max)
        if record_bytes > limit:
            raise RecordTooLargeError(
                f"a record of {record_bytes} bytes exceeds record_bytes_max={limit}",
                record_bytes=record_bytes,
                record_bytes_max=limit,
            )
