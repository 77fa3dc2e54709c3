"""Small state files written atomically: temp file, fsync, rename over, fsync the directory.

Used for `high-watermark` (text: `<int>\\n`), `topic.json`, and by replication for
`quorum-state` and `epoch-history`. A reader sees either the old or the new content, never a
mix, even after a crash or power loss at any point.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_file(path: Path) -> bytes | None:
    """The file's content, or None if it does not exist (a leftover `.tmp` is ignored)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def write_int(path: Path, value: int) -> None:
    write_atomic(path, f"{value}\n".encode())


def read_int(path: Path) -> int | None:
    """The integer in `path`; None if it is missing or not a clean non-negative integer."""
    data = read_file(path)
    if data is None:
        return None
    text = data.decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def remove_if_exists(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
