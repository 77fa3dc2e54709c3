"""Small state files written atomically: temp file, fsync, rename over, fsync the directory.

Used for `high-watermark` (text: `<int>\\n`), `topic.json`, and by replication for
`quorum-state` and `epoch-history`. A reader sees either the old or the new content, never a
mix, even after a crash or power loss at any point. `write_hint` (no fsync) is for the
recovery point and the clean-shutdown marker (`partition_log.py`), whose loss is safe.
`load_json` is the one reader of the JSON state files (quorum state, epoch and membership
histories, the node identity): a document its parser refuses is CorruptDataError.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from replog.errors import CorruptDataError

T = TypeVar("T")


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


def write_hint(path: Path, value: int) -> None:
    """Write `<value>\n` to `path` through a temp file and a rename, *without* fsync: for a
    file whose loss or emptiness after a power failure is safe (the reader then does more
    work, never less), whose content only ever describes bytes already fsynced, and which
    costs no sync on a hot path (`recovery-point`, `clean-shutdown`)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(f"{value}\n".encode())
    os.replace(tmp, path)


def read_hint(path: Path) -> int | None:
    """The number `write_hint` wrote, or None if the file is missing, empty, or anything but
    digits and the final newline (a torn write cannot pass for a smaller number)."""
    data = read_file(path)
    if data is None or not data.endswith(b"\n") or not data[:-1].isdigit():
        return None
    return int(data[:-1])


def write_text_state(path: Path, data: bytes) -> None:
    """`write_atomic` for a small text state file (JSON, or an integer line) that may be
    padded with trailing spaces. On a full disk (ENOSPC/EDQUOT), an existing file whose
    blocks already hold `data` is overwritten in place instead: one write of less than a
    block at offset 0, padded with spaces to the old length, then fsync. That allocates
    nothing, so a vote, an epoch or a high watermark can still be made durable on a disk
    filled to its last byte (a node restarted there elects leaders and serves reads). Not
    atomic as a rename is: a torn write leaves a file that does not parse, which the reader
    refuses (the replica does not open; nothing is guessed)."""
    try:
        write_atomic(path, data)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not _overwrite(path, data):
            raise
        with contextlib.suppress(FileNotFoundError):
            path.with_name(path.name + ".tmp").unlink()


def _overwrite(path: Path, data: bytes) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return False
    try:
        st = os.fstat(fd)
        if len(data) > min(st.st_blocks * 512, st.st_blksize):
            return False  # would allocate, or span blocks
        padded = data + b" " * max(0, st.st_size - len(data))
        if os.pwrite(fd, padded, 0) != len(padded):
            return False
        os.fsync(fd)
        return True
    finally:
        os.close(fd)


def read_file(path: Path) -> bytes | None:
    """The file's content, or None if it does not exist (a leftover `.tmp` is ignored)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def load_json(path: Path, parse: Callable[[Any], T | None]) -> T | None:
    """The JSON document in `path` as `parse` reads it; None when there is no file. A
    document `parse` refuses (it returns None, or raises ValueError, TypeError or KeyError)
    is CorruptDataError naming the file and its first bytes: nothing is guessed."""
    raw = read_file(path)
    if raw is None:
        return None
    try:
        value = parse(json.loads(raw))
    except (ValueError, TypeError, KeyError):
        value = None
    if value is None:
        raise CorruptDataError(f"{path}: invalid {raw[:200]!r}")
    return value


def write_int(path: Path, value: int) -> None:
    write_text_state(path, f"{value}\n".encode())


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
