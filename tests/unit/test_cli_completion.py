"""`replog completion bash|zsh`: a script bash accepts that completes commands and choices."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from replog.cli import run

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert run(["completion", shell]) == 0
    return capsys.readouterr().out


def complete(script_path: Path, line: str) -> list[str]:
    """What bash offers for `line` (the cursor at its end), via the registered function."""
    driver = (
        f"source {script_path}\n"
        'func=$(complete -p replog | sed -E "s/.*-F ([^ ]+) .*/\\1/")\n'
        'read -ra COMP_WORDS <<<"$LINE"\n'
        '[[ "$LINE" == *" " ]] && COMP_WORDS+=("")\n'
        "COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n"
        '"$func"\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", driver],
        env={"LINE": line, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.split()


@pytest.fixture
def bash_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "replog.bash"
    path.write_text(script("bash", capsys))
    return path


def test_the_bash_script_is_valid_bash_and_registers_a_completion_for_replog(
    bash_script: Path,
) -> None:
    subprocess.run(["bash", "-n", str(bash_script)], check=True, timeout=30)
    registered = subprocess.run(
        ["bash", "--norc", "-c", f"source {bash_script}; complete -p replog"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert registered.stdout.startswith("complete -F ")


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        (
            "replog ",
            [
                "serve",
                "topic",
                "produce",
                "consume",
                "partition",
                "offsets",
                "group",
                "node",
                "console",
                "dev-cluster",
                "acl",
                "quota",
                "token",
                "certs",
                "verify",
                "whoami",
                "completion",
            ],
        ),
        ("replog to", ["topic", "token"]),
        ("replog topic ", ["create", "list", "describe", "delete", "configs", "alter"]),
        ("replog topic de", ["describe", "delete"]),
        ("replog completion ", ["bash", "zsh"]),
        ("replog partition ", ["reassign", "transfer-leader"]),
        ("replog group ", ["list", "describe", "reset-offsets", "delete"]),
        ("replog node ", ["list", "add", "remove", "decommission"]),
        ("replog offsets orders -o ", ["text", "json"]),
        ("replog consume orders --format ", ["text", "hex", "json"]),
        ("replog produce orders --acks ", ["none", "leader", "all"]),
    ],
)
def test_bash_completes_subcommands_and_choices(
    bash_script: Path, line: str, offered: list[str]
) -> None:
    assert sorted(complete(bash_script, line)) == sorted(offered)


def test_bash_completes_the_options_of_the_command_being_typed(bash_script: Path) -> None:
    options = complete(bash_script, "replog topic describe orders --")
    assert {"--output", "--address", "--timeout", "--help"} <= set(options)
    assert "--partitions" not in options  # belongs to `topic create`
    assert {"--progress", "--until-latest"} <= set(complete(bash_script, "replog consume t --"))


def test_the_zsh_script_reuses_the_bash_completion_through_bashcompinit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = script("zsh", capsys)
    assert "bashcompinit" in text
    assert "complete -F _replog replog" in text
