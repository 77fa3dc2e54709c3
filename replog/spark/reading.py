"""What the batch and the stream reader share: finding partitions, planning tasks, reading one.

Where code runs: `partition_bounds` and `plan` run on the driver (in Spark's planner worker or
the stream reader's process); `read_partition` runs in executor processes with a freshly
unpickled `ReplogPartition` (plain fields only) and opens its gRPC channel lazily, once per
process and bootstrap address (`replog.spark.clients`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from replog.client import Client
from replog.errors import InvalidArgumentError, OffsetOutOfRangeError
from replog.spark import offsets as off
from replog.spark.arrow import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    RAW,
    RecordFormat,
    frames_to_record_batch,
)
from replog.spark.clients import ATTEMPT_TIMEOUT_MS, NO_TLS, TlsOptions, client_for
from replog.spark.options import SourceOptions, Subscription

log = logging.getLogger("replog.spark")


def client_of(opts: SourceOptions) -> Client:
    return client_for(opts.bootstrap, opts.tls, opts.attempt_timeout_ms)


def _topics(client: Client, sub: Subscription) -> dict[str, list[int] | None]:
    """The topics a subscription reads now, each with its assigned partitions (None: all)."""
    if sub.option == "subscribe":
        return dict.fromkeys(sub.topics)
    existing = client.list_topics()
    if sub.option == "subscribePattern":
        return {t: None for t in sorted(existing) if sub.matches(t)}
    wanted: dict[str, list[int] | None] = {}
    for topic, partition in sub.assigned:
        if topic not in existing:
            raise InvalidArgumentError(f"option assign: topic {topic!r} does not exist")
        if partition >= existing[topic]:
            raise InvalidArgumentError(
                f"option assign: topic {topic!r} has {existing[topic]} partitions, "
                f"no partition {partition}"
            )
        parts = wanted.setdefault(topic, [])
        assert parts is not None
        parts.append(partition)
    return wanted


def partition_bounds(
    client: Client, topics: Mapping[str, Iterable[int] | None]
) -> dict[off.TopicPartition, off.Bounds]:
    """Log start and HW of the given partitions (None: every partition of the topic)."""
    out: dict[off.TopicPartition, off.Bounds] = {}
    for topic, partitions in topics.items():
        for o in client.list_offsets(topic, list(partitions or ())):
            out[(topic, o.partition)] = off.Bounds(o.earliest, o.latest)
    return dict(sorted(out.items()))


def subscribed_bounds(opts: SourceOptions) -> dict[off.TopicPartition, off.Bounds]:
    """Log start and HW of every partition the query reads now."""
    client = client_of(opts)
    return partition_bounds(client, _topics(client, opts.subscription))


def offsets_for_times(
    opts: SourceOptions, option: str, wanted: Mapping[off.TopicPartition, int]
) -> dict[off.TopicPartition, int | None]:
    """The earliest committed offset whose record timestamp is >= the asked one, per
    partition; None where no record is that recent (`offsets.resolve` applies Kafka's rules
    to that). One `ListOffsets` by time per topic and timestamp. Record timestamps: on
    envelope topics each record's; on raw topics the leader's append time of idempotent
    batches (docs/api.md, ListOffsets by time)."""
    client = client_of(opts)
    by_topic: dict[tuple[str, int], list[int]] = {}
    for (topic, partition), timestamp_ms in wanted.items():
        by_topic.setdefault((topic, timestamp_ms), []).append(partition)
    found: dict[off.TopicPartition, int | None] = {}
    for (topic, timestamp_ms), partitions in sorted(by_topic.items()):
        for o in client.list_offsets(topic, sorted(partitions), timestamp_ms=timestamp_ms):
            hit = o.found_timestamp_ms is not None
            found[(topic, o.partition)] = o.offset_for_timestamp if hit else None
    return found


class ReplogPartition(InputPartition):
    """One task: records `[start, end)` of one partition. Plain fields: picklable."""

    def __init__(
        self,
        bootstrap: str,
        rng: off.OffsetRange,
        fetch_bytes_max: int,
        tls: TlsOptions = NO_TLS,
        *,
        fail_on_data_loss: bool = True,
        include_headers: bool = False,
        fmt: RecordFormat = RAW,
        attempt_timeout_ms: int = ATTEMPT_TIMEOUT_MS,
    ) -> None:
        super().__init__(None)
        self.attempt_timeout_ms = attempt_timeout_ms
        self.bootstrap = bootstrap
        self.tls = tls
        self.topic = rng.topic
        self.partition = rng.partition
        self.start = rng.start
        self.end = rng.end
        self.fetch_bytes_max = fetch_bytes_max
        self.fail_on_data_loss = fail_on_data_loss
        self.include_headers = include_headers
        self.fmt = fmt


def record_format(client: Client, topic: str) -> RecordFormat:
    """How `topic` stores its records (from metadata): raw values, or envelopes."""
    fmt, timestamp_type = client.topic_config(topic)
    return RecordFormat(
        envelope=fmt == "envelope",
        timestamp_type=LOG_APPEND_TIME if timestamp_type == "log_append_time" else CREATE_TIME,
    )


def plan(
    opts: SourceOptions,
    begin: Mapping[off.TopicPartition, int],
    end: Mapping[off.TopicPartition, int],
) -> list[ReplogPartition]:
    """Tasks for `[begin, end)` of each partition in `end`, split per `maxRecordsPerPartition`
    and `minPartitions`. Each task knows its topic's record format (asked now, so a topic
    created again with another format is read as it is)."""
    ranges = [off.OffsetRange(t, p, begin.get((t, p), e), e) for (t, p), e in sorted(end.items())]
    tasks = off.split(ranges, opts.records_per_task_max, opts.min_partitions)
    client = client_of(opts)
    formats = {t: record_format(client, t) for t in sorted({r.topic for r in tasks})}
    return [
        ReplogPartition(
            opts.bootstrap,
            r,
            opts.fetch_bytes_max,
            opts.tls,
            fail_on_data_loss=opts.fail_on_data_loss,
            include_headers=opts.include_headers,
            fmt=formats[r.topic],
            attempt_timeout_ms=opts.attempt_timeout_ms,
        )
        for r in tasks
    ]


def read_partition(part: InputPartition) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches of the committed records in `[start, end)` (executor side).

    Reads through `StreamFrom` (the server reads the next batch while this one is decoded:
    about twice the rows per second of one `Fetch` after another) and cancels the stream at
    `end`. The range was planned below the HW, so every record in it is committed; right
    after a failover the new leader's HW may briefly trail it, and the stream then waits.

    Retention may delete the start of the range before the task reads it: with
    failOnDataLoss=false the task continues from the log start (and logs a warning), with
    true it fails, naming the option.
    """
    if not isinstance(part, ReplogPartition) or part.start >= part.end:
        return  # Spark runs one placeholder task when `partitions()` planned none
    tp = (part.topic, part.partition)
    position = part.start
    while position < part.end:
        try:
            for batch, reached in _stream(part, position):
                yield batch
                position = reached
            return
        except OffsetOutOfRangeError as exc:
            log_start = exc.log_start_offset
            if log_start is None or position >= log_start:
                raise
            if part.fail_on_data_loss:
                raise OffsetOutOfRangeError(
                    off.data_lost(tp, position, log_start)
                    + ": failOnDataLoss=true (the default) stops here; set "
                    "failOnDataLoss=false to continue from the log start",
                    offset=position,
                    log_start_offset=log_start,
                ) from None
            log.warning(
                "%s; failOnDataLoss=false: continuing from offset %d",
                off.data_lost(tp, position, log_start),
                log_start,
            )
            position = log_start


def _stream(part: ReplogPartition, start: int) -> Iterator[tuple[pa.RecordBatch, int]]:
    """(batch, next offset to read) from `start` up to the partition's `end`."""
    client = client_for(part.bootstrap, part.tls, part.attempt_timeout_ms)
    stream = client.stream(part.topic, part.partition, start, max_bytes=part.fetch_bytes_max)
    try:
        for reply in stream:
            if not reply.frames:
                continue
            batch = frames_to_record_batch(
                reply.frames, part.topic, part.partition, part.include_headers, part.fmt
            )
            if reply.next_offset > part.end:
                offsets = batch.column("offset").to_numpy()
                batch = batch.slice(0, int(np.searchsorted(offsets, part.end)))
            if batch.num_rows:
                yield batch, min(reply.next_offset, part.end)
            if reply.next_offset >= part.end:
                return
    finally:
        stream.close()
