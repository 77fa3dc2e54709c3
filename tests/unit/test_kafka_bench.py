"""bench/kafka_codec.py on a tiny time budget: one JSON line per case (no timing checks)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
CASES = {
    "produce_request_decode": "requests/s",
    "metadata_response_encode": "responses/s",
    "batch_decode_records": "records/s",
    "batch_decode_lz4_records": "records/s",
    "batch_encode_records": "records/s",
}


def test_the_codec_bench_prints_one_line_per_case_with_kafka_python_beside_ours(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    spec = importlib.util.spec_from_file_location("bench_kafka_codec", BENCH_DIR / "kafka_codec.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_kafka_codec", module)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "RUNS", 1)
    monkeypatch.setattr(sys, "argv", ["kafka_codec.py", "--seconds", "0.001"])
    module.main()
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {line["bench"]: line["unit"] for line in lines} == CASES
    assert all(line["value"] > 0 for line in lines)
    with_ceiling = {line["bench"] for line in lines if line["ceiling"] is not None}
    assert with_ceiling == {
        "produce_request_decode",
        "metadata_response_encode",
        "batch_decode_records",
    }
