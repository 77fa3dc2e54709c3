"""The ready pipeline (`python -m replog.spark.pipeline`) is exactly once across a SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from replog.client import Client
from tests.spark.replog_cluster import ReplogCluster

DEADLINE_S = 240.0


def pipeline(
    server: ReplogCluster, topic: str, workdir: Path, *extra: str
) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    log = (workdir / "pipeline.log").open("ab")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "replog.spark.pipeline",
            "--bootstrap",
            server.address,
            "--topic",
            topic,
            "--output",
            str(workdir / "out"),
            "--checkpoint",
            str(workdir / "checkpoint"),
            *server.tls_args(),
            *extra,
        ],
        stdout=log,
        stderr=log,
        env=env,
        start_new_session=True,  # its JVM shares the group, so one killpg ends the whole driver
    )


def committed_batches(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.exists() else 0


def test_a_killed_driver_resumes_from_its_checkpoint_exactly_once(
    spark: Any, server: ReplogCluster, workdir: Path
) -> None:
    expected: list[tuple[int, int, bytes]] = []
    with Client(server.address, tls=server.tls) as client:
        client.create_topic("pipeline", 2)
        for p in (0, 1):
            for i in range(0, 3000, 500):
                values = [b"%d-%d" % (p, n) for n in range(i, i + 500)]
                res = client.append("pipeline", p, values)
                offsets = range(res.base_offset, res.last_offset + 1)
                expected += ((p, o, v) for o, v in zip(offsets, values, strict=True))
    first = pipeline(
        server, "pipeline", workdir, "--max-records-per-trigger", "400", "--interval-ms", "100"
    )
    deadline = time.monotonic() + DEADLINE_S
    while committed_batches(workdir / "checkpoint") < 2:
        assert first.poll() is None, (workdir / "pipeline.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "no micro-batch committed in time"
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(60)
    done_before = committed_batches(workdir / "checkpoint")
    assert 2 <= done_before < 15, "the kill landed mid-stream"

    second = pipeline(server, "pipeline", workdir, "--available-now")
    assert second.wait(DEADLINE_S) == 0, (workdir / "pipeline.log").read_text()[-3000:]

    out = spark.read.parquet(str(workdir / "out"))
    got = sorted((r["partition"], r["offset"], bytes(r["value"])) for r in out.collect())
    assert got == sorted(expected), "every record exactly once"
