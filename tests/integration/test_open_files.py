"""A node under a low RLIMIT_NOFILE (256) hosts far more partitions than it could keep open
(4 descriptors per segment): it opens them lazily, keeps a bounded number of files open,
refuses a create past `--partitions-max` with a typed, retriable error, and always starts
again, with every partition readable and writable."""

from __future__ import annotations

from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.errors import TooManyPartitionsError
from tests.integration.low_nofile_serve import NOFILE_LIMIT
from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration

TOPICS = 3
PARTITIONS = 100  # 300 partitions: 1,200 descriptors if all were open at once
PATIENT = RetryPolicy(attempts_max=200, backoff_max_ms=200, deadline_ms=60_000)


def open_descriptors(server: ServerProcess) -> int:
    assert server.proc is not None
    return len(list(Path(f"/proc/{server.proc.pid}/fd").iterdir()))


def write_and_read_everything(client: Client, round_: int) -> None:
    for t in range(TOPICS):
        for p in range(PARTITIONS):
            value = b"t%d-p%d-round%d" % (t, p, round_)
            res = client.append(f"many{t}", p, [value])
            got = client.fetch(f"many{t}", p, res.base_offset)
            assert got.records.values[:1] == [value]


def test_a_node_with_256_descriptors_hosts_300_partitions_and_restarts(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "data",
        tmp_path,
        ["--partitions-max", "350"],
        module=__package__ + ".low_nofile_serve",
    )
    server.start()
    try:
        with Client(server.address, timeout_s=30, retry=PATIENT) as client:
            for t in range(TOPICS):
                client.create_topic(f"many{t}", PARTITIONS)
            write_and_read_everything(client, 0)
            assert open_descriptors(server) < NOFILE_LIMIT
            with pytest.raises(TooManyPartitionsError) as refused:
                client.create_topic("one-too-many", PARTITIONS)
            assert refused.value.retriable and refused.value.limit == "partitions_max"
            assert "one-too-many" not in client.list_topics()
        assert server.terminate() == 0
        server.start()  # it always starts again
        with Client(server.address, timeout_s=30, retry=PATIENT) as client:
            assert client.list_topics() == {f"many{t}": PARTITIONS for t in range(TOPICS)}
            write_and_read_everything(client, 1)
            for t in range(TOPICS):  # both rounds' records are there
                for p in (0, PARTITIONS - 1):
                    values = client.fetch(f"many{t}", p, 0).records.values
                    assert values == [b"t%d-p%d-round%d" % (t, p, r) for r in (0, 1)]
            assert open_descriptors(server) < NOFILE_LIMIT
        assert "Too many open files" not in server.log_text()
    finally:
        server.kill()
