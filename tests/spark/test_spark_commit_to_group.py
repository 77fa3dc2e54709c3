"""`commitToGroup`: a streaming query commits each micro-batch's end offsets to a consumer
group, so the group tools show its position and lag; across a coordinator SIGKILL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replog.client import Client, RetryPolicy
from replog.errors import ReplogError
from tests.integration.waiting import wait_until
from tests.spark.helpers import Batches, produce, reader, run_available_now, stream
from tests.spark.replog_cluster import ReplogCluster

PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=90_000)


@pytest.fixture
def client(server: ReplogCluster) -> Iterator[Client]:
    with Client(server.address, tls=server.tls, retry=PATIENT) as c:
        yield c


def committed(client: Client, group: str) -> dict[int, tuple[int, str, int]]:
    """partition -> (committed offset, metadata, lag), from `describe_group`."""
    return {
        p.partition: (p.committed_offset, p.metadata, p.lag)
        for p in client.describe_group(group).partitions
    }


def ends(client: Client, topic: str) -> dict[int, int]:
    return {o.partition: o.latest for o in client.list_offsets(topic)}


def test_a_stream_commits_its_progress_to_the_group_and_the_group_shows_its_lag(
    spark: Any, server: ReplogCluster, client: Client, tmp_path: Path
) -> None:
    """Spark tells a source that a micro-batch is done when it plans the next one: the group
    holds the end of every batch but the query's last (a running query: one trigger
    behind)."""
    topic, group = "to-group", "spark-to-group"
    client.create_topic(topic, 2, 3)
    for p in (0, 1):
        produce(client, topic, p, [b"%d-%d" % (p, i) for i in range(1000)])
    checkpoint = str(tmp_path / "checkpoint")

    def run() -> Batches:
        live = stream(
            spark,
            server,
            subscribe=topic,
            startingOffsets="earliest",
            maxOffsetsPerTrigger="600",
            commitToGroup=group,
        )
        return run_available_now(live, checkpoint)

    first = run()
    assert len(first.rows) == 2000 and len(first.batches) >= 3
    end = ends(client, topic)
    got = committed(client, group)
    for p in (0, 1):
        before_last = max(o for _, q, o, _ in first.batches[-2] if q == p)
        in_last = min(o for _, q, o, _ in first.batches[-1] if q == p)
        offset, metadata, lag = got[p]
        assert before_last < offset <= in_last, "the end of the last-but-one batch"
        assert metadata == "spark query" and lag == end[p] - offset > 0

    coordinator = client.describe_group(group).coordinator_id
    server.cluster.members[coordinator].kill()
    try:
        for p in (0, 1):
            produce(client, topic, p, [b"more-%d" % i for i in range(300)])
        second = run()
        assert len(second.rows) == 600, "the query resumed from its checkpoint"
        now = ends(client, topic)

        seen: list[object] = []

        def first_run_committed() -> bool | None:
            try:
                got = committed(client, group)
            except ReplogError as exc:
                seen.append(exc)
                return None  # a new coordinator is being elected
            seen.append(got)
            # At least the first run's whole progress (its last batch, committed when the
            # second run planned its first), at most what the second run read.
            return (
                all(
                    end[p] <= got[p][0] <= now[p] and got[p][1] == "spark query" and got[p][2] >= 0
                    for p in (0, 1)
                )
                or None
            )

        try:
            wait_until(first_run_committed, "the new coordinator shows the commits", deadline_s=60)
        except AssertionError:
            raise AssertionError(f"end {end}, now {now}, last seen {seen[-3:]}") from None
    finally:
        server.cluster.members[coordinator].start()


def test_commit_to_group_is_for_streams_only(spark: Any, server: ReplogCluster) -> None:
    with pytest.raises(Exception, match="option commitToGroup is for streaming queries"):
        reader(spark, server, subscribe="to-group", commitToGroup="g").collect()
