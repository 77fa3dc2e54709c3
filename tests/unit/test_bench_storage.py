"""bench/storage.py on a tiny size: its output lines and its docs section (no timing checks)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
NAMES = {
    "append_batch",
    "append_single",
    "read_sequential",
    "read_random",
    "append_flush_always_1thread",
}
WITH_CEILING = {"append_batch", "read_sequential"}


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH_DIR))  # for `from _common import ...`
    spec = importlib.util.spec_from_file_location("bench_storage", BENCH_DIR / "storage.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_storage", module)
    spec.loader.exec_module(module)
    return module


def run_tiny(bench: ModuleType, tmp_path: Path, *extra: str, repeats: int = 1) -> int:
    return int(
        bench.main(["--records", "2000", "--repeats", str(repeats), "--dir", str(tmp_path), *extra])
    )


def test_every_output_line_is_a_json_result_with_the_four_fields(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_tiny(bench, tmp_path, repeats=2) == 0  # both orders of engine and ceiling
    lines = capsys.readouterr().out.splitlines()
    parsed = [json.loads(line) for line in lines]
    for obj in parsed:
        assert set(obj) == {"bench", "value", "unit", "ceiling"}
        assert isinstance(obj["bench"], str)
        assert isinstance(obj["value"], int | float) and obj["value"] > 0
        assert isinstance(obj["unit"], str) and obj["unit"]
        assert obj["ceiling"] is None or isinstance(obj["ceiling"], int | float)
    by_name = {obj["bench"]: obj for obj in parsed}
    assert set(by_name) >= NAMES
    for name in NAMES:
        assert by_name[name]["unit"] == "records/s"
        assert (by_name[name]["ceiling"] is not None) == (name in WITH_CEILING)
    assert by_name["read_random_p99_ms"]["unit"] == "ms"


def test_the_scratch_directory_is_removed_afterwards(bench: ModuleType, tmp_path: Path) -> None:
    run_tiny(bench, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_write_docs_replaces_only_the_storage_section(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "benchmarks.md"
    e2e = "## End to end (bench/e2e.py)\n\nSomeone else's numbers.\n"
    docs.write_text(f"# Benchmarks\n\n## Storage (bench/storage.py)\n\nold numbers\n\n{e2e}")
    work = tmp_path / "work"
    work.mkdir()

    run_tiny(bench, work, "--write-docs", "--docs", str(docs))

    text = docs.read_text()
    assert text.startswith("# Benchmarks\n")
    assert "old numbers" not in text
    assert text.count("## Storage (bench/storage.py)") == 1
    assert text.endswith(e2e)
    assert "| `append_batch` |" in text and "| `read_sequential` |" in text
    assert "PASS" in text or "MISS" in text
    capsys.readouterr()


def test_a_missing_section_is_appended_after_the_others(bench: ModuleType) -> None:
    common = sys.modules["_common"]
    other = "# Benchmarks\n\n## End to end (bench/e2e.py)\n\nkept\n"
    text = common.replace_section(other, "## Storage (bench/storage.py)", "new")
    assert text == other + "\n## Storage (bench/storage.py)\n\nnew\n"
    again = common.replace_section(text, "## Storage (bench/storage.py)", "newer")
    assert again == other + "\n## Storage (bench/storage.py)\n\nnewer\n"
