"""`replog verify DATA_DIR...`: check a stopped node's storage files offline (frames,
index, checksums) without changing them; exit 1 if anything is corrupt."""

from __future__ import annotations

import argparse
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
