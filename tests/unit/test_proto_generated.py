"""The committed generated code in replog/v1 matches what proto/ generates today."""

from __future__ import annotations

import filecmp
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]


def test_generated_modules_are_not_stale_against_proto(tmp_path: Path) -> None:
    protos = sorted(str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto").rglob("*.proto"))
    assert protos, "no .proto files found"
    args = [
        "protoc",
        f"-I{ROOT / 'proto'}",
        f"--python_out={tmp_path}",
        f"--pyi_out={tmp_path}",
        f"--grpc_python_out={tmp_path}",
        *protos,
    ]
    assert protoc.main(args) == 0
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    committed = sorted(
        p.relative_to(ROOT)
        for p in (ROOT / "replog" / "v1").rglob("*")
        if p.is_file() and p.name != "__init__.py" and "__pycache__" not in p.parts
    )
    assert generated == committed, "run `make proto` and commit replog/v1"
    stale = [str(p) for p in generated if not filecmp.cmp(tmp_path / p, ROOT / p, shallow=False)]
    assert not stale, f"stale generated files (run `make proto`): {stale}"
