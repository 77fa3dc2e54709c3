"""`replog verify DATA_DIR...`: check a stopped node's storage files offline (frames,
index, checksums) without changing them; exit 1 if anything is corrupt.

A running node changes its files while they are read (its active segments' tails may show
as torn), so `verify` warns on stderr when a process has files of DATA_DIR open (Linux:
/proc/PID/fd; the node keeps its segments open) and checks anyway."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from replog.cli.common import (
    EXIT_ERROR,
    Subparsers,
    UsageError,
    add_output_argument,
    print_json,
)

JSON_KEYS = {
    "verify": '{"ok", "data_dirs": [{"data_dir", "ok", "partitions", "segments", "records", '
    '"bytes_checked", "findings": [{"severity", "path", "detail"}]}]}',
}


def add_parser(sub: Subparsers) -> None:
    verify = sub.add_parser(
        "verify",
        help="check a stopped node's storage files offline (frames, index, checksums)",
        description="Check every segment of a stopped node's data dir without changing it; "
        "exit 1 if anything is corrupt.",
    )
    verify.set_defaults(run=cmd_verify)
    verify.add_argument("data_dirs", nargs="+", metavar="DATA_DIR")
    add_output_argument(verify, JSON_KEYS["verify"])


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    from replog.storage.verify import main as verify_main
    from replog.storage.verify import verify_data_dir

    for arg in args.data_dirs:
        warn_if_in_use(Path(arg))
    if args.output == "text":
        return verify_main(args.data_dirs, out)
    dirs: list[dict[str, object]] = []
    for arg in args.data_dirs:
        if not Path(arg).is_dir():
            raise UsageError(f"{arg} is not a directory")
        report = verify_data_dir(Path(arg))
        dirs.append(
            {
                "data_dir": arg,
                "ok": report.ok,
                "partitions": report.partitions,
                "segments": report.segments,
                "records": report.records,
                "bytes_checked": report.bytes_checked,
                "findings": [
                    {"severity": f.severity, "path": str(f.path), "detail": f.detail}
                    for f in report.findings
                ],
            }
        )
    ok = all(d["ok"] for d in dirs)
    print_json({"ok": ok, "data_dirs": dirs}, out)
    return 0 if ok else EXIT_ERROR


def processes_using(data_dir: Path) -> list[int]:
    """Pids of other processes with a file under `data_dir` open (empty where /proc is not
    there or not readable: the check is best effort)."""
    root = str(data_dir.resolve())
    found = []
    for pid, targets in _open_files():
        if pid != os.getpid() and any(t == root or t.startswith(root + os.sep) for t in targets):
            found.append(pid)
    return sorted(found)


def _open_files() -> Iterator[tuple[int, list[str]]]:
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        fd_dir = f"/proc/{entry}/fd"
        try:
            targets = [os.readlink(f"{fd_dir}/{fd}") for fd in os.listdir(fd_dir)]
        except OSError:  # gone, or not ours to read
            continue
        yield int(entry), targets


def warn_if_in_use(data_dir: Path) -> None:
    if not data_dir.is_dir():
        return
    pids = processes_using(data_dir)
    if pids:
        print(
            f"replog: warning: {data_dir} is in use by a running process (pid "
            f"{', '.join(map(str, pids))}): stop the node for a reliable check (a live "
            "node's active segments change while they are read)",
            file=sys.stderr,
        )
