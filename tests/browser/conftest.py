"""Fixtures of the browser tests: a real 3-node cluster over TLS (DevCluster), the console
as its own process, headless Chromium, and a client of the cluster. One of each per
module (a cluster and a browser take seconds to start)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from replog.server.edge.auth import hash_token
from tests.browser.harness import ConsoleProcess, chrome

OPERATOR_TOKEN = "operator-token-0123456789"  # signs in to the console (no ACLs here)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    work = tmp_path_factory.mktemp("cluster")
    tokens = work / "tokens"
    tokens.write_text(f"User:operator {hash_token(OPERATOR_TOKEN)}\n")
    c = DevCluster(work, 3, tls=True, extra_args=["--token-file", str(tokens)]).start()
    yield c
    c.kill_all()


@pytest.fixture(scope="module")
def console(
    cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleProcess]:
    # 1 KiB fetches: a search of many records takes many steps (progress and cancel)
    extra = ["--search-fetch-kib", "1"]
    proc = ConsoleProcess(cluster, tmp_path_factory.mktemp("console"), extra_args=extra).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    driver = chrome()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def client(cluster: DevCluster) -> Iterator[Client]:
    retry = RetryPolicy(deadline_ms=60_000, attempts_max=100)
    with Client(cluster.bootstrap, tls=cluster.client_tls, retry=retry, timeout_s=10) as c:
        yield c
