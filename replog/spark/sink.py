"""The `replog` Spark sink: `df.write.format("replog")` and `df.writeStream.format("replog")`.

Kafka's sink, column for column: `value` (binary or string, required), `topic` (string: the
row's topic, unless option `topic` is set, which wins as in Kafka), `key` (binary or
string), `partition` (int), `headers`. Options: `kafka.bootstrap.servers` (alias
`bootstrap`), `topic`, `kafka.acks` (alias `acks`: `all` (default), `1`/`leader`,
`0`/`none`: in a streaming write only with `exactlyOnce=false`, see
`SinkOptions.exactly_once_for`), TLS and `attemptTimeout` (`replog.spark.clients`); unknown
options are rejected. Routing: the row's `partition` when set; else the key's partition by
option `partitioner` (`murmur2`, Kafka's, by default; `crc32`) when it has a key; else
round-robin per batch. On an envelope topic the key and headers are stored with the value
(and the record gets the producer's clock as its create time); a raw topic holds values
only: there the key only picks the partition, and a row with headers is refused rather than
stored without them.

Save modes: only `append`. `overwrite` is rejected (as Kafka's sink does); Spark itself
rejects `ignore` and `errorifexists` for Python data sources. Streaming: the Complete output
mode appends each trigger's whole result, as Kafka's sink does.

Guarantee: **exactly once** for streaming queries (unless `exactlyOnce=false`) and for
batch writes given a `sinkId`; else at least once. Exactly once: each task produces through
a named idempotent producer, `spark/<queryId or sinkId>/<batchId>/<task partition>`, resumed
(`producer_resume=True`: its current id and epoch), and cuts its rows into batches
deterministically (`maxRecordsPerAppend` rows per target partition, in row order; keyless
rows go round-robin from the task's partition id). A retried task (or a micro-batch replayed
after a driver restart, from its checkpoint) resends the same batches with the same sequence
numbers from 0: the leader answers each one it holds as a duplicate (or DUPLICATE_SEQUENCE,
also "already written"), so no row is written twice. What it needs from the user is in
docs/spark.md ("Exactly-once sink"): a task's rows must be the same rows in the same order
on every attempt, the topic's partition count must not change in between, and a `sinkId` is
used for one batch write only (rerunning that same write is what it is for). Without it (batch
writes without `sinkId`, `exactlyOnce=false`): appends are idempotent within a task, but a
retried task appends its rows again. Nothing is lost: with `acks=all` a task only reports
success once every one of its records is committed (below the high watermark).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import (
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from replog.client import Client, formats
from replog.client.partitioner import partition_for_key
from replog.client.producer import Producer, RecordFuture
from replog.errors import DuplicateSequenceError, InvalidArgumentError
from replog.records import Record
from replog.spark.clients import client_for, resumed_producer_client
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


# Spark's local properties of a streaming query's tasks (MicroBatchExecution sets them).
_QUERY_ID = "sql.streaming.queryId"
_BATCH_ID = "streaming.sql.batchId"


class _Writer:
    streaming = False

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = SinkOptions.parse(options)
        if self.streaming:
            if self.options.sink_id is not None:
                raise InvalidArgumentError(
                    "option sinkId is for batch writes: a streaming query's identity is its "
                    "query id, kept in its checkpoint"
                )
        elif self.options.exactly_once and self.options.sink_id is None:
            raise InvalidArgumentError(
                "exactlyOnce in a batch write needs option sinkId: a name for this write, "
                "the same when the same write is run again"
            )
        # kafka.acks=0 refused, exactlyOnce=false logged (`SinkOptions.exactly_once_for`)
        self.exactly_once = self.options.exactly_once_for(self.streaming)
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
        if self.exactly_once:
            return self._write_exactly_once(rows, self._producer_name())
        return self._write_at_least_once(rows)

    def _producer_name(self) -> str:
        """`spark/<sinkId or queryId>/<batchId>/<task partition>`: the same for every attempt
        of a task, distinct between tasks (each numbers its batches from 0)."""
        context = TaskContext.get()
        if context is None:
            raise RuntimeError("the replog sink writes in Spark tasks only")
        if self.streaming:
            query = context.getLocalProperty(_QUERY_ID)
            batch = context.getLocalProperty(_BATCH_ID)
            if not query or batch is None:
                raise RuntimeError("Spark gave this streaming task no query id or batch id")
            return f"spark/{query}/{batch}/{context.partitionId()}"
        return f"spark/{self.options.sink_id}/batch/{context.partitionId()}"

    def _write_exactly_once(self, rows: Iterator[Row], name: str) -> ReplogCommit:
        opts = self.options
        task = TaskContext.get()
        start = task.partitionId() if task is not None else 0
        client: Client | None = None
        partitions: dict[str, int] = {}
        envelope: dict[str, bool] = {}
        round_robin: dict[str, int] = {}
        pending: dict[tuple[str, int], list[bytes | Record]] = {}
        count = 0
        try:
            for row in rows:
                if client is None:
                    client = resumed_producer_client(
                        opts.bootstrap, opts.tls, name, opts.attempt_timeout_ms
                    )
                topic = self._topic(row)
                if topic not in partitions:
                    partitions[topic] = client.partition_count(topic)
                    envelope[topic] = client.topic_format(topic) == formats.ENVELOPE
                n = partitions[topic]
                key_raw = row["key"] if self.has_key else None
                key = None if key_raw is None else _bytes(key_raw, "key")
                given = row["partition"] if self.has_partition else None
                if given is not None:
                    if not 0 <= given < n:
                        raise InvalidArgumentError(
                            f"partition {given} outside [0, {n}) of topic {topic!r}",
                            partition=given,
                        )
                    partition = int(given)
                elif key is not None:
                    partition = partition_for_key(key, n, opts.partitioner)
                else:
                    i = round_robin.get(topic, 0)
                    round_robin[topic] = i + 1
                    partition = (start + i) % n
                raw_value = row["value"]
                value = None if raw_value is None else _bytes(raw_value, "value")
                headers = row["headers"] if self.has_headers else None
                item: bytes | Record
                if envelope[topic]:
                    pairs = [(h["key"], _bytes(h["value"], "header")) for h in headers or ()]
                    item = Record(value, key, pairs)  # value None: a tombstone
                elif headers:
                    raise InvalidArgumentError(
                        f"topic {topic!r} is raw: its records hold no headers or timestamps",
                        topic=topic,
                    )
                elif value is None:
                    raise InvalidArgumentError(
                        f"topic {topic!r} is raw: a null value (a tombstone) needs an "
                        "envelope topic",
                        topic=topic,
                    )
                else:
                    item = value
                batch = pending.setdefault((topic, partition), [])
                batch.append(item)
                count += 1
                if len(batch) >= opts.records_per_append:
                    _append_once(client, topic, partition, batch, opts.acks)
                    del pending[(topic, partition)]
            for (topic, partition), batch in pending.items():
                assert client is not None
                _append_once(client, topic, partition, batch, opts.acks)
        finally:
            if client is not None:
                client.close()
        return ReplogCommit(count)

    def _write_at_least_once(self, rows: Iterator[Row]) -> ReplogCommit:
        opts = self.options
        client = client_for(opts.bootstrap, opts.tls, opts.attempt_timeout_ms)
        producers: dict[str, Producer] = {}
        count = 0
        futures: list[RecordFuture] = []
        try:
            for row in rows:
                topic = self._topic(row)
                producer = producers.get(topic)
                if producer is None:
                    producer = producers[topic] = client.producer(
                        topic, acks=opts.acks, linger_ms=20, partitioner=opts.partitioner
                    )
                partition = row["partition"] if self.has_partition else None
                key = row["key"] if self.has_key else None
                headers = row["headers"] if self.has_headers else None
                value = row["value"]
                futures.append(
                    producer.send(
                        None if value is None else _bytes(value, "value"),
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


def _append_once(
    client: Client, topic: str, partition: int, batch: list[bytes | Record], acks: str
) -> None:
    """Append one batch of a resumed producer; one a previous attempt wrote is not written
    again (a duplicate is answered with its offsets, an older one with DUPLICATE_SEQUENCE)."""
    # DuplicateSequenceError: written by an earlier attempt; the client's numbering goes on.
    with contextlib.suppress(DuplicateSequenceError):
        client.append(topic, partition, batch, acks=acks)


class ReplogWriter(_Writer, DataSourceWriter):
    def write(self, iterator: Iterator[Row]) -> ReplogCommit:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """The records are already committed by the tasks: nothing left to do."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Appended records cannot be withdrawn from a log: a rerun with the same sinkId
        writes only what is missing (see the module doc)."""


class ReplogStreamWriter(_Writer, DataSourceStreamWriter):
    streaming = True

    def write(self, iterator: Iterator[Row]) -> ReplogCommit:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing left to do: each task's records were committed before it reported."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Appended records cannot be withdrawn: the replayed batch writes only what is
        missing (exactly once, see the module doc)."""
