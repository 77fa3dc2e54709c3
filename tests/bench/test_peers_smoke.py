"""bench/peers.py on tiny counts: every workload runs on every system, the servers it starts
are stopped, and --write-docs rewrites only its marked part of the docs (no timing checks).

The peers (nats-server, redis-server, nats-py, redis) come from scripts/install-peers.sh and
`make test`; without them the peers' test is skipped, except on CI (CI set), where it fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
TINY = ["--repeats", "1", "--records", "2000", "--replicated-records", "2000"]
THROUGHPUT = ["produce_1", "consume_1", "produce_3"]
LATENCY = ["latency_1_p50", "latency_1_p99", "latency_3_p50", "latency_3_p99"]
CPU = ["produce_1_cpu", "consume_1_cpu", "produce_3_cpu", "latency_1_cpu", "latency_3_cpu"]


def peers_installed() -> bool:
    binaries = all(shutil.which(b) for b in ("nats-server", "redis-server"))
    clients = all(importlib.util.find_spec(m) for m in ("nats", "redis"))
    return binaries and clients


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH_DIR))  # bench/ imports its siblings by name
    return importlib.import_module("peers")


@pytest.fixture
def started_pids(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pids of every server process the harness starts."""
    pids: list[int] = []
    make = bench.make_target

    def recording(system: str, work: Path, nodes: int) -> object:
        target = make(system, work, nodes)
        pids.extend(target.pids())
        return target

    monkeypatch.setattr(bench, "make_target", recording)
    return pids


def results(out: str) -> dict[str, dict[str, object]]:
    parsed = [json.loads(line) for line in out.splitlines()]
    for obj in parsed:
        assert set(obj) == {"bench", "value", "unit", "ceiling"}
    return {str(obj["bench"]): obj for obj in parsed}


def assert_measured(got: dict[str, dict[str, object]], system: str) -> None:
    for metric in THROUGHPUT:
        assert got[f"{metric}_{system}"]["unit"] == "records/s"
        assert float(got[f"{metric}_{system}"]["value"]) > 0  # type: ignore[arg-type]
    for metric in LATENCY:
        assert got[f"{metric}_{system}"]["unit"] == "ms"
        assert float(got[f"{metric}_{system}"]["value"]) > 0  # type: ignore[arg-type]
    for metric in CPU:
        assert float(got[f"{metric}_{system}"]["value"]) >= 0  # type: ignore[arg-type]


def assert_stopped(pids: list[int]) -> None:
    assert pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # reaped: the pid no longer exists


def test_replog_alone_runs_every_workload_and_writes_its_docs_section(
    bench: ModuleType,
    started_pids: list[int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = tmp_path / "benchmarks.md"
    others = "# Benchmarks\n\n## Storage (bench/storage.py)\n\nSomeone else's numbers.\n"
    docs.write_text(others)
    work = tmp_path / "work"
    work.mkdir()
    argv = [*TINY, "--latency-samples", "10", "--systems", "replog", "--dir", str(work)]

    assert bench.main([*argv, "--write-docs", "--docs", str(docs)]) == 0

    got = results(capsys.readouterr().out)
    assert_measured(got, "replog")
    assert float(got["producer_1_replog"]["value"]) > 0  # type: ignore[arg-type]
    assert_stopped(started_pids)  # a replog node, then a cluster of 3
    assert len(started_pids) == 4
    assert list(work.iterdir()) == []  # the scratch directory is gone
    text = docs.read_text()
    assert text.startswith(others)
    assert text.count(bench.BEGIN) == text.count(bench.END) == 1
    assert "| produce, 1 node, batches of 1000 | records/s |" in text
    assert "## Peers (bench/peers.py)" in text

    docs.write_text(text.replace(others, others + "\n## Later section\n\nkept\n"))
    assert bench.main([*argv, "--nodes", "1", "--write-docs", "--docs", str(docs)]) == 0
    again = docs.read_text()
    assert again.count("## Peers (bench/peers.py)") == 1
    assert "## Later section\n\nkept\n" in again
    assert "produce, 3 nodes" not in again  # the marked part was rewritten, not appended


def test_the_peers_run_the_same_workloads_beside_replog(
    bench: ModuleType,
    started_pids: list[int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if not peers_installed():
        if os.environ.get("CI"):
            pytest.fail("nats-server, redis-server or their clients missing on CI")
        pytest.skip("peers not installed: bash scripts/install-peers.sh")

    assert bench.main([*TINY, "--latency-samples", "20", "--dir", str(tmp_path)]) == 0

    captured = capsys.readouterr()
    got = results(captured.out)
    for system in ("replog", "NATS", "Redis"):
        assert_measured(got, system)
    assert "producer_1_NATS" not in got  # the batching Producer is replog's alone
    # 1 + 3 processes for each system: replog, NATS, Redis
    assert_stopped(started_pids)
    assert len(started_pids) == 12
    assert "| bench | unit | replog | NATS | Redis | replog / NATS | replog / Redis |" in (
        captured.err
    )


def test_the_marked_part_is_replaced_in_place(bench: ModuleType) -> None:
    text = f"# Benchmarks\n\n## Peers (bench/peers.py)\n\n{bench.BEGIN}\nold\n{bench.END}\n\n## B\n"
    assert bench.replace_marked(text, "new\n") == text.replace("\nold\n", "\nnew\n")
    assert bench.replace_marked("", "x") == (
        f"# Benchmarks\n\n## Peers (bench/peers.py)\n\n{bench.BEGIN}\nx\n{bench.END}\n"
    )
