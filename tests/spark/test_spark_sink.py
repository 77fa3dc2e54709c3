"""The replog sink as Kafka's: append only, Kafka's columns and options."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replog.client import Client, partition_for_key
from replog.spark.starting import start_query
from tests.spark.helpers import QUERY_DEADLINE_S, new_topic, produce, reader, rows, stream
from tests.spark.replog_cluster import ReplogCluster


@pytest.fixture
def client(server: ReplogCluster) -> Iterator[Client]:
    with Client(server.address, tls=server.tls) as c:
        yield c


def stored(client: Client, topic: str) -> list[bytes | None]:
    """The values of partition 0 (not its end offset: a leader change appends a record of
    its own, so "nothing written" is about the records)."""
    return list(client.fetch(topic, 0, 0, max_bytes=1 << 20).records.values)


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("overwrite", r'save mode "overwrite" is not allowed for replog'),
        ("ignore", r'cannot be written in the "Ignore" mode'),
        ("errorifexists", r'cannot be written in the "ErrorIfExists" mode'),
    ],
)
def test_the_sink_only_appends_as_kafkas_sink_does(
    spark: Any, server: ReplogCluster, client: Client, mode: str, message: str
) -> None:
    topic = new_topic(client, 1)
    produce(client, topic, 0, [b"kept"])
    before = stored(client, topic)
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match=message):
        df.write.format("replog").options(**server.options).option("topic", topic).mode(mode).save()
    assert stored(client, topic) == before, "nothing written"
    assert [v for _, _, _, v in rows(reader(spark, server, subscribe=topic))] == [b"kept"]


def test_rows_go_to_their_topic_column_unless_option_topic_is_set(
    spark: Any, server: ReplogCluster, client: Client
) -> None:
    a, b, forced = new_topic(client, 1), new_topic(client, 1), new_topic(client, 1)
    df = spark.createDataFrame(
        [(a, "to-a-1"), (b, "to-b"), (a, "to-a-2")],
        "topic string, value string",
    )
    df.write.format("replog").options(**server.options).option("kafka.acks", "1").mode(
        "append"
    ).save()
    assert sorted(v for _, _, _, v in rows(reader(spark, server, subscribe=a))) == [
        b"to-a-1",
        b"to-a-2",
    ]
    assert [v for _, _, _, v in rows(reader(spark, server, subscribe=b))] == [b"to-b"]
    # Option topic wins over the column, as in Kafka.
    df.write.format("replog").options(**server.options).option("topic", forced).mode(
        "append"
    ).save()
    assert len(rows(reader(spark, server, subscribe=forced))) == 3


def test_what_the_source_reads_can_be_written_back_with_kafkas_columns(
    spark: Any, server: ReplogCluster, client: Client
) -> None:
    source, copy = new_topic(client, 2), new_topic(client, 2)
    for p in (0, 1):
        produce(client, source, p, [b"%d-%d" % (p, i) for i in range(100)])
    df = reader(spark, server, subscribe=source, includeHeaders="true")
    # Its null key and headers are accepted; `topic` is overridden by the option.
    df.write.format("replog").options(**server.options).option("topic", copy).mode("append").save()
    got = rows(reader(spark, server, subscribe=copy))
    assert sorted((p, v) for _, p, _, v in got) == sorted(
        (p, b"%d-%d" % (p, i)) for p in (0, 1) for i in range(100)
    ), "each row kept its partition"


def test_rows_with_headers_are_refused_by_a_raw_topic_rather_than_stored_without_them(
    spark: Any, server: ReplogCluster, client: Client
) -> None:
    topic = new_topic(client, 1, format="raw")
    before = stored(client, topic)
    df = spark.createDataFrame(
        [(b"v", [("trace", b"1")])], "value binary, headers array<struct<key:string,value:binary>>"
    )
    with pytest.raises(Exception, match="is raw: its records hold no headers"):
        df.write.format("replog").options(**server.options).option("topic", topic).mode(
            "append"
        ).save()
    assert stored(client, topic) == before, "nothing written"


def test_keys_and_headers_are_stored_in_an_envelope_topic(
    spark: Any, server: ReplogCluster, client: Client
) -> None:
    topic = new_topic(client, 2, format="envelope")
    df = spark.createDataFrame(
        [(f"k{i}", f"v{i}", [("n", b"%d" % i)] if i % 2 else None) for i in range(40)],
        "key string, value string, headers array<struct<key:string,value:binary>>",
    )
    df.write.format("replog").options(**server.options).option("topic", topic).mode("append").save()
    got = reader(spark, server, subscribe=topic, includeHeaders="true").collect()
    assert sorted((bytes(r.key), bytes(r.value)) for r in got) == sorted(
        (b"k%d" % i, b"v%d" % i) for i in range(40)
    )
    assert {bytes(r.key): r.headers for r in got}[b"k3"] == [("n", b"3")]
    assert {bytes(r.key): r.headers for r in got}[b"k2"] is None
    assert all(r.timestamp is not None and r.timestampType == 0 for r in got)
    by_key = {(bytes(r.key), r.partition) for r in got}
    assert len({p for k, p in by_key if k == b"k7"}) == 1, "a key always lands on one partition"


def test_a_null_value_is_written_as_a_tombstone_and_refused_by_a_raw_topic(
    spark: Any, server: ReplogCluster, client: Client
) -> None:
    topic = new_topic(client, 1, format="envelope")
    df = spark.createDataFrame([("k", "v"), ("k", None)], "key string, value string")
    df.write.format("replog").options(**server.options).option("topic", topic).mode("append").save()
    got = reader(spark, server, subscribe=topic).collect()  # two tasks: any order
    assert len(got) == 2
    assert {(bytes(r.key), None if r.value is None else bytes(r.value)) for r in got} == {
        (b"k", b"v"),
        (b"k", None),
    }
    raw = new_topic(client, 1, format="raw")
    with pytest.raises(Exception, match="tombstone"):
        df.write.format("replog").options(**server.options).option("topic", raw).mode(
            "append"
        ).save()


@pytest.mark.parametrize("partitioner", [None, "murmur2", "crc32"])
def test_keyed_rows_go_to_the_partition_kafkas_partitioner_picks(
    spark: Any, server: ReplogCluster, client: Client, partitioner: str | None
) -> None:
    topic = new_topic(client, 5, format="envelope")
    df = spark.createDataFrame([(f"user-{i}", "v") for i in range(50)], "key string, value string")
    writer = df.write.format("replog").options(**server.options).option("topic", topic)
    if partitioner is not None:
        writer = writer.option("partitioner", partitioner)
    writer.mode("append").save()
    got = reader(spark, server, subscribe=topic).collect()
    assert len(got) == 50
    expected = partitioner or "murmur2"
    assert {(bytes(r.key), r.partition) for r in got} == {
        (b"user-%d" % i, partition_for_key(b"user-%d" % i, 5, expected)) for i in range(50)
    }


def test_a_stream_in_complete_mode_appends_each_triggers_whole_result_as_kafkas_sink_does(
    spark: Any, server: ReplogCluster, client: Client, workdir: Path
) -> None:
    source, out = new_topic(client, 2), new_topic(client, 1)
    produce(client, source, 0, [b"a"] * 30)
    produce(client, source, 1, [b"b"] * 20)
    counts = (
        stream(spark, server, subscribe=source, startingOffsets="earliest")
        .groupBy("partition")
        .count()
        .selectExpr("CAST(CONCAT(partition, '=', count) AS STRING) AS value")
    )
    writer = (
        counts.writeStream.format("replog")
        .options(**server.options)
        .option("topic", out)
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .outputMode("complete")
        .trigger(availableNow=True)
    )
    query = start_query(writer.start)
    assert query.awaitTermination(QUERY_DEADLINE_S) and query.exception() is None
    assert sorted(v for _, _, _, v in rows(reader(spark, server, subscribe=out))) == [
        b"0=30",
        b"1=20",
    ]
