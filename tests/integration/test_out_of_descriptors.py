"""File descriptors are a budget, not a crash (issue 25).

A node under RLIMIT_NOFILE 128 hosts more partitions than it can keep open; idle
connections then take every descriptor it has left. A request that needs a file it cannot
open sheds idle segments of other logs and tries again; if none can be shed it answers
RESOURCE_EXHAUSTED TOO_MANY_OPEN_FILES (retriable), counted in
`replog_storage_errors{reason="TOO_MANY_OPEN_FILES"}`; no replica rebuilds its state or
holds an election (every partition's leader epoch stays where it was), and once the
connections go, every partition takes appends again with every acknowledged record there.
"""

from __future__ import annotations

import contextlib
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.errors import ReplogError, TooManyOpenFilesError
from tests.integration.low_nofile_serve import LIMIT_ENV
from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration

LIMIT = 128
PARTITIONS = 40  # 160 descriptors if every log were open at once
ONCE = RetryPolicy(attempts_max=1)
PATIENT = RetryPolicy(attempts_max=400, backoff_max_ms=200, deadline_ms=60_000)


def epochs(server: ServerProcess) -> dict[str, float]:
    out = {}
    for line in server.metrics().splitlines():
        if line.startswith("replog_replica_epoch{") and 'topic="many"' in line:
            partition = re.search(r'partition="(\d+)"', line)
            assert partition is not None
            out[partition.group(1)] = float(line.rsplit(" ", 1)[1])
    return out


def counter(server: ServerProcess, name: str, reason: str) -> float:
    for line in server.metrics().splitlines():
        if line.startswith(name) and f'reason="{reason}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@contextlib.contextmanager
def idle_connections(address: str, count: int) -> Iterator[list[socket.socket]]:
    """`count` TCP connections that never speak: the server holds a descriptor for each."""
    host, port = address.rsplit(":", 1)
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            socks.append(socket.create_connection((host, int(port)), timeout=5))
        yield socks
    finally:
        for s in socks:
            s.close()


def wait_for_descriptors(server: ServerProcess, count: int, timeout_s: float = 30.0) -> None:
    assert server.proc is not None
    fd_dir = Path(f"/proc/{server.proc.pid}/fd")
    deadline = time.monotonic() + timeout_s
    while len(list(fd_dir.iterdir())) < count:
        assert time.monotonic() < deadline, "the node never ran out of descriptors"
        time.sleep(0.02)


def reachable_client(server: ServerProcess, timeout_s: float = 90.0) -> Client:
    """A patient client that has had an answer from the node: once the listener has drained
    the connections left behind. A client's first contact fails fast on a connection the node
    accepts but does not answer (`ConnectFailedError`); after it, such a failure is retried."""
    deadline = time.monotonic() + timeout_s
    while True:
        client = Client(server.address, timeout_s=30, retry=PATIENT)
        try:
            client.list_topics()
            return client
        except ReplogError:
            client.close()
            assert time.monotonic() < deadline, "the node does not answer again"


def test_running_out_of_descriptors_is_a_typed_error_without_elections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LIMIT_ENV, str(LIMIT))
    server = ServerProcess(
        tmp_path / "data",
        tmp_path,
        ["--partitions-max", "100"],
        module=__package__ + ".low_nofile_serve",
    ).start()
    acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    try:
        with Client(server.address, timeout_s=30, retry=PATIENT) as client:
            client.create_topic("many", PARTITIONS)
            for p in range(PARTITIONS):
                client.append("many", p, [b"first-%d" % p])
                acked[p].append(b"first-%d" % p)
            before = epochs(server)
            assert len(before) == PARTITIONS
        with Client(server.address, timeout_s=10, retry=ONCE) as client:
            client.list_topics()  # connected before the descriptors run out
            refused = 0
            with idle_connections(server.address, 2 * LIMIT):
                wait_for_descriptors(server, LIMIT - 4)  # it accepted all it could
                for round_ in range(3):
                    for p in range(PARTITIONS):
                        value = b"starved-%d-%d" % (round_, p)
                        try:
                            client.append("many", p, [value])
                        except TooManyOpenFilesError as err:
                            assert err.code == "RESOURCE_EXHAUSTED" and err.retriable
                            refused += 1
                        else:
                            acked[p].append(value)
            # Since issue 27 a node out of descriptors first closes the idle segments of other
            # logs (closing one needs no checkpoint file), so an append is served when any
            # segment can be shed, and refused with the typed error above only when none can.
            print(f"refused with TOO_MANY_OPEN_FILES: {refused} of {3 * PARTITIONS}")
        if refused:
            assert counter(server, "replog_storage_errors", "TOO_MANY_OPEN_FILES") > 0
        assert server.proc is not None and server.proc.poll() is None
        # The listener drains the connections left behind; then everything works again.
        with reachable_client(server) as client:
            for p in range(PARTITIONS):  # descriptors are free again: everything works
                client.append("many", p, [b"after-%d" % p])
                acked[p].append(b"after-%d" % p)
            for p in range(PARTITIONS):
                got = client.fetch("many", p, 0, max_bytes=1 << 20).records.values
                assert got == acked[p], p
        assert epochs(server) == before, "a replica held an election"
        text = server.log_text()
        assert "owner task died" not in text and "server.failed" not in text
        assert "rebuilding its state" not in text
    finally:
        server.kill()
