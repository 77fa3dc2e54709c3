"""The Spark layer: one SparkSession for the whole run, real 3-node replog clusters in
subprocesses.

Spark starts before any gRPC activity in this process: its tests run first in a whole run
(`pytest_collection_modifyitems` below). Starting the SparkSession after gRPC use forks the
JVM's launcher from a process with gRPC's threads, and that fails now and then with
JAVA_GATEWAY_EXITED (the child logs gRPC's "epoll_wait error: Bad file descriptor"): every
Spark test of a CI run errored that way once, after the integration tests had run first.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.replog_cluster import ReplogCluster, running_cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    spark = []
    for item in items:
        if "tests/spark" in str(item.fspath):
            item.add_marker(pytest.mark.spark)
            spark.append(item)
    if spark:  # first: the JVM starts before any gRPC thread exists in this process
        chosen = set(map(id, spark))
        items[:] = spark + [item for item in items if id(item) not in chosen]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        # local[2, 2]: a failed task is retried once, as on a cluster (plain local[2] never
        # retries): the exactly-once sink's tests fail a task's first attempt on purpose.
        SparkSession.builder.master("local[2,2]")
        .appName("replog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    from replog.spark import register

    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def server(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplogCluster]:
    # TLS on, with mutual TLS between the nodes and a client certificate for Spark.
    yield from running_cluster(tmp_path_factory, 3, tls=True)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
