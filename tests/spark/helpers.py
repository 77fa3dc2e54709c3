"""What the Spark tests share: topics, producing, reading, running a stream to its end."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from replog.client import Client
from replog.records import Record
from replog.spark.starting import start_query
from tests.spark.replog_cluster import ReplogCluster

QUERY_DEADLINE_S = 300

_names = itertools.count()


def new_topic(client: Client, partitions: int = 2, prefix: str = "spark", **config: str) -> str:
    """A new topic (`config`: `format`, `timestamp_type` as `Client.create_topic` takes)."""
    name = f"{prefix}{next(_names)}"
    client.create_topic(name, partitions, **config)
    return name


def produce(
    client: Client, topic: str, partition: int, values: Sequence[bytes | Record]
) -> list[int]:
    """Append with acks=all; the offsets the values got (a replicated partition starts with
    its leader's control record, and a failover adds one: offsets are not simply 0..n-1)."""
    offsets: list[int] = []
    for i in range(0, len(values), 500):
        res = client.append(topic, partition, values[i : i + 500], acks="all")
        offsets += range(res.base_offset, res.last_offset + 1)
    return offsets


def value_of(value: Any) -> bytes | None:
    """A row's value column as bytes (None: a null value, a tombstone's)."""
    return None if value is None else bytes(value)


def rows(df: Any) -> list[tuple[str, int, int, bytes | None]]:
    """(topic, partition, offset, value) of every row, sorted (by offset: values of one
    partition are never compared)."""
    return sorted(
        (r["topic"], r["partition"], r["offset"], value_of(r["value"])) for r in df.collect()
    )


def reader(spark: Any, server: ReplogCluster, **options: str) -> Any:
    """A batch DataFrame (lazy: options the source checks at planning fail on collect)."""
    return spark.read.format("replog").options(**server.options).options(**options).load()


def stream(spark: Any, server: ReplogCluster, **options: str) -> Any:
    return spark.readStream.format("replog").options(**server.options).options(**options).load()


class Batches:
    """A `foreachBatch` sink that keeps each micro-batch's rows and task count in the test."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[list[tuple[str, int, int, bytes | None]]] = []
        self.tasks: list[int] = []
        self.raw: list[Any] = []  # every Row, all columns

    def __call__(self, df: Any, batch_id: int) -> None:
        collected = df.collect()
        got = sorted((r.topic, r.partition, r.offset, value_of(r.value)) for r in collected)
        tasks = df.rdd.getNumPartitions()
        with self.lock:
            self.batches.append(got)
            self.tasks.append(tasks)
            self.raw += collected

    @property
    def rows(self) -> list[tuple[str, int, int, bytes]]:
        with self.lock:
            return sorted(r for b in self.batches for r in b)

    def sizes(self) -> list[int]:
        with self.lock:
            return [len(b) for b in self.batches]


def run_available_now(df: Any, checkpoint: str, sink: Batches | None = None) -> Batches:
    """Run a stream with Trigger.AvailableNow into `sink`; fail with the query's error."""
    sink = sink if sink is not None else Batches()
    writer = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
    )
    query = start_query(writer.start)
    assert query.awaitTermination(QUERY_DEADLINE_S), "the AvailableNow query did not finish"
    assert query.exception() is None, query.exception()
    return sink


@contextmanager
def running(df: Any, checkpoint: str, sink: Batches) -> Iterator[Any]:
    """The stream running into `sink`, a trigger every 200 ms; stopped on leaving."""
    writer = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
    )
    query = start_query(writer.start)
    try:
        yield query
    finally:
        query.stop()


def available_now_error(df: Any, checkpoint: str) -> str:
    """The error text of a stream that must fail (at start or in its first batches)."""
    try:
        writer = (
            df.writeStream.foreachBatch(Batches())
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
        )
        query = start_query(writer.start)
        query.awaitTermination(QUERY_DEADLINE_S)
    except Exception as exc:  # raised by awaitTermination, or by start()
        return str(exc)
    raise AssertionError(f"the query did not fail: {query.exception()}")
