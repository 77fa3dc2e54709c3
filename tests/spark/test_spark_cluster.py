"""Spark against a real 3-node replog cluster: only committed records, across failovers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.errors import ReplogError
from replog.spark.starting import start_query
from tests.integration.faults import ProxyMesh
from tests.integration.waiting import wait_until

PATIENT = RetryPolicy(attempts_max=1000, backoff_max_ms=500, deadline_ms=90_000)


@pytest.fixture(scope="module")
def cluster(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    mesh = ProxyMesh()
    c = DevCluster(
        tmp_path_factory.mktemp("cluster"),
        3,
        extra_args=["--flush", "always"],
        peer_address=mesh.route,
    )
    c.mesh = mesh  # type: ignore[attr-defined]
    c.start()
    yield c
    c.kill_all()
    mesh.close()


def leader_of(client: Client, topic: str, partition: int = 0) -> int:
    def known() -> int | None:
        try:
            leader = client.refresh_metadata([topic]).topics[0].partitions[partition].leader_id
        except ReplogError:
            return None
        return leader if leader > 0 else None

    return wait_until(known, "a leader is known")


def read(spark: Any, cluster: DevCluster, topic: str) -> list[tuple[int, int, bytes]]:
    df = (
        spark.read.format("replog")
        .option("bootstrap", cluster.bootstrap)
        .option("topic", topic)
        .load()
    )
    return sorted((r["partition"], r["offset"], bytes(r["value"])) for r in df.collect())


def test_records_the_majority_never_acknowledged_are_never_read(
    spark: Any, cluster: DevCluster
) -> None:
    mesh: ProxyMesh = cluster.mesh  # type: ignore[attr-defined]
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic("uncommitted", 1, 3)
        leader = leader_of(client, "uncommitted")
        committed = [b"committed-%d" % i for i in range(1000)]
        for i in range(0, 1000, 250):
            client.append("uncommitted", 0, committed[i : i + 250], acks="all")
        mesh.isolate(leader)  # its followers can no longer fetch: nothing new can commit
        # Not idempotent: a producer id needs the cluster's metadata quorum, out of reach.
        alone = Client(
            cluster.members[leader].address, retry=RetryPolicy(attempts_max=1), idempotent=False
        )
        with alone:
            alone.append("uncommitted", 0, [b"never-committed"] * 200, acks="leader")
        assert all(v.startswith(b"committed-") for _, _, v in read(spark, cluster, "uncommitted"))
        assert [v for _, _, v in read(spark, cluster, "uncommitted")] == committed
        mesh.heal()  # the old leader's uncommitted tail is truncated when it rejoins
        client.append("uncommitted", 0, [b"after the heal"], acks="all")
        got = [v for _, _, v in read(spark, cluster, "uncommitted")]
        assert got == [*committed, b"after the heal"]


def test_a_stream_survives_a_leader_failover_without_gaps_or_duplicates(
    spark: Any, cluster: DevCluster, tmp_path: Path
) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    with Client(cluster.bootstrap, retry=PATIENT) as client:
        client.create_topic("failover", 2, 3)
        for p in (0, 1):
            for i in range(0, 3000, 500):
                client.append("failover", p, [b"%d-%d" % (p, n) for n in range(i, i + 500)])
        writer = (
            spark.readStream.format("replog")
            .option("bootstrap", cluster.bootstrap)
            .option("topic", "failover")
            .option("startingOffsets", "earliest")
            .option("maxRecordsPerTrigger", "1000")
            .load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds")
        )
        # Under load Spark may not start the source's Python process within its fixed
        # 10 s: `start_query` starts the query again then (replog.spark.starting).
        query = start_query(writer.start)
        victim: int | None = None
        try:
            commits = checkpoint / "commits"

            def two_committed() -> bool | None:
                assert query.exception() is None, query.exception()  # fail now, saying why
                return (commits.exists() and len(list(commits.glob("[0-9]*"))) >= 2) or None

            wait_until(two_committed, "two micro-batches committed", deadline_s=180)
            victim = leader_of(client, "failover", 0)
            cluster.members[victim].kill()
            for p in (0, 1):
                more = [b"%d-%d" % (p, n) for n in range(3000, 4000)]
                client.append("failover", p, more, acks="all")
            ends = {o.partition: o.latest for o in client.list_offsets("failover")}

            def caught_up() -> bool | None:
                assert query.exception() is None, query.exception()
                progress = query.lastProgress
                if not progress:
                    return None
                end = progress["sources"][0]["endOffset"]
                end = json.loads(end) if isinstance(end, str) else end
                done = end and all(int(end["failover"][str(p)]) >= ends[p] for p in ends)
                return bool(done) or None

            wait_until(caught_up, "the stream read everything", deadline_s=240)
        finally:
            query.stop()
            if victim is not None:
                cluster.members[victim].start()
        got = sorted(
            (r["partition"], bytes(r["value"])) for r in spark.read.parquet(str(out)).collect()
        )
        expected = sorted((p, b"%d-%d" % (p, n)) for p in (0, 1) for n in range(4000))
        assert got == expected, "every record exactly once across the failover"
