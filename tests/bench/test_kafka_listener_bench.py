"""bench/kafka_listener.py on tiny counts: it starts its node, runs each case through
librdkafka and through replog's client, prints one JSON line per case with replog's figure
as the ceiling, and stops its node (no timing checks; --no-write keeps the docs as they are).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_the_kafka_listener_bench_prints_each_case_beside_the_replog_client() -> None:
    bench = str(ROOT / "bench" / "kafka_listener.py")
    args = [sys.executable, bench, "--records", "300", "--runs", "1", "--no-write"]
    out = subprocess.run(args, capture_output=True, check=True, timeout=300, cwd=ROOT)
    lines = [json.loads(line) for line in out.stdout.decode().splitlines()]
    assert {line["bench"]: line["unit"] for line in lines} == {
        "kafka_produce": "records/s",
        "kafka_produce_one_in_flight": "records/s",
        "kafka_produce_pipelined": "records/s",
        "kafka_produce_3_partitions": "records/s",
        "kafka_consume": "records/s",
        "kafka_latency": "ms",
    }
    assert all(line["value"] > 0 and line["ceiling"] > 0 for line in lines)
