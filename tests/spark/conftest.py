"""The Spark layer: one SparkSession for the whole run, real 3-node replog clusters in
subprocesses.

Spark starts before any gRPC activity in this process (a measured pitfall: starting a
SparkSession after gRPC use once failed with JAVA_GATEWAY_EXITED).
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
    for item in items:
        if "tests/spark" in str(item.fspath):
            item.add_marker(pytest.mark.spark)


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
