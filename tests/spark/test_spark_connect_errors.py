"""A Spark read of an address where no replog listens, or of a TLS cluster without `tls.ca`,
fails fast with the likely cause (issue 25 item 6), batch and streaming: it took 120 s and
more, and said "Socket closed". The bound asserted (30 s, Spark's own overhead included)
guards against that without flaking; the client's own target is 5 s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from replog.devcluster import free_port
from replog.spark.starting import start_query
from tests.spark.replog_cluster import ReplogCluster, running_cluster

BOUND_S = 30.0


@pytest.fixture(scope="module")
def tls_node(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplogCluster]:
    yield from running_cluster(tmp_path_factory, 1, tls=True)


def failure(run: Any) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(Exception) as caught:  # Spark wraps the Python error in its own
        run()
    return str(caught.value), time.monotonic() - started


def test_a_batch_read_of_a_wrong_address_names_it(spark: Any) -> None:
    dead = f"127.0.0.1:{free_port()}"
    reader = spark.read.format("replog").option("kafka.bootstrap.servers", dead)
    text, took = failure(lambda: reader.option("subscribe", "t").load().collect())
    assert "CONNECT_FAILED" in text or "ConnectFailedError" in text, text
    assert f"nothing listens on {dead}" in text, text
    assert took < BOUND_S, took


def test_a_stream_of_a_wrong_address_fails_and_names_it(spark: Any) -> None:
    dead = f"127.0.0.1:{free_port()}"
    stream = (
        spark.readStream.format("replog")
        .option("kafka.bootstrap.servers", dead)
        .option("subscribe", "t")
        .load()
    )

    def run() -> None:
        query = start_query(stream.writeStream.format("noop").start)
        try:
            assert query.awaitTermination(120), "the query kept running"
        finally:
            query.stop()

    text, took = failure(run)
    assert f"nothing listens on {dead}" in text, text
    assert took < BOUND_S, took


def test_a_read_of_a_tls_cluster_without_tls_ca_says_so(
    spark: Any, tls_node: ReplogCluster
) -> None:
    reader = spark.read.format("replog").option("kafka.bootstrap.servers", tls_node.address)
    text, took = failure(lambda: reader.option("subscribe", "t").load().collect())
    assert "the server speaks TLS: pass --tls-ca / REPLOG_TLS_CA" in text, text
    assert "tls.ca" in text, text
    assert took < BOUND_S, took
