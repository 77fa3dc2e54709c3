"""The README's quick start and docs/api.md's Python example run as written.

A fenced block right after a line `<!-- tested: tests/integration/test_quickstart_docs.py`
is run by this module. The README's marked blocks make one terminal session, in order: the
shell blocks verbatim, each Python block as `python FILE` (the `python` on the PATH), in a
bash run with `-e -o pipefail` in an empty directory, with the venv's bin directory first
on the PATH (the README's reader has run `. .venv/bin/activate`). The session starts a
`replog dev-cluster` in the background and its last block stops it. Every process the
session started is tracked by pid while it runs (bash's descendants, from /proc): none may
be left once it ends; after a failure the leftovers are stopped by those pids, SIGTERM
first (a dev-cluster stops its nodes), SIGKILL after a generous deadline.

docs/api.md's Python example runs against a 1-node dev-cluster (TLS, ACLs) that this
module starts, with the variables its `Client.from_env()` reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from replog.devcluster import DevCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- tested: tests/integration/test_quickstart_docs.py"
SESSION_TIMEOUT_S = 600.0  # a loaded 2-core machine: the README session takes ~1 min there
STOP_TIMEOUT_S = 90.0
FENCE = re.compile(r"^```(\w+)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    language: str  # "sh" or "python"
    code: str


def marked_blocks(path: Path) -> list[Block]:
    """The fenced blocks that follow a marker line, in order."""
    text = path.read_text()
    blocks = []
    for part in text.split(MARKER)[1:]:
        after_marker = part.split("\n", 1)[1]
        m = FENCE.match(after_marker)
        assert m, f"{path.name}: a marker not followed by a fenced block:\n{part[:300]}"
        assert m[1] in ("sh", "python"), f"{path.name}: a marked block in {m[1]!r}"
        blocks.append(Block(m[1], m[2]))
    return blocks


def session_env() -> dict[str, str]:
    """The reader's shell: the venv first on the PATH, this checkout's replog, no REPLOG_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLOG_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"  # output in the order it happened
    return env


# -- processes, by pid ---------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) of `pid`, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(fields[1]), fields[0], int(fields[19])


def descendants(root: int) -> set[tuple[int, int]]:
    """(pid, start time) of every live descendant of `root`."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            children.setdefault(st[0], []).append(int(entry.name))
    found: set[tuple[int, int]] = set()
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if (st := _stat(pid)) is not None:
            found.add((pid, st[2]))
            todo.extend(children.get(pid, []))
    return found


def running(seen: set[tuple[int, int]]) -> list[int]:
    """The pids of `seen` that still run (same start time: not a reused pid; not a zombie)."""
    return [
        pid
        for pid, start in seen
        if (st := _stat(pid)) is not None and st[2] == start and st[1] != "Z"
    ]


def _signal_and_wait(pids: list[int], sig: int, seen: set[tuple[int, int]]) -> bool:
    """`sig` to `pids`; wait until nothing of `seen` runs (True) or the deadline passes.
    What they start meanwhile (a dev-cluster restarting a node) joins `seen`."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while (left := running(seen)) and time.monotonic() < deadline:
        for pid in left:
            seen |= descendants(pid)
        time.sleep(0.2)
    return not running(seen)


def stop_leftovers(seen: set[tuple[int, int]]) -> None:
    """Stop what a failed session left running: the top-most processes first (a dev-cluster
    stops its own nodes), then any left; SIGTERM, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = running(seen)
        for pid in left:
            seen |= descendants(pid)
        tops = [pid for pid in left if (st := _stat(pid)) is not None and st[0] not in left]
        if _signal_and_wait(tops, sig, seen) or _signal_and_wait(running(seen), sig, seen):
            return


@dataclass
class Session:
    code: int
    output: str
    leftover: list[int]


def run_session(script: str, workdir: Path) -> Session:
    """`script` in bash, in `workdir`; bash's descendants tracked while it runs."""
    (workdir / "session.sh").write_text(script)
    log = workdir / "session.log"
    seen: set[tuple[int, int]] = set()
    with log.open("wb") as out:
        # Output to a file, not a pipe: a background process left behind by a failure
        # would hold a pipe open.
        proc = subprocess.Popen(
            ["bash", "-e", "-o", "pipefail", "session.sh"],
            cwd=workdir,
            env=session_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + SESSION_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline:
            seen |= descendants(proc.pid)
            time.sleep(0.1)
        if proc.poll() is None:
            seen |= descendants(proc.pid)
            proc.kill()
        code = proc.wait(30)
        leftover = running(seen)
    finally:
        stop_leftovers(seen)
    return Session(code, log.read_text(errors="replace"), leftover)


# -- the README ----------------------------------------------------------------------------


def readme_session(workdir: Path) -> str:
    """The README's marked blocks as one bash script (Python blocks as files it runs)."""
    parts = []
    for i, block in enumerate(marked_blocks(ROOT / "README.md")):
        if block.language == "python":
            name = f"quickstart_{i}.py"
            (workdir / name).write_text(block.code)
            parts.append(f"python {name}\n")
        else:
            parts.append(block.code)
    return "".join(parts)


def test_the_readme_quick_start_runs_as_written_and_prints_what_it_says(tmp_path: Path) -> None:
    blocks = marked_blocks(ROOT / "README.md")
    assert [b.language for b in blocks] == ["sh", "python", "sh"]
    assert "replog dev-cluster" in blocks[0].code and "kill %1" in blocks[2].code
    session = run_session(readme_session(tmp_path), tmp_path)
    out = session.output
    assert session.code == 0, out
    assert session.leftover == [], f"still running after the session: {session.leftover}"
    assert not (tmp_path / "dev.env").exists(), "the stopped dev-cluster removed its env file"
    lines = out.splitlines()

    # The cluster: 3 nodes, TLS with the operator's certificate, its env file.
    assert sum(1 for line in lines if re.match(r"node \d: 127\.0\.0\.1:\d+  pid \d+", line)) == 3
    assert "TLS and ACLs on" in out and "REPLOG_TLS_CERT=" in out
    # The shell: 10,000 lines produced over 3 partitions, 5 consumed as '%p %o %s'.
    assert "created topic orders with 3 partition(s)" in out
    assert "produced 10000 records to orders" in out
    consumed = [line for line in lines if re.fullmatch(r"[0-2] \d+ \d+", line)]
    assert len(consumed) == 5, out
    assert {int(line.split()[2]) for line in consumed} <= set(range(1, 10001))
    (event,) = [json.loads(line) for line in lines if line.startswith('{"partition"')]
    assert (event["value"], event["key"]) == ("hello", "customer-42")
    assert event["headers"] == [{"name": "trace", "value": "abc"}]
    # topic describe: 3 partitions, each with 3 replicas; offsets: 3 partitions.
    described = [line.split("\t") for line in lines if re.match(r"[0-2]\t\d+\t\d+\t[\d,]+\t", line)]
    assert sorted(row[0] for row in described) == ["0", "1", "2"], out
    assert all(len(row[3].split(",")) == 3 for row in described)
    offsets = [line.split("\t") for line in lines if re.fullmatch(r"[0-2]\t\d+\t\d+\t\d+", line)]
    assert sum(int(row[2]) for row in offsets) >= 10_000
    # Python: the two appended values, the keyed record that ends the loop, then the
    # record with key, timestamp and headers.
    python_lines = [line for line in lines if re.match(r"\d+ (None|b')", line)]
    assert [line.split(" ", 1)[1] for line in python_lines[:3]] == [
        "None b'a'",
        "None b'b'",
        "b'customer-42' b'paid'",
    ], out
    assert re.fullmatch(r"\d+ b'k' b'v' \d{13} \(\('trace', b'1'\),\)", python_lines[3]), out
    assert len(python_lines) == 4, out


# -- docs/api.md ---------------------------------------------------------------------------


def test_the_api_docs_python_example_runs_against_a_tls_cluster_with_acls(tmp_path: Path) -> None:
    (block,) = marked_blocks(ROOT / "docs" / "api.md")
    assert block.language == "python" and "Client.from_env()" in block.code
    script = tmp_path / "api_example.py"
    script.write_text(block.code)
    with DevCluster(tmp_path / "dev", 1, tls=True, acl=True) as cluster:
        env = {**session_env(), **cluster.client_env()}
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=SESSION_TIMEOUT_S,
            check=False,
        )
        out = done.stdout + done.stderr
        assert done.returncode == 0, out
    lines = done.stdout.splitlines()
    # fut.result() and the batch's last offset; the loop up to res's last record.
    assert lines[0].rsplit(" ", 1)[1].isdigit(), out
    assert [line.split(" ", 1)[1] for line in lines[1:3]] == ["b'a'", "b'b'"], out
    assert re.fullmatch(r"\d+ records in a batch", lines[3]), out
    assert int(lines[3].split()[0]) >= 1
    assert re.fullmatch(r"\d+ b'k' b'v' \d{13} \(\('trace', b'1'\),\)", lines[4]), out
    assert len(lines) == 5, out
