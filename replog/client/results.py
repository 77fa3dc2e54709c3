"""What the client's calls return: plain, frozen values (no gRPC types).

Its own module so that `Client`, `AsyncClient`, `Consumer` and `Producer` share them without
importing each other (no import cycle inside `replog.client`).
"""

from __future__ import annotations

from dataclasses import dataclass

from replog import frames, records


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where an Append's records landed: offsets `base_offset`..`last_offset` (-1 with
    acks="none"), and the partition's high watermark when it was answered."""

    base_offset: int  # -1 with acks=none
    last_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One of a topic's configs (`Client.describe_configs`)."""

    value: str
    source: str  # "topic": the topic sets it; "default": the node's default


@dataclass(frozen=True, slots=True)
class FetchResult:
    """A Fetch's records (as columns) and the partition's bounds; `next_offset` is where
    the next Fetch starts."""

    # control records already removed; an envelope topic's records decoded
    records: frames.DecodedFrames | records.DecodedRecords
    high_watermark: int
    log_start_offset: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class RawFetch:
    frames: bytes  # raw frames as stored, control records included
    high_watermark: int
    log_start_offset: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """The leader's view of one replica."""

    replica_id: int
    log_end_offset: int
    lag_records: int
    last_fetch_ms_ago: int  # -1: not since this leader's election


@dataclass(frozen=True, slots=True)
class CorruptRange:
    """A range of one replica's log that failed its checksum and is not repaired yet (never
    served: reads touching it fail with `CorruptDataError`)."""

    replica_id: int
    segment: str  # the `.log` file name
    start_position: int  # byte range [start_position, end_position) in it
    end_position: int
    first_offset: int  # records that may be affected: [first_offset, end_offset)
    end_offset: int
    detail: str


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as `describe_topic` reports it: leader, replicas, offsets, size,
    replica lag, corrupt ranges and any reassignment in progress."""

    partition: int
    leader_id: int | None
    replicas: tuple[int, ...]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
    segment_count: int
    epoch: int = 0
    replica_status: tuple[ReplicaStatus, ...] = ()
    # the leader's and the asked node's (see admin.proto's PartitionDescription)
    corrupt_ranges: tuple[CorruptRange, ...] = ()
    # a reassignment in progress (ReassignPartition): its target (empty: none), the step the
    # leader is at and its last refusal; and the observers (new replicas not voters yet)
    target_replicas: tuple[int, ...] = ()
    reassignment_step: str = ""
    reassignment_error: str = ""
    observers: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Offsets:
    """One partition's offsets (`list_offsets`): log start, high watermark, log end, and
    with a timestamp the first offset at or after it."""

    partition: int
    earliest: int  # log start offset
    latest: int  # high watermark (exclusive)
    log_end_offset: int
    # With list_offsets(timestamp_ms=t): the first committed offset whose record timestamp
    # is >= t, else `latest`; and that record's timestamp (None when it is `latest`).
    offset_for_timestamp: int | None = None
    found_timestamp_ms: int | None = None
