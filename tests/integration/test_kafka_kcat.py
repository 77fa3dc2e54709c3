"""`kcat` (Debian's, librdkafka inside; `make test` installs it through
scripts/ensure-command.sh) against a real node's Kafka listener: metadata (-L), produce
with keys (-P -K), consume from the beginning, an absolute offset, a relative one and a
time (-o s@ts), and the offset of a time (-Q); records written through gRPC read through
kcat at the same offsets, keys and timestamps."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.devcluster import free_port
from replog.records import Record
from tests.integration.servers import ServerProcess

pytestmark = [pytest.mark.integration]

T0 = 1_700_000_000_000
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def kcat() -> str:
    found = shutil.which("kcat")
    if found is None:
        pytest.fail(
            "kcat is not installed: `bash scripts/ensure-command.sh kcat kcat kafkacat` "
            "(make test does) installs Debian's",
            pytrace=False,
        )
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root: Path = tmp_path_factory.mktemp("kcat")
    address = f"127.0.0.1:{free_port()}"
    s = ServerProcess(root / "data", root, ["--kafka-listen", address])
    s.start()
    s.kafka = address  # type: ignore[attr-defined]
    yield s
    assert s.terminate() == 0


def run(kcat: str, server: ServerProcess, *args: str, stdin: bytes | None = None) -> str:
    cmd = [kcat, "-b", str(server.kafka), "-X", "socket.timeout.ms=30000", *args]  # type: ignore[attr-defined]
    done = subprocess.run(cmd, input=stdin, capture_output=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode()


def consume(kcat: str, server: ServerProcess, topic: str, offset: str) -> list[list[str]]:
    out = run(kcat, server, "-C", "-t", topic, "-p", "0", "-o", offset, "-e", "-f", "%o %k %s %T\n")
    return [line.split(" ") for line in out.splitlines()]


def test_kcat_lists_produces_and_consumes_from_offsets_and_times(
    kcat: str, server: ServerProcess
) -> None:
    with Client(server.address, retry=RetryPolicy(attempts_max=20)) as client:
        client.create_topic("kcat", 2, format="envelope")
        rows = [Record(b"g%d" % i, b"key%d" % i, [], T0 + 1000 * i) for i in range(10)]
        base = client.append("kcat", 0, rows, acks="all").base_offset

        meta = json.loads(run(kcat, server, "-L", "-J", "-t", "kcat"))
        (topic,) = meta["topics"]
        assert topic["topic"] == "kcat" and len(topic["partitions"]) == 2
        assert [b["name"] for b in meta["brokers"]] == [str(server.kafka)]  # type: ignore[attr-defined]
        assert {p["leader"] for p in topic["partitions"]} == {meta["brokers"][0]["id"]}

        got = consume(kcat, server, "kcat", "beginning")
        assert got == [[str(base + i), f"key{i}", f"g{i}", str(T0 + 1000 * i)] for i in range(10)]
        assert [r[0] for r in consume(kcat, server, "kcat", str(base + 7))] == [
            str(base + i) for i in (7, 8, 9)
        ]
        assert [r[2] for r in consume(kcat, server, "kcat", "-2")] == ["g8", "g9"]
        # from a time: the first record at or after it (ListOffsets by timestamp)
        assert [r[2] for r in consume(kcat, server, "kcat", f"s@{T0 + 6500}")] == [
            "g7", "g8", "g9"
        ]  # fmt: skip
        query = run(kcat, server, "-Q", "-t", f"kcat:0:{T0 + 3000}")
        assert f"offset {base + 3}" in query

        # produced through kcat (keys with -K): read back through gRPC, same keys and values
        lines = b"".join(b"pk%d:pv%d\n" % (i, i) for i in range(5))
        run(kcat, server, "-P", "-t", "kcat", "-p", "1", "-K", ":", stdin=lines)
        offset, records = 0, []
        while len(records) < 5:
            batch = client.fetch("kcat", 1, offset, max_wait_ms=500)
            records += batch.records.records()  # type: ignore[union-attr]
            offset = batch.next_offset
        assert [(r.key, r.value) for r in records] == [(b"pk%d" % i, b"pv%d" % i) for i in range(5)]
