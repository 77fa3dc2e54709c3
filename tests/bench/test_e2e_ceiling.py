"""bench/e2e.py's do-nothing ceiling server answers the same client calls as replog: the
default idempotent client's appends over AppendStream and the `streaming=False` client's
unary Appends both get consecutive offsets, and a topic's format is asked once (no timing
checks: the bench measures, this only checks that the ceiling is a fair stand-in)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from replog.client import Client, RetryPolicy

pytestmark = [pytest.mark.integration]

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def e2e(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH_DIR))  # bench/ imports its siblings by name
    return importlib.import_module("e2e")


@pytest.fixture
def ceiling(e2e: ModuleType, tmp_path: Path) -> Iterator[str]:
    """The ceiling server as the bench starts it: its own process on 127.0.0.1."""
    ready = tmp_path / "ready"
    proc = e2e.Proc([sys.executable, e2e.__file__, "--ceiling-server", str(ready)], ready)
    try:
        yield proc.address
    finally:
        proc.stop()
    assert proc.proc.returncode == 0  # it stopped on SIGTERM, not by a crash


@pytest.mark.parametrize("streaming", [True, False])
def test_the_ceiling_answers_pipelined_and_unary_appends_with_consecutive_offsets(
    ceiling: str, streaming: bool
) -> None:
    with Client(ceiling, retry=RetryPolicy(attempts_max=1), streaming=streaming) as client:
        assert client.topic_format("t") == "raw"
        producer = client.producer("t", acks="leader", partitions=2)
        futures = [producer.send_batch([b"x" * 100] * 10, i % 2) for i in range(20)]
        results = [f.result(timeout=30) for f in futures]
        producer.close()
        assert all(r.last_offset - r.base_offset == 9 for r in results)
        bases = sorted(r.base_offset for r in results)
        assert bases == list(range(0, 200, 10))
        single = client.append("t", 0, [b"y"], acks="leader")
        assert single.base_offset == single.last_offset == 200
