"""A node's /metrics carries its process's health beside replog's own metrics (CPU seconds,
RSS, open and maximum fds, start time, GC collections) and the size of its data
directory's file system, so dashboards and alerts need no other exporter."""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration

CLOCK_SLACK_S = 2.0  # /proc's start time counts from a boot time rounded to the second


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float, Samples]:
    """A node's data directory, the time just before it started, and one scrape of it."""
    work = tmp_path_factory.mktemp("process-metrics")
    started_at = time.time()
    server = ServerProcess(work / "data", work).start()
    try:
        text = server.metrics()
    finally:
        server.kill()
    scraped = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    return work / "data", started_at, scraped


def test_a_node_exports_its_process_cpu_memory_fds_start_time_and_gc(
    node: tuple[Path, float, Samples],
) -> None:
    _, started_at, scraped = node
    value = {name: v for (name, labels), v in scraped.items() if not labels}
    assert started_at - CLOCK_SLACK_S <= value["process_start_time_seconds"] <= time.time()
    assert value["process_cpu_seconds_total"] > 0
    assert value["process_resident_memory_bytes"] > 10 * 2**20  # a Python process with grpc
    # the limit the node inherited from this test, and the files it holds below it
    assert value["process_max_fds"] == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert 3 <= value["process_open_fds"] < value["process_max_fds"]
    generations = {
        dict(labels)["generation"]
        for (name, labels) in scraped
        if name == "python_gc_collections_total"
    }
    assert generations == {"0", "1", "2"}
    assert any(name == "python_info" for name, _ in scraped)


def test_a_node_exports_the_size_of_its_data_directory_beside_the_free_bytes(
    node: tuple[Path, float, Samples],
) -> None:
    data_dir, _, scraped = node
    key = (("data_dir", os.path.abspath(data_dir)),)
    st = os.statvfs(data_dir)
    assert scraped[("replog_storage_size_bytes", key)] == st.f_blocks * st.f_frsize
    assert 0 < scraped[("replog_storage_free_bytes", key)] <= st.f_blocks * st.f_frsize
