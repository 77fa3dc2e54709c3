"""Spark reads replog topics like Kafka topics: only committed records, offsets tracked by Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from replog.client import Client
from replog.spark.starting import start_query
from tests.spark.helpers import new_topic, produce, reader, rows
from tests.spark.replog_cluster import ReplogCluster


@pytest.fixture
def client(server: ReplogCluster) -> Any:
    with Client(server.address, tls=server.tls) as c:
        yield c


def test_a_batch_read_returns_exactly_the_committed_records(
    spark: Any, server: ReplogCluster, client: Client
) -> None:
    topic = new_topic(client)
    expected = []
    for p in (0, 1):
        values = [f"p{p}-{i}".encode() * (1 + i % 5) for i in range(1200)]
        offsets = produce(client, topic, p, values)
        expected += [(topic, p, o, v) for o, v in zip(offsets, values, strict=True)]
    df = reader(spark, server, subscribe=topic)
    assert rows(df) == sorted(expected)


def test_starting_and_ending_offsets_bound_the_read(
    spark: Any, server: ReplogCluster, client: Client
) -> None:
    topic = new_topic(client)
    offsets0 = produce(client, topic, 0, [b"a%d" % i for i in range(100)])
    offsets1 = produce(client, topic, 1, [b"b%d" % i for i in range(50)])
    start, end = offsets0[10], offsets0[20]
    df = reader(
        spark,
        server,
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": start, "1": -2}}),
        endingOffsets=json.dumps({topic: {"0": end, "1": -1}}),
    )
    got = rows(df)
    assert [o for _, p, o, _ in got if p == 0] == offsets0[10:20]
    assert [o for _, p, o, _ in got if p == 1] == offsets1


def test_a_range_split_across_tasks_is_read_once(
    spark: Any, server: ReplogCluster, client: Client
) -> None:
    topic = new_topic(client, partitions=1)
    offsets = produce(client, topic, 0, [b"%d" % i for i in range(3000)])
    df = reader(spark, server, subscribe=topic, maxRecordsPerPartition="700")
    assert df.rdd.getNumPartitions() == 5  # ~3,000 offsets in ranges of 700
    assert [o for _, _, o, _ in rows(df)] == offsets
    # replog's older names for these options still work (3,001 offsets: a control record)
    assert reader(spark, server, topic=topic, maxRecordsPerTask="1500").rdd.getNumPartitions() == 3


def test_an_empty_topic_reads_as_no_rows(spark: Any, server: ReplogCluster, client: Client) -> None:
    topic = new_topic(client)
    assert reader(spark, server, subscribe=topic).count() == 0


def test_missing_options_fail_with_a_clear_message(spark: Any, server: ReplogCluster) -> None:
    with pytest.raises(Exception, match="needs exactly one of the options subscribe"):
        spark.read.format("replog").options(**server.options).load().collect()


def stream_to_parquet(
    spark: Any, server: ReplogCluster, topic: str, out: Path, checkpoint: Path, **options: str
) -> None:
    stream = (
        spark.readStream.format("replog")
        .options(**server.options)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        stream = stream.option(k, v)
    writer = (
        stream.load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    query = start_query(writer.start)
    assert query.awaitTermination(300), "the AvailableNow query did not finish"
    assert query.exception() is None


def test_streaming_resumes_from_its_checkpoint_without_gaps_or_duplicates(
    spark: Any, server: ReplogCluster, client: Client, workdir: Path
) -> None:
    topic = new_topic(client)
    out, checkpoint = workdir / "out", workdir / "checkpoint"
    offsets = {
        0: produce(client, topic, 0, [b"first-%d" % i for i in range(700)]),
        1: produce(client, topic, 1, [b"first-%d" % i for i in range(300)]),
    }
    stream_to_parquet(spark, server, topic, out, checkpoint, maxRecordsPerTrigger="400")
    assert spark.read.parquet(str(out)).count() == 1000
    offsets[0] += produce(client, topic, 0, [b"second-%d" % i for i in range(250)])
    offsets[1] += produce(client, topic, 1, [b"second-%d" % i for i in range(50)])
    stream_to_parquet(spark, server, topic, out, checkpoint, maxOffsetsPerTrigger="400")
    got = sorted((r["partition"], r["offset"]) for r in spark.read.parquet(str(out)).collect())
    assert got == sorted((p, o) for p, os in offsets.items() for o in os)
    batches = sorted(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    assert len(batches) >= 4, "maxOffsetsPerTrigger split the work into several micro-batches"
    last = (checkpoint / "offsets" / str(batches[-1])).read_text().splitlines()[-1]
    assert json.loads(last) == {topic: {"0": offsets[0][-1] + 1, "1": offsets[1][-1] + 1}}


def test_the_sink_round_trips_values_through_a_topic(
    spark: Any, server: ReplogCluster, client: Client
) -> None:
    topic = new_topic(client, partitions=2)
    source = spark.createDataFrame(
        [(f"v{i}".encode(), i % 2) for i in range(500)], "value binary, partition int"
    )
    (
        source.write.format("replog")
        .options(**server.options)
        .option("topic", topic)
        .mode("append")
        .save()
    )
    got = reader(spark, server, subscribe=topic).collect()
    assert sorted(bytes(r["value"]) for r in got) == sorted(f"v{i}".encode() for i in range(500))
    assert {(r["partition"], int(bytes(r["value"])[1:]) % 2) for r in got} == {(0, 0), (1, 1)}
