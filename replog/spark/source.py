"""The `replog` PySpark data source: batch and streaming reads of committed records, and a sink.

Usage (the options of Spark's Kafka source, with Kafka's meaning)::

    from replog.spark import register
    register(spark)
    df = (spark.read.format("replog")
          .option("kafka.bootstrap.servers", "replog-0.replog:7070,replog-1.replog:7070")
          .option("subscribe", "orders,events")      # or subscribePattern, or assign
          .option("startingOffsets", "earliest").option("endingOffsets", "latest")
          .load())

Options: see `replog.spark.options` (names, aliases, validation), `replog.spark.offsets`
(offset and timestamp options) and `replog.spark.stream` (per-trigger limits). Unknown
options are rejected. TLS: `tls.ca`, `tls.cert`, `tls.key`, `tls.serverName`
(`replog.spark.clients`).

Schema: Spark's Kafka source's, `key binary, value binary, topic string, partition int,
offset bigint, timestamp timestamp, timestampType int`, plus
`headers array<struct<key:string,value:binary>>` with `includeHeaders=true`: an envelope
topic's records fill them, a raw topic's leave them null (`replog.spark.arrow`).
Control records are skipped (their offsets are gaps). Only records below the high watermark
are ever read, so a replayed range `[start, end)` always yields the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from replog.errors import InvalidArgumentError
from replog.spark import offsets as off
from replog.spark.arrow import arrow_schema, spark_schema_ddl
from replog.spark.options import SourceOptions
from replog.spark.reading import (
    ReplogPartition,
    offsets_for_times,
    plan,
    read_partition,
    subscribed_bounds,
)
from replog.spark.sink import ReplogStreamWriter, ReplogWriter
from replog.spark.stream import ReplogStreamReader


class ReplogBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[ReplogPartition]:
        opts = self.options
        bounds = subscribed_bounds(opts)

        def resolve(spec: off.OffsetSpec) -> dict[off.TopicPartition, int]:
            return off.resolve(
                spec,
                bounds,
                fail_on_data_loss=opts.fail_on_data_loss,
                times=lambda option, wanted: offsets_for_times(opts, option, wanted),
            )

        start = resolve(off.EARLIEST if opts.starting is None else opts.starting)
        end = resolve(off.LATEST if opts.ending is None else opts.ending)
        for tp, e in end.items():
            if e < start[tp]:
                raise InvalidArgumentError(
                    f"the ending offset {e} of {off.name(tp)} is before its starting offset "
                    f"{start[tp]}"
                )
        return plan(opts, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)


def _check_schema(schema: StructType, include_headers: bool) -> None:
    """Like Kafka's source, the schema is fixed: a user-given one must be the same."""
    wanted = arrow_schema(include_headers).names
    if schema.fieldNames() != wanted:
        raise InvalidArgumentError(
            f"the replog source has a fixed schema ({spark_schema_ddl(include_headers)}) and "
            f"cannot be read with another one: {schema.simpleString()}"
        )


class ReplogDataSource(DataSource):
    """`format("replog")`: see the module docstring for options and schema."""

    @classmethod
    def name(cls) -> str:
        return "replog"

    def schema(self) -> str:
        # Spark asks for the schema when the DataFrame is created: mistakes fail here, early.
        return spark_schema_ddl(SourceOptions.parse(self.options).include_headers)

    def reader(self, schema: StructType) -> ReplogBatchReader:
        opts = SourceOptions.parse(self.options).for_batch()
        _check_schema(schema, opts.include_headers)
        return ReplogBatchReader(opts)

    def streamReader(self, schema: StructType) -> ReplogStreamReader:
        opts = SourceOptions.parse(self.options).for_stream()
        _check_schema(schema, opts.include_headers)
        return ReplogStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise InvalidArgumentError(
                'save mode "overwrite" is not allowed for replog: a log is appended to, never '
                'overwritten (as with Kafka); use mode("append")'
            )
        return ReplogWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # `overwrite` is the Complete output mode: like Kafka's sink, each trigger appends the
        # whole result table (a log cannot be truncated).
        return ReplogStreamWriter(self.options, schema)
