"""failOnDataLoss, as in Kafka's source: offsets that retention deleted stop a query (naming the
option) unless failOnDataLoss=false, which continues from the log start with a warning.

The cluster here keeps little: tiny segments and a per-partition retention limit, so that
producing a few hundred records moves a partition's log start past what a query asked for.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replog.client import Client
from replog.errors import OffsetOutOfRangeError
from replog.spark import offsets as off
from replog.spark.reading import ReplogPartition, read_partition
from tests.integration.waiting import wait_until
from tests.spark.helpers import (
    Batches,
    available_now_error,
    new_topic,
    produce,
    reader,
    rows,
    run_available_now,
    stream,
)
from tests.spark.replog_cluster import ReplogCluster, running_cluster

RETENTION = [
    "--flush", "never",
    "--segment-bytes-max", "4096",
    "--retention-bytes", "16384",
    "--retention-check-interval-ms", "100",
]  # fmt: skip


@pytest.fixture(scope="module")
def retained(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplogCluster]:
    yield from running_cluster(tmp_path_factory, 1, extra_args=RETENTION)


@pytest.fixture
def client(retained: ReplogCluster) -> Iterator[Client]:
    with Client(retained.address, tls=retained.tls) as c:
        yield c


def value(i: int) -> bytes:
    return b"%06d-" % i + b"x" * 94


def log_start(client: Client, topic: str) -> int:
    (o,) = client.list_offsets(topic)
    return o.earliest


def push_log_start_past(client: Client, topic: str, offset: int) -> list[int]:
    """Produce until retention deleted `offset`; the offsets of the records produced."""
    produced: list[int] = []

    def deleted() -> bool:
        if log_start(client, topic) > offset:
            return True
        assert len(produced) < 5000, "retention never moved the log start"
        more = [value(10_000 + len(produced) + i) for i in range(100)]
        produced.extend(produce(client, topic, 0, more))
        return False

    wait_until(deleted, f"retention deleted offset {offset}")
    return produced


def assert_read_from_the_log_start(
    got: list[int], produced: list[int], before: int, after: int
) -> None:
    """`got` holds every record produced from the log start on, the log start being somewhere
    in `[before, after]` (retention may still run while the query reads). Offsets of data
    records are not dense: control records (leader epochs, producer batches) sit between."""
    assert got, "nothing read"
    assert got == [o for o in produced if o >= got[0]], "a gap or a duplicate"
    assert got[0] >= before, "a deleted record was read"
    skipped = [o for o in produced if o < got[0]]
    assert not skipped or skipped[-1] < after, f"records kept by retention were skipped: {got[0]}"


def test_a_batch_from_deleted_offsets_fails_naming_the_option_or_reads_from_the_log_start(
    spark: Any, retained: ReplogCluster, client: Client
) -> None:
    topic = new_topic(client, 1)
    first = produce(client, topic, 0, [value(i) for i in range(50)])
    produced = first + push_log_start_past(client, topic, first[0])
    start = json.dumps({topic: {"0": first[0]}})
    with pytest.raises(Exception, match="failOnDataLoss=false to continue from the log start"):
        reader(spark, retained, subscribe=topic, startingOffsets=start).collect()
    before = log_start(client, topic)
    lenient = reader(
        spark, retained, subscribe=topic, startingOffsets=start, failOnDataLoss="false"
    )
    got = [o for _, _, o, _ in rows(lenient)]
    assert_read_from_the_log_start(got, produced, before, log_start(client, topic))


def test_a_stream_resuming_below_the_log_start_fails_unless_fail_on_data_loss_is_false(
    spark: Any, retained: ReplogCluster, client: Client, workdir: Path
) -> None:
    topic = new_topic(client, 1)
    first = produce(client, topic, 0, [value(i) for i in range(50)])
    checkpoint = str(workdir / "checkpoint")
    live = stream(spark, retained, subscribe=topic, startingOffsets="earliest")
    sink = run_available_now(live, checkpoint)
    assert [o for _, _, o, _ in sink.rows] == first
    # The query is down while retention deletes past where its checkpoint stands.
    produced = push_log_start_past(client, topic, first[-1] + 1)

    error = available_now_error(live, checkpoint)
    assert "was deleted by retention" in error and "failOnDataLoss=false" in error

    lenient = stream(
        spark, retained, subscribe=topic, startingOffsets="earliest", failOnDataLoss="false"
    )
    before = log_start(client, topic)
    resumed = run_available_now(lenient, checkpoint, Batches())
    got = [o for _, _, o, _ in resumed.rows]
    assert_read_from_the_log_start(got, produced, before, log_start(client, topic))


def test_a_task_whose_range_retention_deleted_after_planning_obeys_fail_on_data_loss(
    retained: ReplogCluster, client: Client
) -> None:
    # The executor side, run here: the range was planned, then retention moved the log start.
    topic = new_topic(client, 1)
    first = produce(client, topic, 0, [value(i) for i in range(50)])
    produced = push_log_start_past(client, topic, first[0])
    end = produced[-1] + 1

    def task(fail_on_data_loss: bool) -> ReplogPartition:
        return ReplogPartition(
            retained.address,
            off.OffsetRange(topic, 0, first[0], end),
            1024 * 1024,
            fail_on_data_loss=fail_on_data_loss,
        )

    with pytest.raises(OffsetOutOfRangeError, match="failOnDataLoss=true"):
        list(read_partition(task(True)))
    before = log_start(client, topic)
    batches = list(read_partition(task(False)))
    got = [o for b in batches for o in b.column("offset").to_pylist()]
    assert_read_from_the_log_start(got, first + produced, before, log_start(client, topic))
