"""The `replog` Spark sink: `df.write.format("replog")` and `df.writeStream.format("replog")`.

Each task appends its rows' `value` column (binary, or string encoded as UTF-8) with
`acks=all` through the batching producer. Routing: the row's `partition` column when the
DataFrame has one; else `crc32(key) % partitions` when it has a `key` column; else
round-robin per batch.

Guarantee: **at least once**. A task that Spark retries (or a micro-batch replayed after a
driver crash) appends its rows again; replog has no idempotent producer yet, so duplicates
are possible in those cases and consumers that need exactly-once must deduplicate (for
example on a business key). Nothing is lost: a task only reports success once every one of
its records is committed (below the high watermark).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pyspark.sql import Row
from pyspark.sql.datasource import (
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from replog.errors import InvalidArgumentError
from replog.spark.clients import client_for, tls_options

ACKS_DEFAULT = "all"


@dataclass
class ReplogCommit(WriterCommitMessage):
    records: int


def _value(raw: object) -> bytes:
    if isinstance(raw, bytes | bytearray | memoryview):
        return bytes(raw)
    if isinstance(raw, str):
        return raw.encode()
    raise InvalidArgumentError(
        f"the value column must be binary or string, got {type(raw).__name__}"
    )


class _Writer:
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        opts = {k.lower(): v for k, v in options.items()}
        for key in ("bootstrap", "topic"):
            if not opts.get(key):
                raise InvalidArgumentError(f"the replog sink needs option {key!r}")
        names = set(schema.fieldNames())
        if "value" not in names:
            raise InvalidArgumentError("the replog sink needs a 'value' column")
        self.bootstrap = opts["bootstrap"]
        self.tls = tls_options(options)
        self.topic = opts["topic"]
        self.acks = opts.get("acks", ACKS_DEFAULT)
        self.has_partition = "partition" in names
        self.has_key = "key" in names

    def _write(self, rows: Iterator[Row]) -> ReplogCommit:
        producer = client_for(self.bootstrap, self.tls).producer(
            self.topic, acks=self.acks, linger_ms=20
        )
        count = 0
        futures = []
        try:
            for row in rows:
                partition = row["partition"] if self.has_partition else None
                key = row["key"] if self.has_key else None
                key_bytes = None if key is None else _value(key)
                futures.append(
                    producer.send(_value(row["value"]), key=key_bytes, partition=partition)
                )
                count += 1
            producer.flush()
            for fut in futures:
                fut.result()
        finally:
            producer.close()
        return ReplogCommit(count)


class ReplogWriter(_Writer, DataSourceWriter):
    def write(self, iterator: Iterator[Row]) -> ReplogCommit:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """The records are already committed by the tasks: nothing left to do."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Appended records cannot be withdrawn from a log (at-least-once; see module doc)."""


class ReplogStreamWriter(_Writer, DataSourceStreamWriter):
    def write(self, iterator: Iterator[Row]) -> ReplogCommit:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing left to do: each task's records were committed before it reported."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Appended records cannot be withdrawn (at-least-once)."""
