"""Container tests: the real image (`make image`) run by testcontainers on the local engine.

Facts of these machines (docs: shared design note on containers): no registry and no Ryuk,
so every container is labelled and removed by label before and after the run; containers
use host networking and each node binds its own loopback address (127.0.0.11, ...).
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

IMAGE = os.environ.get("REPLOG_IMAGE", "replog:dev")
LABEL = "dev.replog.test"
REPO = Path(__file__).resolve().parents[2]

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/containers" in str(item.fspath):
            item.add_marker(pytest.mark.containers)


def remove_labelled() -> None:
    ids = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={LABEL}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=True)


@pytest.fixture(scope="session")
def image() -> Iterator[str]:
    """The app image, built (idempotently) by the same script as `make image`."""
    subprocess.run(["bash", str(REPO / "scripts" / "build-image.sh")], check=True, cwd=REPO)
    remove_labelled()
    yield IMAGE
    remove_labelled()


def free_port(host: str) -> int:
    return free_ports(host, 1)[0]


def free_ports(host: str, count: int) -> list[int]:
    """`count` distinct free ports on `host` (all held open until all are chosen)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()
