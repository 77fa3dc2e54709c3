"""A do-nothing PySpark data source: the floor of any Python data source, batch and streaming.

`bench/spark.py` reads it beside the `replog` source in the same runs (issue 32, item 6: a
target a platform floor makes unreachable is shown with that floor measured in the same run).
It serves the same rows as the bench's topic (the replog source's schema, `records` rows of
`value_bytes` bytes in `partitions` partitions) from memory: no network, no storage, no
decoding, one Arrow batch of `BATCH_ROWS` rows at a time, built from one shared buffer. What a
streaming query of it costs beyond the batch read of it is what Spark's Python streaming
machinery costs (the stream-reader process it starts per query, offsets, planning, the WAL and
commit logs), whatever the source does.

Options: `records`, `partitions`, `valueBytes`. Registered as `replog_floor` by `register`.
Spark's workers import this module by name: the bench puts `bench/` on their PYTHONPATH.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from replog.spark.arrow import ARROW_SCHEMA, spark_schema_ddl

BATCH_ROWS = 65_536
NAME = "replog_floor"


@dataclass
class FloorPartition(InputPartition):
    index: int
    first: int  # the range [first, end) of this partition's offsets
    end: int
    value_bytes: int


def _batches(part: FloorPartition) -> Iterator[pa.RecordBatch]:
    """The partition's rows as Arrow batches over one shared random buffer (no copy per row)."""
    width = part.value_bytes
    data = pa.py_buffer(np.random.default_rng(part.index).bytes(BATCH_ROWS * width))
    for first in range(part.first, part.end, BATCH_ROWS):
        n = min(BATCH_ROWS, part.end - first)
        offsets = pa.py_buffer(np.arange(0, (n + 1) * width, width, dtype=np.int32).tobytes())
        values = pa.Array.from_buffers(pa.binary(), n, [None, offsets, data])
        columns = [
            pa.nulls(n, pa.binary()),
            values,
            pa.array(["floor"], pa.string()).take(pa.array(np.zeros(n, dtype=np.int32))),
            pa.array(np.full(n, part.index, dtype=np.int32)),
            pa.array(np.arange(first, first + n, dtype=np.int64)),
            pa.nulls(n, ARROW_SCHEMA.field("timestamp").type),
            pa.nulls(n, pa.int32()),
        ]
        yield pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _plan(options: dict[str, str], begin: int, end: int) -> list[FloorPartition]:
    """Offsets [begin, end) of the whole source, split evenly over its partitions."""
    partitions = int(options.get("partitions", "2"))
    value_bytes = int(options.get("valueBytes", "100"))
    per = (end - begin + partitions - 1) // partitions
    return [
        FloorPartition(i, begin + i * per, min(end, begin + (i + 1) * per), value_bytes)
        for i in range(partitions)
        if begin + i * per < end
    ]


class FloorReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[FloorPartition]:
        return _plan(self.options, 0, int(self.options["records"]))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FloorPartition)
        return _batches(partition)


class FloorStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are one number: how many rows the source has (all of them from the start)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def initialOffset(self) -> dict[str, int]:
        return {"o": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        return None

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        return {"o": int(self.options["records"])}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[FloorPartition]:
        return _plan(self.options, int(start["o"]), int(end["o"]))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FloorPartition)
        return _batches(partition)

    def commit(self, end: dict[str, int]) -> None:
        return None


class FloorDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return spark_schema_ddl(False)

    def reader(self, schema: StructType) -> FloorReader:
        return FloorReader(dict(self.options))

    def streamReader(self, schema: StructType) -> FloorStreamReader:
        return FloorStreamReader(dict(self.options))


def register(spark: Any) -> None:
    spark.dataSource.register(FloorDataSource)
