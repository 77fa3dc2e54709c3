from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.devcluster import DevCluster
from tests.integration.servers import ServerProcess

_names = itertools.count()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for a whole module (tests use their own topics); small record limit."""
    work = tmp_path_factory.mktemp("server")
    server = ServerProcess(work / "data", work, ["--record-bytes-max", "4096"]).start()
    yield server
    server.kill()


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start servers on one data dir (restart = `.start()` again); all killed at the end."""
    started: list[ServerProcess] = []

    def make(*args: str) -> ServerProcess:
        server = ServerProcess(tmp_path / "data", tmp_path, list(args))
        started.append(server)
        return server

    yield make
    for server in started:
        server.kill()


@pytest.fixture
def client(shared_server: ServerProcess) -> Iterator[Client]:
    """A plain (non-idempotent) client: these tests check the offset arithmetic of the raw
    Log API, where a batch of n records takes exactly n offsets. Idempotent appends (one
    more offset per batch, for its header) are tested in test_idempotent_producer.py and
    through `idempotent_client`."""
    retry = RetryPolicy(attempts_max=3)
    with Client(shared_server.address, timeout_s=30, retry=retry, idempotent=False) as c:
        yield c


@pytest.fixture
def idempotent_client(shared_server: ServerProcess) -> Iterator[Client]:
    with Client(shared_server.address, timeout_s=30, retry=RetryPolicy(attempts_max=3)) as c:
        yield c


@pytest.fixture
def topic(client: Client, request: pytest.FixtureRequest) -> str:
    """A fresh single-partition topic named after the test."""
    name = f"t{next(_names)}-{request.node.name[:80]}".replace("[", "-").replace("]", "")
    client.create_topic(name, 1)
    return name


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    """Three `replog serve` processes on 127.0.0.1 with the durable default flush=always,
    killed at the end (a module defines its own `cluster` when it needs other settings)."""
    c = DevCluster(tmp_path / "cluster", 3, extra_args=["--flush", "always"])
    c.start()
    yield c
    c.kill_all()
