"""The `replog` stream reader: micro-batches of committed records, offsets in Spark's checkpoint.

Kafka's source semantics:

* A query starts at `startingOffsets` (default `latest`), or by time (see `offsets`);
  partitions (and, with `subscribePattern`, topics) that appear later start at their earliest
  offset.
* Admission control per trigger (`offsets.admit`): `maxOffsetsPerTrigger` caps the records of
  a micro-batch, shared by lag; `minOffsetsPerTrigger` skips triggers until that many records
  are waiting, or until `maxTriggerDelay` (default 15m) passed since the last batch.
  `Trigger.AvailableNow` reads what is committed when the query starts and then stops (in
  batches of `maxOffsetsPerTrigger`; `minOffsetsPerTrigger` does not hold it back).
* `commitToGroup=<group>` (off by default): after each micro-batch, its end offsets are
  committed to that consumer group (metadata `spark query`), so `replog group describe`
  shows the query's position and lag. Spark's checkpoint stays the truth the query resumes
  from; a commit that fails (the group has members: GROUP_NOT_EMPTY, a coordinator away) is
  logged as a warning and the query goes on.
* A checkpoint whose offsets retention has since deleted: with `failOnDataLoss=true` (the
  default) the query fails, naming the option; with `false` it continues from the log start
  and logs a warning.

The reader lives in one long-lived process per query (its `minOffsetsPerTrigger` clock too).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from replog.errors import ReplogError
from replog.spark import offsets as off
from replog.spark.clients import close_client
from replog.spark.options import SourceOptions
from replog.spark.reading import (
    ReplogPartition,
    client_of,
    offsets_for_times,
    partition_bounds,
    plan,
    read_partition,
    subscribed_bounds,
)

log = logging.getLogger("replog.spark")

StreamOffset = dict[str, dict[str, int]]
GROUP_COMMIT_METADATA = "spark query"


class ReplogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._target: dict[off.TopicPartition, int] | None = None  # Trigger.AvailableNow
        self._last_trigger_ms = 0  # minOffsetsPerTrigger: when the last batch was let through

    def initialOffset(self) -> StreamOffset:
        opts = self.options
        start = off.resolve(
            off.LATEST if opts.starting is None else opts.starting,
            subscribed_bounds(opts),
            fail_on_data_loss=opts.fail_on_data_loss,
            times=lambda option, wanted: offsets_for_times(opts, option, wanted),
        )
        return off.to_stream_offset(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        opts = self.options
        if opts.max_offsets_per_trigger:
            return ReadMaxRows(opts.max_offsets_per_trigger)
        if opts.min_offsets_per_trigger:
            return ReadMinRows(opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {tp: b.high_watermark for tp, b in subscribed_bounds(self.options).items()}

    def _begin_and_latest(
        self, start: StreamOffset
    ) -> tuple[dict[off.TopicPartition, int], dict[off.TopicPartition, int]]:
        begin = off.from_stream_offset(start)
        bounds = subscribed_bounds(self.options)
        latest = {tp: b.high_watermark for tp, b in bounds.items()}
        for tp, b in bounds.items():
            # A new partition starts at its earliest offset; an offset retention deleted counts
            # from the log start (`partitions` decides whether that is data loss).
            begin[tp] = max(begin.get(tp, b.log_start_offset), b.log_start_offset)
        if self._target is not None:
            latest = {tp: min(latest[tp], self._target.get(tp, begin[tp])) for tp in latest}
        return begin, {tp: max(latest[tp], begin[tp]) for tp in latest}

    def latestOffset(self, start: StreamOffset, limit: ReadLimit) -> StreamOffset:
        begin, latest = self._begin_and_latest(start)
        if isinstance(limit, ReadAllAvailable):
            return off.to_stream_offset(latest)
        opts = self.options
        rows_min = opts.min_offsets_per_trigger
        if isinstance(limit, ReadMinRows):
            rows_min = limit.min_rows
        if self._target is not None:
            rows_min = None  # AvailableNow must reach its target, never wait for more
        end, self._last_trigger_ms = off.admit(
            begin,
            latest,
            rows_min=rows_min,
            rows_max=limit.max_rows if isinstance(limit, ReadMaxRows) else None,
            delay_ms_max=opts.trigger_delay_ms_max,
            now_ms=int(time.time() * 1000),
            last_trigger_ms=self._last_trigger_ms,
        )
        return off.to_stream_offset(end)

    def reportLatestOffset(self) -> StreamOffset:
        bounds = subscribed_bounds(self.options)
        return off.to_stream_offset({tp: b.high_watermark for tp, b in bounds.items()})

    def partitions(self, start: StreamOffset, end: StreamOffset) -> list[ReplogPartition]:
        opts = self.options
        begin = off.from_stream_offset(start)
        finish = off.from_stream_offset(end)
        topics: dict[str, None] = {t: None for t, _ in finish}
        bounds = partition_bounds(client_of(opts), topics)
        for tp, e in finish.items():
            b = bounds.get(tp)
            first = begin.get(tp, b.log_start_offset if b is not None else e)
            if b is not None and first < b.log_start_offset:
                # The checkpoint asks for offsets retention deleted since.
                first = off.clamp(first, tp, b, fail_on_data_loss=opts.fail_on_data_loss)
                log.warning(
                    "%s; failOnDataLoss=false: continuing from offset %d",
                    off.data_lost(tp, begin[tp], b.log_start_offset),
                    first,
                )
            begin[tp] = min(first, e)
        return plan(opts, begin, finish)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: StreamOffset) -> None:
        """Spark's checkpoint holds the positions; with `commitToGroup`, also the group."""
        group = self.options.commit_to_group
        if group is None:
            return
        offsets: dict[tuple[str, int], int | tuple[int, str]] = {
            tp: (o, GROUP_COMMIT_METADATA) for tp, o in off.from_stream_offset(end).items()
        }
        try:
            client_of(self.options).commit_offsets(group, offsets)
        except ReplogError as exc:
            log.warning("commitToGroup %s: committing %s failed: %s", group, end, exc)

    def stop(self) -> None:
        opts = self.options
        close_client(opts.bootstrap, opts.tls, opts.attempt_timeout_ms)
