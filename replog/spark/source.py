"""The `replog` PySpark data source: batch and streaming reads of committed records, and a sink.

Usage::

    from replog.spark import register
    register(spark)
    df = (spark.read.format("replog")
          .option("bootstrap", "127.0.0.1:7070").option("topic", "orders")
          .option("startingOffsets", "earliest").option("endingOffsets", "latest")
          .load())

Options (case-insensitive, all strings): `bootstrap` (host:port of any node, required),
`topic` (required), `startingOffsets` / `endingOffsets` (see `replog.spark.offsets`),
`failOnDataLoss` (default true), `maxRecordsPerTrigger` (streams), `minPartitions` and
`maxRecordsPerTask` (default 2,000,000: splits large ranges into several tasks),
`fetchBytesMax` (default 3 MiB per reply, under gRPC's 4 MiB message limit; the server caps it
at its own `fetch_bytes_max`), `tls.ca`, `tls.cert`, `tls.key`, `tls.serverName` (TLS; see
`replog.spark.clients`).

Schema: `value binary, topic string, partition int, offset bigint`. replog records carry no
key, timestamp or headers, so unlike Spark's Kafka source there are no such columns.
Control records are skipped (their offsets are gaps). Only records below the high watermark
are ever read, so a replayed range `[start, end)` always yields the same rows.

Where code runs: options are parsed on the driver; `read()` runs in executor processes with
a freshly unpickled `ReplogPartition` (plain fields only) and opens its gRPC channel lazily,
once per process and bootstrap address (`replog.spark.clients`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from replog.errors import InvalidArgumentError
from replog.spark import offsets as off
from replog.spark.arrow import SPARK_SCHEMA_DDL, frames_to_record_batch
from replog.spark.clients import NO_TLS, TlsOptions, client_for, close_client, tls_options
from replog.spark.sink import ReplogStreamWriter, ReplogWriter

FETCH_BYTES_DEFAULT = 3 * 1024 * 1024
RECORDS_PER_TASK_DEFAULT = 2_000_000


@dataclass(frozen=True)
class Options:
    bootstrap: str
    topic: str
    starting: str | None
    ending: str | None
    fail_on_data_loss: bool
    max_records_per_trigger: int | None
    min_partitions: int
    records_per_task_max: int
    fetch_bytes_max: int
    tls: TlsOptions = NO_TLS

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Options:
        opts = {k.lower(): v for k, v in options.items()}

        def need(key: str) -> str:
            value = opts.get(key.lower())
            if not value:
                raise InvalidArgumentError(f"the replog source needs option {key!r}")
            return value

        def integer(key: str, default: int | None, minimum: int) -> int | None:
            raw = opts.get(key.lower())
            if raw is None or raw == "":
                return default
            try:
                value = int(raw)
            except ValueError:
                raise InvalidArgumentError(
                    f"option {key} must be an integer, got {raw!r}"
                ) from None
            if value < minimum:
                raise InvalidArgumentError(f"option {key} must be >= {minimum}, got {value}")
            return value

        return cls(
            bootstrap=need("bootstrap"),
            topic=need("topic"),
            starting=opts.get("startingoffsets"),
            ending=opts.get("endingoffsets"),
            fail_on_data_loss=opts.get("failondataloss", "true").lower() != "false",
            max_records_per_trigger=integer("maxRecordsPerTrigger", None, 1),
            min_partitions=integer("minPartitions", 0, 0) or 0,
            records_per_task_max=integer("maxRecordsPerTask", RECORDS_PER_TASK_DEFAULT, 1)
            or RECORDS_PER_TASK_DEFAULT,
            fetch_bytes_max=integer("fetchBytesMax", FETCH_BYTES_DEFAULT, 1024)
            or FETCH_BYTES_DEFAULT,
            tls=tls_options(options),
        )

    def bounds(self) -> dict[int, off.PartitionBounds]:
        listed = client_for(self.bootstrap, self.tls).list_offsets(self.topic)
        return {o.partition: off.PartitionBounds(o.partition, o.earliest, o.latest) for o in listed}


class ReplogPartition(InputPartition):
    """One task: records `[start, end)` of one partition. Plain fields: picklable."""

    def __init__(
        self,
        bootstrap: str,
        rng: off.OffsetRange,
        fetch_bytes_max: int,
        tls: TlsOptions = NO_TLS,
    ) -> None:
        super().__init__(None)
        self.bootstrap = bootstrap
        self.tls = tls
        self.topic = rng.topic
        self.partition = rng.partition
        self.start = rng.start
        self.end = rng.end
        self.fetch_bytes_max = fetch_bytes_max


def read_partition(part: InputPartition) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches of the committed records in `[start, end)` (executor side).

    Reads through `StreamFrom` (the server reads the next batch while this one is decoded:
    about twice the rows per second of one `Fetch` after another) and cancels the stream at
    `end`. The range was planned below the HW, so every record in it is committed; right
    after a failover the new leader's HW may briefly trail it, and the stream then waits.
    """
    if not isinstance(part, ReplogPartition) or part.start >= part.end:
        return  # Spark runs one placeholder task when `partitions()` planned none
    client = client_for(part.bootstrap, part.tls)
    stream = client.stream(part.topic, part.partition, part.start, max_bytes=part.fetch_bytes_max)
    try:
        for reply in stream:
            if not reply.frames:
                continue
            batch = frames_to_record_batch(reply.frames, part.topic, part.partition)
            if reply.next_offset > part.end:
                offsets = batch.column(3).to_numpy()
                batch = batch.slice(0, int(np.searchsorted(offsets, part.end)))
            if batch.num_rows:
                yield batch
            if reply.next_offset >= part.end:
                return
    finally:
        stream.close()


def _plan(opts: Options, start: Mapping[int, int], end: Mapping[int, int]) -> list[ReplogPartition]:
    ranges = [off.OffsetRange(opts.topic, p, start.get(p, end[p]), end[p]) for p in sorted(end)]
    return [
        ReplogPartition(opts.bootstrap, r, opts.fetch_bytes_max, opts.tls)
        for r in off.split(ranges, opts.records_per_task_max, opts.min_partitions)
    ]


class ReplogBatchReader(DataSourceReader):
    def __init__(self, options: Options) -> None:
        self.options = options

    def partitions(self) -> list[ReplogPartition]:
        opts = self.options
        bounds = opts.bounds()
        kw: dict[str, Any] = {"fail_on_data_loss": opts.fail_on_data_loss, "topic": opts.topic}
        start_spec = off.parse_offsets_option(opts.starting, opts.topic, off.EARLIEST)
        end_spec = off.parse_offsets_option(opts.ending, opts.topic, off.LATEST)
        if end_spec == off.EARLIEST or (
            isinstance(end_spec, dict) and off.EARLIEST in end_spec.values()
        ):
            raise InvalidArgumentError("endingOffsets cannot be earliest")
        start = off.resolve(start_spec, bounds, **kw)
        end = off.resolve(end_spec, bounds, **kw)
        for p in end:
            if end[p] < start[p]:
                raise InvalidArgumentError(
                    f"endingOffsets {end[p]} is before startingOffsets {start[p]} for partition {p}"
                )
        return _plan(opts, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)


class ReplogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Options) -> None:
        self.options = options
        self._target: dict[int, int] | None = None

    def _latest(self) -> dict[int, off.PartitionBounds]:
        return self.options.bounds()

    def initialOffset(self) -> dict[str, dict[str, int]]:
        opts = self.options
        spec = off.parse_offsets_option(opts.starting, opts.topic, off.LATEST)
        start = off.resolve(
            spec, self._latest(), fail_on_data_loss=opts.fail_on_data_loss, topic=opts.topic
        )
        return off.to_stream_offset(opts.topic, start)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_records_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {p: b.high_watermark for p, b in self._latest().items()}

    def latestOffset(
        self, start: dict[str, dict[str, int]], limit: ReadLimit
    ) -> dict[str, dict[str, int]]:
        topic = self.options.topic
        begin = off.from_stream_offset(topic, start)
        bounds = self._latest()
        latest = {p: b.high_watermark for p, b in bounds.items()}
        for p, b in bounds.items():
            begin.setdefault(p, b.log_start_offset)  # a new partition starts at its earliest
        if self._target is not None:
            latest = {p: min(latest[p], self._target.get(p, begin[p])) for p in latest}
        latest = {p: max(latest[p], begin[p]) for p in latest}
        if isinstance(limit, ReadMaxRows):
            latest = off.spread_limit(begin, latest, limit.max_rows)
        elif isinstance(limit, ReadMinRows) and sum(latest[p] - begin[p] for p in latest) < (
            limit.min_rows
        ):
            latest = begin
        return off.to_stream_offset(topic, latest)

    def reportLatestOffset(self) -> dict[str, dict[str, int]]:
        bounds = self._latest()
        return off.to_stream_offset(
            self.options.topic, {p: b.high_watermark for p, b in bounds.items()}
        )

    def partitions(
        self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
    ) -> list[ReplogPartition]:
        topic = self.options.topic
        begin = off.from_stream_offset(topic, start)
        finish = off.from_stream_offset(topic, end)
        missing = [p for p in finish if p not in begin]
        if missing:
            bounds = self._latest()
            for p in missing:
                begin[p] = bounds[p].log_start_offset if p in bounds else finish[p]
        return _plan(self.options, begin, finish)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        """Nothing to do: replog keeps no consumer positions; Spark's checkpoint holds them."""

    def stop(self) -> None:
        close_client(self.options.bootstrap, self.options.tls)


class ReplogDataSource(DataSource):
    """`format("replog")`: see the module docstring for options and schema."""

    @classmethod
    def name(cls) -> str:
        return "replog"

    def schema(self) -> str:
        return SPARK_SCHEMA_DDL

    def reader(self, schema: StructType) -> ReplogBatchReader:
        return ReplogBatchReader(Options.parse(self.options))

    def streamReader(self, schema: StructType) -> ReplogStreamReader:
        return ReplogStreamReader(Options.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return ReplogWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return ReplogStreamWriter(self.options, schema)
