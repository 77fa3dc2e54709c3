"""The exactly-once sink against a 3-node cluster: a Spark task that fails after writing part
of its rows is retried by Spark, a node is SIGKILLed during the write, a batch write is run
again with its sinkId: every row is in the topic exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from replog.client import Client, RetryPolicy
from replog.errors import ReplogError
from replog.spark.starting import start_query
from replog.tls import ClientTls
from tests.integration.waiting import wait_until
from tests.spark.helpers import QUERY_DEADLINE_S, new_topic, produce, reader, stream
from tests.spark.replog_cluster import ReplogCluster

PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=90_000)
WAIT_FOR_WRITES_S = 60


@pytest.fixture
def client(server: ReplogCluster) -> Iterator[Client]:
    with Client(server.address, tls=server.tls, retry=PATIENT) as c:
        yield c


@pytest.fixture
def small_arrow_batches(spark: Any) -> Iterator[None]:
    """Rows reach the sink's Python worker in Arrow batches: small ones, so that a task has
    written part of its rows when the failing UDF stops it."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, "100")
    yield
    spark.conf.set(key, before)


def records_in(address: str, tls: ClientTls | None, topic: str) -> int:
    """Offsets used in `topic` (control records included): grows as the sink writes."""
    with Client(address, tls=tls) as c:
        return sum(o.latest for o in c.list_offsets(topic))


# Leader changes add one control record each (a first election, the balancer handing a
# partition to its preferred replica): "the sink has written" is more offsets than a few of
# those could make, and fewer than one batch (a header and at least 20 records) adds.
CONTROL_SLACK = 10


def led(server: ReplogCluster, topic: str) -> int:
    """`records_in(topic)` once each partition has its leader's first control record: what
    the topic holds before anything is written (a batch adds more than one offset)."""
    with Client(server.address, tls=server.tls) as c:
        wait_until(
            lambda: all(o.latest >= 1 for o in c.list_offsets(topic)) or None,
            "every partition has a leader",
        )
    return records_in(server.address, server.tls, topic)


def failing_first_attempt(
    server: ReplogCluster, watched: str, marker: Path, after_rows: int
) -> Callable[[Any], Any]:
    """A UDF (identity on the value) that, in the first attempt of task 0, once `after_rows`
    rows went through, waits until the sink has written to `watched`, notes how much in
    `marker`, and raises: Spark retries the task, which writes all its rows again."""
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    seen = {"rows": 0}
    address, tls = server.address, server.tls  # plain values: the UDF is pickled
    empty = led(server, watched)

    def passthrough(value: str) -> str:
        context = TaskContext.get()
        if context is not None and context.partitionId() == 0 and context.attemptNumber() == 0:
            seen["rows"] += 1
            if seen["rows"] == after_rows:
                deadline = time.monotonic() + WAIT_FOR_WRITES_S
                written = records_in(address, tls, watched)
                while written <= empty + CONTROL_SLACK and time.monotonic() < deadline:
                    time.sleep(0.05)
                    written = records_in(address, tls, watched)
                marker.write_text(str(written - empty))
                raise RuntimeError("injected failure of the task's first attempt")
        return value

    return udf(passthrough, "string")  # type: ignore[no-any-return]


def values_in(spark: Any, server: ReplogCluster, topic: str) -> Counter[str]:
    return Counter(
        bytes(r["value"]).decode() for r in reader(spark, server, subscribe=topic).collect()
    )


def test_a_retried_batch_task_and_a_rerun_write_each_row_once(
    spark: Any, server: ReplogCluster, client: Client, tmp_path: Path, small_arrow_batches: None
) -> None:
    out = new_topic(client, 2)
    marker = tmp_path / "written-before-the-failure"
    fail = failing_first_attempt(server, out, marker, after_rows=1500)
    df = (
        spark.range(0, 4000, 1, 2)
        .selectExpr("CAST(id AS STRING) AS key", "CONCAT('row-', id) AS value")
        .withColumn("value", fail("value"))
    )

    def write(frame: Any) -> None:
        frame.write.format("replog").options(**server.options).option("topic", out).option(
            "sinkId", f"load-{out}"
        ).option("maxRecordsPerAppend", "20").mode("append").save()

    write(df)
    assert int(marker.read_text()) > 20, "the failed attempt had written part of its rows"
    expected = Counter(f"row-{i}" for i in range(4000))
    assert values_in(spark, server, out) == expected, "every row once, none twice"
    # The driver lost (the job's outcome unknown): the same write run again adds nothing.
    write(
        spark.range(0, 4000, 1, 2).selectExpr(
            "CAST(id AS STRING) AS key", "CONCAT('row-', id) AS value"
        )
    )
    assert values_in(spark, server, out) == expected, "a rerun with the same sinkId adds nothing"


def leader_of(client: Client, topic: str, partition: int) -> int:
    def known() -> int | None:
        try:
            meta = client.refresh_metadata([topic])
            leader = meta.topics[0].partitions[partition].leader_id
        except ReplogError:
            return None
        return leader if leader > 0 else None

    return wait_until(known, "a leader is known")


def test_a_stream_writes_each_row_once_across_a_task_retry_and_a_killed_leader(
    spark: Any, server: ReplogCluster, client: Client, tmp_path: Path, small_arrow_batches: None
) -> None:
    source = new_topic(client, 2)
    out = f"eo-out-{source}"
    client.create_topic(out, 2, 3)
    for p in (0, 1):
        produce(client, source, p, [b"%d-%d" % (p, i) for i in range(3000)])
    marker = tmp_path / "written-before-the-failure"
    fail = failing_first_attempt(server, out, marker, after_rows=2000)
    victim = leader_of(client, out, 1)
    killed, done = threading.Event(), threading.Event()
    empty = led(server, out)

    def kill_when_writing() -> None:
        deadline = time.monotonic() + QUERY_DEADLINE_S
        while time.monotonic() < deadline and not done.is_set():
            if records_in(server.address, server.tls, out) > empty + CONTROL_SLACK:
                server.cluster.members[victim].kill()
                killed.set()
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_when_writing, daemon=True)
    killer.start()
    writer = (
        stream(spark, server, subscribe=source, startingOffsets="earliest")
        .selectExpr("CAST(value AS STRING) AS value")
        .withColumn("value", fail("value"))
        .writeStream.format("replog")
        .options(**server.options)
        .option("topic", out)
        .option("maxRecordsPerAppend", "25")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
    )
    query = start_query(writer.start)
    try:
        assert query.awaitTermination(QUERY_DEADLINE_S), "the query did not finish"
        assert query.exception() is None, query.exception()
    finally:
        done.set()
        killer.join(30)
        server.cluster.members[victim].start()
    assert killed.is_set(), "the leader was killed during the write"
    assert int(marker.read_text()) > 20, "the failed attempt had written part of its rows"
    expected = Counter(f"{p}-{i}" for p in (0, 1) for i in range(3000))
    got = values_in(spark, server, out)
    assert sum(got.values()) == 6000 and got == expected, "every row once, none twice"


def test_exactly_once_options_are_checked(
    spark: Any, server: ReplogCluster, client: Client
) -> None:
    topic = new_topic(client, 1)
    empty = led(server, topic)
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="exactlyOnce in a batch write needs option sinkId"):
        df.write.format("replog").options(**server.options).option("topic", topic).option(
            "exactlyOnce", "true"
        ).mode("append").save()
    with pytest.raises(Exception, match=r"kafka.acks=0 \(none\) appends are never deduplicated"):
        df.write.format("replog").options(**server.options).option("topic", topic).option(
            "sinkId", "x"
        ).option("kafka.acks", "0").mode("append").save()
    assert records_in(server.address, server.tls, topic) == empty, "nothing written"


DRIVER = """
import json, os, sys
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession
from replog.spark import register
from replog.spark.starting import start_query
options, source, out, checkpoint = json.loads(sys.argv[1]), *sys.argv[2:5]
spark = (
    SparkSession.builder.master("local[2]").appName("replog-eo-driver")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    .getOrCreate()
)
register(spark)
writer = (
    spark.readStream.format("replog").options(**options).option("subscribe", source)
    .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "1000").load()
    .selectExpr("value")
    .writeStream.format("replog").options(**options).option("topic", out)
    .option("maxRecordsPerAppend", "10").option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
)
query = start_query(writer.start)
query.awaitTermination()
sys.exit(1 if query.exception() else 0)
"""


def driver(server: ReplogCluster, source: str, out: str, workdir: Path) -> subprocess.Popen[bytes]:
    script = workdir / "driver.py"
    script.write_text(DRIVER)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    log = (workdir / "driver.log").open("ab")
    args = [json.dumps(server.options), source, out, str(workdir / "checkpoint")]
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=log,
        stderr=log,
        env=env,
        start_new_session=True,  # its JVM shares the group: one killpg ends the whole driver
    )


def batch_files(checkpoint: Path, log: str) -> int:
    d = checkpoint / log
    return len([p for p in d.iterdir() if p.name.isdigit()]) if d.exists() else 0


def test_a_driver_killed_mid_write_and_rerun_from_its_checkpoint_writes_each_row_once(
    spark: Any, server: ReplogCluster, client: Client, tmp_path: Path
) -> None:
    source = new_topic(client, 2)
    out = new_topic(client, 2)
    for p in (0, 1):
        produce(client, source, p, [b"%d-%d" % (p, i) for i in range(3000)])
    empty = led(server, out)
    checkpoint = tmp_path / "checkpoint"
    first = driver(server, source, out, tmp_path)
    deadline = time.monotonic() + QUERY_DEADLINE_S
    while True:  # kill it while a micro-batch is planned, not committed, and half written
        assert first.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the driver wrote nothing in time"
        planned, done = batch_files(checkpoint, "offsets"), batch_files(checkpoint, "commits")
        if planned > done and records_in(server.address, server.tls, out) > empty + 500:
            break
        time.sleep(0.02)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(60)
    assert batch_files(checkpoint, "offsets") > batch_files(checkpoint, "commits"), (
        "the kill landed inside a micro-batch"
    )
    second = driver(server, source, out, tmp_path)
    assert second.wait(QUERY_DEADLINE_S) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    expected = Counter(f"{p}-{i}" for p in (0, 1) for i in range(3000))
    assert values_in(spark, server, out) == expected, "every row once, none twice"
