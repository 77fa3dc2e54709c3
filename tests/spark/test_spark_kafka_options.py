"""A Spark user who knows Kafka's source: its option names, columns and rules work on replog.

Each Kafka option is exercised in a batch query and, where it applies, in a streaming one,
against the module's 3-node cluster (TLS on), with the one session-wide SparkSession.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from replog.client import Client
from replog.records import Record
from tests.integration.waiting import wait_until
from tests.spark.helpers import (
    Batches,
    available_now_error,
    new_topic,
    produce,
    reader,
    rows,
    run_available_now,
    running,
    stream,
)
from tests.spark.replog_cluster import ReplogCluster

KAFKA_SCHEMA = (
    "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
    "timestamp:timestamp,timestampType:int>"
)
HEADERS = "headers:array<struct<key:string,value:binary>>"


@pytest.fixture
def client(server: ReplogCluster) -> Any:
    with Client(server.address, tls=server.tls) as c:
        yield c


def filled(
    client: Client, partitions: int, count: int, prefix: str = "spark", **config: str
) -> tuple[str, list]:
    """A new topic (`config` as `new_topic` takes) with `count` records in each partition;
    its expected rows."""
    topic = new_topic(client, partitions, prefix, **config)
    expected = []
    for p in range(partitions):
        values = [b"%s-%d-%d" % (topic.encode(), p, i) for i in range(count)]
        offsets = produce(client, topic, p, values)
        expected += [(topic, p, o, v) for o, v in zip(offsets, values, strict=True)]
    return topic, sorted(expected)


def checkpoint(workdir: Path, name: str = "checkpoint") -> str:
    return str(workdir / name)


# -- columns -----------------------------------------------------------------------------------


def test_rows_have_kafkas_columns_and_key_timestamp_headers_are_null_until_records_carry_them(
    spark: Any, server: ReplogCluster, client: Client, workdir: Path
) -> None:
    topic, expected = filled(client, 1, 20, format="raw")  # values only
    df = reader(spark, server, subscribe=topic)
    assert df.schema.simpleString() == KAFKA_SCHEMA
    got = df.collect()
    assert sorted((r.topic, r.partition, r.offset, bytes(r.value)) for r in got) == expected
    assert {(r.key, r.timestamp, r.timestampType) for r in got} == {(None, None, None)}

    with_headers = reader(spark, server, subscribe=topic, includeHeaders="true")
    assert with_headers.schema.simpleString() == KAFKA_SCHEMA[:-1] + "," + HEADERS + ">"
    assert [r.headers for r in with_headers.collect()] == [None] * 20

    live = stream(spark, server, subscribe=topic, startingOffsets="earliest", includeHeaders="true")
    assert live.schema.simpleString() == with_headers.schema.simpleString()
    sink = run_available_now(live, checkpoint(workdir))
    assert sink.rows == expected
    assert {(r.key, r.timestamp, r.timestampType, r.headers) for r in sink.raw} == {
        (None, None, None, None)
    }


def test_an_envelope_topics_key_timestamp_and_headers_fill_kafkas_columns(
    spark: Any, server: ReplogCluster, client: Client, workdir: Path
) -> None:
    created = new_topic(client, 1, format="envelope")
    appended = new_topic(client, 1, format="envelope", timestamp_type="log_append_time")
    items = [
        Record(b"v%d" % i, key=b"k%d" % i if i % 2 else None, timestamp_ms=1_700_000_000_000 + i)
        for i in range(30)
    ] + [
        Record(b"with-headers", headers=[("trace", b"t1"), ("n", b"")], timestamp_ms=5),
        Record(None, key=b"k1", timestamp_ms=6),  # a tombstone: a null value column
    ]
    offsets = {t: produce(client, t, 0, items) for t in (created, appended)}
    want = [
        (created, o, r.key, r.value, r.timestamp_ms, [tuple(h) for h in r.headers] or None)
        for o, r in zip(offsets[created], items, strict=True)
    ]

    def columns(got: list[Any], topic: str) -> list[tuple[Any, ...]]:
        return sorted(
            (
                r.topic,
                r.offset,
                None if r.key is None else bytes(r.key),
                None if r.value is None else bytes(r.value),
                round(r.timestamp.timestamp() * 1000),
                None if r.headers is None else [(h.key, bytes(h.value)) for h in r.headers],
            )
            for r in got
            if r.topic == topic
        )

    batch = reader(spark, server, subscribe=f"{created},{appended}", includeHeaders="true")
    got = batch.collect()
    assert columns(got, created) == want
    assert {(r.topic, r.timestampType) for r in got} == {(created, 0), (appended, 1)}
    stamped = [r.timestamp for r in got if r.topic == appended]
    assert all(t.year >= 2025 for t in stamped), "the leader's clock, not the producer's"

    live = stream(
        spark, server, subscribe=created, startingOffsets="earliest", includeHeaders="true"
    )
    sink = run_available_now(live, checkpoint(workdir))
    assert columns(sink.raw, created) == want


# -- which topics and partitions ----------------------------------------------------------------


def test_subscribe_reads_a_list_of_topics_in_one_query(
    spark: Any, server: ReplogCluster, client: Client, workdir: Path
) -> None:
    a, rows_a = filled(client, 2, 30)
    b, rows_b = filled(client, 1, 20)
    other, _ = filled(client, 1, 5)
    assert rows(reader(spark, server, subscribe=f"{a}, {b}")) == sorted(rows_a + rows_b)
    live = stream(spark, server, subscribe=f"{a},{b}", startingOffsets="earliest")
    assert run_available_now(live, checkpoint(workdir)).rows == sorted(rows_a + rows_b)
    assert other not in {t for t, _, _, _ in rows_a + rows_b}
    with pytest.raises(Exception, match="no-such-topic"):
        reader(spark, server, subscribe=f"{a},no-such-topic").collect()


def test_subscribe_pattern_reads_matching_topics_and_a_stream_picks_up_new_ones(
    spark: Any, server: ReplogCluster, client: Client, workdir: Path
) -> None:
    prefix = f"pattern{new_topic(client, 1)}-"
    x, rows_x = filled(client, 1, 10, prefix)
    _, rows_y = filled(client, 2, 10, prefix)
    filled(client, 1, 10, "not" + prefix)
    pattern = prefix.replace("-", r"\-") + ".*"
    assert rows(reader(spark, server, subscribePattern=pattern)) == sorted(rows_x + rows_y)

    live = stream(spark, server, subscribePattern=pattern, startingOffsets="earliest")
    sink = run_available_now(live, checkpoint(workdir))
    assert sink.rows == sorted(rows_x + rows_y)
    z, rows_z = filled(client, 1, 7, prefix)  # created after the query started
    more = produce(client, x, 0, [b"later"])
    run_available_now(live, checkpoint(workdir), sink)
    later = [(x, 0, more[0], b"later")]
    assert sink.rows == sorted(rows_x + rows_y + rows_z + later), "new topic read from earliest"
    assert z.startswith(prefix)


def test_assign_reads_only_the_listed_partitions(
    spark: Any, server: ReplogCluster, client: Client, workdir: Path
) -> None:
    topic, expected = filled(client, 3, 15)
    wanted = [r for r in expected if r[1] in (0, 2)]
    assign = json.dumps({topic: [0, 2]})
    assert rows(reader(spark, server, assign=assign)) == wanted
    live = stream(spark, server, assign=assign, startingOffsets="earliest")
    assert run_available_now(live, checkpoint(workdir)).rows == wanted
    with pytest.raises(Exception, match="has 3 partitions, no partition 5"):
        reader(spark, server, assign=json.dumps({topic: [5]})).collect()


# -- where to start and end ----------------------------------------------------------------------


def test_offsets_json_spans_topics_and_must_name_every_partition_the_query_reads(
    spark: Any, server: ReplogCluster, client: Client, workdir: Path
) -> None:
    a, rows_a = filled(client, 2, 40)
    b, rows_b = filled(client, 1, 30)
    a0 = [o for _, p, o, _ in rows_a if p == 0]
    b0 = [o for _, _, o, _ in rows_b]
    df = reader(
        spark,
        server,
        subscribe=f"{a},{b}",
        startingOffsets=json.dumps({a: {"0": a0[5], "1": -2}, b: {"0": -2}}),
        endingOffsets=json.dumps({a: {"0": -1, "1": -1}, b: {"0": b0[10]}}),
    )
    want = [r for r in rows_a if r[1] == 1 or r[2] >= a0[5]] + [r for r in rows_b if r[2] < b0[10]]
    assert rows(df) == sorted(want)

    leaves_out_b = json.dumps({a: {"0": -1, "1": -1}})
    with pytest.raises(Exception, match=f"endingOffsets must name every partition.*{b}/0"):
        reader(spark, server, subscribe=f"{a},{b}", endingOffsets=leaves_out_b).collect()

    start = json.dumps({a: {"0": a0[30], "1": -1}, b: {"0": -2}})
    live = stream(spark, server, subscribe=f"{a},{b}", startingOffsets=start)
    got = run_available_now(live, checkpoint(workdir)).rows
    assert got == sorted([r for r in rows_a if r[1] == 0 and r[2] >= a0[30]] + rows_b)

    leaves_out_a1 = json.dumps({a: {"0": -2}, b: {"0": -2}})
    live = stream(spark, server, subscribe=f"{a},{b}", startingOffsets=leaves_out_a1)
    error = available_now_error(live, checkpoint(workdir, "other"))
    assert "startingOffsets must name every partition" in error and f"{a}/1" in error


def test_a_batch_cannot_start_at_latest_nor_end_at_earliest(
    spark: Any, server: ReplogCluster, client: Client
) -> None:
    topic, _ = filled(client, 1, 3)
    with pytest.raises(Exception, match="startingOffsets can't be latest"):
        reader(spark, server, subscribe=topic, startingOffsets="latest").collect()
    with pytest.raises(Exception, match="endingOffsets can't be earliest"):
        reader(spark, server, subscribe=topic, endingOffsets="earliest").collect()


def test_a_stream_starts_at_latest_by_default(
    spark: Any, server: ReplogCluster, client: Client, workdir: Path
) -> None:
    topic, _ = filled(client, 2, 25)
    sink = Batches()
    with running(stream(spark, server, subscribe=topic), checkpoint(workdir), sink) as query:
        wait_until(lambda: query.lastProgress, "the query planned its first trigger")
        new = produce(client, topic, 1, [b"new-%d" % i for i in range(5)])
        wait_until(lambda: len(sink.rows) >= 5, "the new records were read")
    assert sink.rows == [(topic, 1, o, b"new-%d" % i) for i, o in enumerate(new)]


@pytest.mark.parametrize("mode", ["batch", "stream"])
def test_offsets_by_time_start_and_end_at_the_first_record_that_recent(
    spark: Any, server: ReplogCluster, client: Client, workdir: Path, mode: str
) -> None:
    topic = new_topic(client, 2, format="envelope")
    base = 1_700_000_000_000
    for p in (0, 1):  # timestamps base + 0..19 s in partition 0, base + 100..119 s in 1
        items = [
            Record(b"%d-%d" % (p, i), timestamp_ms=base + (p * 100 + i) * 1000) for i in range(20)
        ]
        produce(client, topic, p, items)

    def values(rows: list[Any]) -> list[bytes]:
        return sorted(bytes(r.value) for r in rows)

    by_partition = json.dumps({topic: {"0": base + 15_000, "1": base + 110_000}})
    want = sorted([b"0-%d" % i for i in range(15, 20)] + [b"1-%d" % i for i in range(10, 20)])
    if mode == "batch":
        got = reader(spark, server, subscribe=topic, startingOffsetsByTimestamp=by_partition)
        assert values(got.collect()) == want
        same = reader(spark, server, subscribe=topic, startingTimestamp=str(base + 10_000))
        every = [b"0-%d" % i for i in range(10, 20)] + [b"1-%d" % i for i in range(20)]
        assert values(same.collect()) == sorted(every)
        ending = reader(spark, server, subscribe=topic, endingTimestamp=str(base + 5_000))
        assert values(ending.collect()) == [b"0-%d" % i for i in range(5)]
        with pytest.raises(Exception, match=r"no record of .* has a timestamp >="):
            far = reader(spark, server, subscribe=topic, startingTimestamp=str(base + 10**9))
            far.collect()
    else:
        live = stream(spark, server, subscribe=topic, startingOffsetsByTimestamp=by_partition)
        sink = run_available_now(live, checkpoint(workdir))
        assert values(sink.raw) == want
        live = stream(spark, server, subscribe=topic, endingTimestamp=str(base))
        error = available_now_error(live, checkpoint(workdir, "ending"))
        assert "endingTimestamp is not valid in streaming queries" in error


# -- how much per trigger and per task ---------------------------------------------------------


def test_max_offsets_per_trigger_caps_each_micro_batch_and_a_batch_query_ignores_it(
    spark: Any, server: ReplogCluster, client: Client, workdir: Path
) -> None:
    topic, expected = filled(client, 2, 500)
    assert reader(spark, server, subscribe=topic, maxOffsetsPerTrigger="300").count() == 1000
    live = stream(
        spark,
        server,
        subscribe=topic,
        startingOffsets="earliest",
        **{"maxOffsetsPerTrigger": "300"},
    )
    sink = run_available_now(live, checkpoint(workdir))
    assert sink.rows == expected
    assert max(sink.sizes()) <= 300 and len(sink.sizes()) >= 4


def test_min_offsets_per_trigger_holds_batches_back_until_enough_records_wait(
    spark: Any, server: ReplogCluster, client: Client, workdir: Path
) -> None:
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "100")
    topic, first = filled(client, 1, 300)
    sink = Batches()
    live = stream(spark, server, subscribe=topic, startingOffsets="earliest", **{
        "minOffsetsPerTrigger": "500", "maxTriggerDelay": "1h"
    })  # fmt: skip
    with running(live, checkpoint(workdir), sink) as query:
        # As in Kafka, the first trigger runs whatever is there.
        wait_until(lambda: sink.sizes() == [300], "the first micro-batch ran")
        few = produce(client, topic, 0, [b"few-%d" % i for i in range(100)])

        def seen_but_held() -> bool:
            progress = query.lastProgress or {}
            sources = progress.get("sources") or [{}]
            latest = sources[0].get("latestOffset")
            latest = json.loads(latest) if isinstance(latest, str) else latest
            return bool(latest) and latest[topic]["0"] == few[-1] + 1

        wait_until(seen_but_held, "a trigger saw the 100 new records")
        assert sink.sizes() == [300], "100 records < minOffsetsPerTrigger: no batch"
        rest = produce(client, topic, 0, [b"rest-%d" % i for i in range(450)])
        wait_until(lambda: len(sink.sizes()) >= 2, "550 records let a batch through")
    assert sink.sizes() == [300, 550]
    assert [o for _, _, o, _ in sink.rows] == [r[2] for r in first] + few + rest


def test_max_trigger_delay_lets_a_small_batch_through_after_waiting(
    spark: Any, server: ReplogCluster, client: Client, workdir: Path
) -> None:
    topic, first = filled(client, 1, 50)
    sink = Batches()
    live = stream(spark, server, subscribe=topic, startingOffsets="earliest", **{
        "minOffsetsPerTrigger": "1000000", "maxTriggerDelay": "2s"
    })  # fmt: skip
    with running(live, checkpoint(workdir), sink):
        wait_until(lambda: sink.sizes() == [50], "the first micro-batch ran")
        late = produce(client, topic, 0, [b"late-%d" % i for i in range(20)])
        wait_until(lambda: len(sink.sizes()) >= 2, "maxTriggerDelay let 20 records through")
    assert sink.sizes() == [50, 20]
    assert [o for _, _, o, _ in sink.rows] == [r[2] for r in first] + late


def test_min_partitions_and_max_records_per_partition_split_reads_into_tasks(
    spark: Any, server: ReplogCluster, client: Client, workdir: Path
) -> None:
    topic, expected = filled(client, 1, 1000)
    df = reader(spark, server, subscribe=topic, minPartitions="4")
    assert df.rdd.getNumPartitions() >= 4
    assert rows(df) == expected
    live = stream(spark, server, subscribe=topic, startingOffsets="earliest", minPartitions="4")
    sink = run_available_now(live, checkpoint(workdir, "min"))
    assert sink.rows == expected and sink.tasks[0] >= 4
    live = stream(
        spark, server, subscribe=topic, startingOffsets="earliest", maxRecordsPerPartition="300"
    )
    sink = run_available_now(live, checkpoint(workdir, "max"))
    assert sink.rows == expected and sink.tasks[0] == 4  # 1,000 offsets in ranges of <= 300


# -- what is not understood ---------------------------------------------------------------------


def test_unknown_options_are_rejected_naming_them(
    spark: Any, server: ReplogCluster, client: Client
) -> None:
    topic, _ = filled(client, 1, 1)

    def values() -> list[bytes | None]:
        # (the records, not the end offset: a leader change appends a record of its own)
        return list(client.fetch(topic, 0, 0, max_bytes=1 << 20).records.values)

    before = values()
    hint = r"unknown option 'maxofsetspertrigger' \(did you mean 'maxOffsetsPerTrigger'\?\)"
    with pytest.raises(Exception, match=hint):
        reader(spark, server, subscribe=topic, maxOfsetsPerTrigger="5").collect()
    with pytest.raises(Exception, match=hint):
        stream(spark, server, subscribe=topic, maxOfsetsPerTrigger="5")
    with pytest.raises(Exception, match=r"option 'kafka\.group\.id' is not supported"):
        stream(spark, server, subscribe=topic, **{"kafka.group.id": "g"})
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="unknown option 'partitionr'"):
        (
            df.write.format("replog")
            .options(**server.options)
            .option("topic", topic)
            .option("partitionr", "murmur2")
            .mode("append")
            .save()
        )
    with pytest.raises(Exception, match="option partitioner: partitioner is one of murmur2, crc32"):
        (
            df.write.format("replog")
            .options(**server.options)
            .option("topic", topic)
            .option("partitioner", "murmur")
            .mode("append")
            .save()
        )
    assert values() == before, "nothing written"
