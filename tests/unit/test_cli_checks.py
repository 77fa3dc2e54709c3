"""Small CLI checks (issue 33): a bad flag value is one line and exit 2, not a traceback;
`replog verify` is quiet on healthy data and warns when a process has the directory open."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from replog import cli
from tests.unit.test_storage_checksums import write_template


def test_a_bad_log_level_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.run(["serve", "--log-level", "loud", "--data-dir", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [
        "replog: invalid settings: log_level must be one of "
        "critical|error|warning|info|debug, got 'loud'"
    ]


def test_a_bad_flag_value_is_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.run(["consume", "orders", "--count", "many"])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("replog consume: error: argument --count")
    assert line.endswith("(see replog consume --help)")


def test_verify_prints_only_the_summary_on_a_cleanly_closed_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_template(tmp_path).close()
    assert cli.run(["verify", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    (summary,) = captured.out.splitlines()
    assert summary.endswith(": OK") and captured.err == ""


def test_verify_is_quiet_about_the_active_segments_pre_sized_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_template(tmp_path)  # open: every index still pre-sized
    try:
        assert cli.run(["verify", str(tmp_path)]) == 0
    finally:
        log.close()
    out = capsys.readouterr().out.splitlines()
    assert not [line for line in out if line.startswith("INFO")]
    assert len(out) <= 2 and out[-1].endswith(": OK")  # at most a count of padded indexes


def test_verify_warns_when_another_process_has_the_data_dir_open(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_template(tmp_path).close()
    held = next(tmp_path.rglob("*.log"))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"f = open({str(held)!r}, 'rb'); print('open', flush=True); input()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"open\n"
        assert cli.run(["verify", str(tmp_path)]) == 0
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert f"in use by a running process (pid {holder.pid})" in err
