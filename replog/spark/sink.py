"""The `replog` Spark sink: `df.write.format("replog")` and `df.writeStream.format("replog")`.

Kafka's sink, column for column: `value` (binary or string, required), `topic` (string: the
row's topic, unless option `topic` is set, which wins as in Kafka), `key` (binary or
string), `partition` (int), `headers`. Options: `kafka.bootstrap.servers` (alias
`bootstrap`), `topic`, `kafka.acks` (alias `acks`: `all` (default), `1`/`leader`,
`0`/`none`), TLS (`replog.spark.clients`); unknown options are rejected. Routing: the row's
`partition` when set; else `crc32(key) % partitions` when it has a key; else round-robin per
batch. On an envelope topic the key and headers are stored with the value (and the record
gets the producer's clock as its create time); a raw topic holds values only: there the key
only picks the partition, and a row with headers is refused rather than stored without
them.

Save modes: only `append`. `overwrite` is rejected (as Kafka's sink does); Spark itself
rejects `ignore` and `errorifexists` for Python data sources. Streaming: the Complete output
mode appends each trigger's whole result, as Kafka's sink does.

Guarantee: **at least once**. Within a task, appends are idempotent (a retried append is
written once), but a task that Spark retries (or a micro-batch replayed after a driver
crash) produces with a new identity and appends its rows again: duplicates are possible in
those cases, and consumers that need exactly-once must deduplicate (for example on a
business key). Nothing is lost: with `acks=all` a task only reports success once every one
of its records is committed (below the high watermark).
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

from replog.client.producer import OffsetFuture, Producer
from replog.errors import InvalidArgumentError
from replog.spark.clients import client_for
from replog.spark.options import SinkOptions

# column -> the Spark types Kafka's sink accepts for it
_COLUMN_TYPES = {
    "value": ("binary", "string"),
    "key": ("binary", "string"),
    "topic": ("string",),
    "partition": ("int",),
    "headers": ("array<struct<key:string,value:binary>>",),
}


@dataclass
class ReplogCommit(WriterCommitMessage):
    records: int


def _bytes(raw: object, column: str) -> bytes:
    if isinstance(raw, bytes | bytearray | memoryview):
        return bytes(raw)
    if isinstance(raw, str):
        return raw.encode()
    raise InvalidArgumentError(
        f"the {column} column must be binary or string, got {type(raw).__name__}"
    )


class _Writer:
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = SinkOptions.parse(options)
        types = {f.name: f.dataType.simpleString() for f in schema.fields}
        if "value" not in types:
            raise InvalidArgumentError("the replog sink needs a 'value' column")
        for column, allowed in _COLUMN_TYPES.items():
            if column in types and types[column] not in allowed:
                raise InvalidArgumentError(
                    f"the replog sink's {column} column must be {' or '.join(allowed)}, "
                    f"got {types[column]}"
                )
        if self.options.topic is None and "topic" not in types:
            raise InvalidArgumentError("the replog sink needs option 'topic' or a 'topic' column")
        self.has_partition = "partition" in types
        self.has_key = "key" in types
        self.has_headers = "headers" in types
        self.has_topic = "topic" in types

    def _topic(self, row: Row) -> str:
        topic = self.options.topic or (row["topic"] if self.has_topic else None)
        if not topic:
            raise InvalidArgumentError(
                "a row has no topic: set option 'topic' or fill the 'topic' column"
            )
        return str(topic)

    def _write(self, rows: Iterator[Row]) -> ReplogCommit:
        opts = self.options
        client = client_for(opts.bootstrap, opts.tls)
        producers: dict[str, Producer] = {}
        count = 0
        futures: list[OffsetFuture] = []
        try:
            for row in rows:
                topic = self._topic(row)
                producer = producers.get(topic)
                if producer is None:
                    producer = producers[topic] = client.producer(
                        topic, acks=opts.acks, linger_ms=20
                    )
                partition = row["partition"] if self.has_partition else None
                key = row["key"] if self.has_key else None
                headers = row["headers"] if self.has_headers else None
                futures.append(
                    producer.send(
                        _bytes(row["value"], "value"),
                        key=None if key is None else _bytes(key, "key"),
                        partition=partition,
                        headers=[(h["key"], _bytes(h["value"], "header")) for h in headers or ()],
                    )
                )
                count += 1
            for producer in producers.values():
                producer.flush()
            for fut in futures:
                fut.result()
        finally:
            for producer in producers.values():
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
