"""Shared helpers for the bench scripts (`bench/storage.py`, `bench/e2e.py`, ...).

Every bench script prints one JSON object per line on stdout::

    {"bench": NAME, "value": NUMBER, "unit": "records/s" | "ms" | ..., "ceiling": NUMBER|null}

and writes its full run to its own `## ...` section of `docs/benchmarks.md`, leaving the
other sections as they are. This module holds only what two scripts would otherwise copy:

* `Result` + `emit`: one result line (exactly the four fields above).
* `Summary` / `summarize`: median, min and max of repeated runs.
* `machine_info`: cores, CPU model, Python, kernel, filesystem of a directory, load average,
  git commit.
* `process_cpu_s`: a server process's CPU time so far, to charge a phase its server CPU.
* `bench_tmpdir`: a scratch directory on the repository's filesystem (not tmpfs).
* `replace_section`: rewrite one `## heading` section of a Markdown file in place.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCS_FILE = REPO_ROOT / "docs" / "benchmarks.md"
DOCS_TITLE = "# Benchmarks\n"


# -- result lines ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Result:
    """One line of bench output: `value` (and `ceiling`, if any) in `unit`."""

    bench: str
    value: float
    unit: str
    ceiling: float | None = None

    def to_json(self) -> str:
        return json.dumps(
            {"bench": self.bench, "value": self.value, "unit": self.unit, "ceiling": self.ceiling}
        )


def emit(result: Result, out: TextIO | None = None) -> None:
    """Print `result` as one JSON line (stdout by default) and flush."""
    stream = sys.stdout if out is None else out
    stream.write(result.to_json() + "\n")
    stream.flush()


def log(message: str) -> None:
    """Progress for humans: stderr, so stdout stays one JSON object per line."""
    print(message, file=sys.stderr, flush=True)


# -- statistics ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Summary:
    median: float
    low: float
    high: float
    runs: int


def summarize(samples: Sequence[float]) -> Summary:
    """Median, min and max of `samples` (at least one)."""
    assert samples, "summarize needs at least one sample"
    return Summary(statistics.median(samples), min(samples), max(samples), len(samples))


# -- environment -----------------------------------------------------------------------------


def filesystem_of(path: Path) -> str:
    """Filesystem type and device of the mount holding `path`, from /proc/mounts."""
    target = str(Path(path).resolve())
    best = ("", "unknown", "unknown")
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                device, mount_point, fs_type = line.split()[:3]
                mount_point = mount_point.replace("\\040", " ")
                inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
                if inside and len(mount_point) >= len(best[0]):
                    best = (mount_point, fs_type, device)
    except OSError:
        pass
    return f"{best[1]} ({best[2]} on {best[0] or '?'})"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit() -> str:
    """The checked-out commit (read-only git call), with "+dirty" if the tree has changes."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if status else "")


def load_average() -> str:
    """The 1/5/15-minute load averages: how busy the (shared) machine was."""
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def machine_info(data_dir: Path) -> dict[str, str]:
    """What a reader needs to compare runs across machines."""
    return {
        "cores": str(os.cpu_count()),
        "cpu": cpu_model(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "kernel": f"{platform.system()} {platform.release()}",
        "data dir filesystem": filesystem_of(data_dir),
        "load average (1/5/15 min) at start": load_average(),
        "commit": git_commit(),
    }


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds that process `pid` has used so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def bench_tmpdir(parent: Path | None = None, prefix: str = "bench-") -> Iterator[Path]:
    """A scratch directory, removed afterwards.

    Default parent: `<repo>/tmp/` (git-ignored), i.e. the repository's own filesystem rather
    than a tmpfs `/tmp`, so the numbers include the real filesystem's write path.
    """
    base = REPO_ROOT / "tmp" if parent is None else Path(parent)
    base.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- docs/benchmarks.md ----------------------------------------------------------------------


def replace_section(text: str, heading: str, body: str) -> str:
    """`text` with the `## heading` section replaced by `heading` + `body` (appended if absent).

    A section runs from its `## ` line to the next `## ` or `# ` line outside a code fence
    (or the end). Everything else is kept byte for byte.
    """
    assert heading.startswith("## "), "sections are level-2 headings"
    section = heading.rstrip("\n") + "\n\n" + body.strip("\n") + "\n"
    lines = text.splitlines(keepends=True)
    start = end = None
    fenced = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        is_heading = line.startswith("## ") or line.startswith("# ")
        if start is None and line.rstrip("\n").rstrip() == heading.rstrip():
            start = i
        elif start is not None and is_heading:
            end = i
            break
    if start is None:
        if not text.strip():
            return DOCS_TITLE + "\n" + section
        return text.rstrip("\n") + "\n\n" + section
    if end is None:
        end = len(lines)
    tail = "".join(lines[end:])
    return "".join(lines[:start]) + section + ("\n" + tail if tail else "")


def write_section(heading: str, body: str, path: Path = DOCS_FILE) -> None:
    """Replace (or add) one section of `path`, atomically (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(replace_section(old, heading, body), encoding="utf-8")
    os.replace(tmp, path)
