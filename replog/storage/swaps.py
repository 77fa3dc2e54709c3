"""Swapping a cleaned segment in place of the old one, crash-safe (the log cleaner's files).

The cleaner (`cleaner.py`) writes the cleaned copy of segment `B` as an ordinary segment in
the partition's `cleaning/` subdirectory (`cleaning/B.log`, `.idx`, `.crc`: the "cleaned"
stage; same formats as any segment, offsets with gaps) and fsyncs it. The swap is then:

1. rename `cleaning/B.crc` -> `B.crc.swap` and `cleaning/B.idx` -> `B.idx.swap`; fsync the
   partition directory;
2. rename `cleaning/B.log` -> `B.log.swap`; fsync the directory. **The commit point**: from
   here on the cleaned copy is the segment;
3. `finish`: rename `B.crc.swap` -> `B.crc`, `B.idx.swap` -> `B.idx` (each over the old
   file), delete `B.timeindex` (rebuilt from the log on use), rename `B.log.swap` -> `B.log`
   last; fsync the directory.

`recover` runs when a log is opened and its listing shows a `.swap` file or `cleaning/`
(`is_cleaner_leftover`), before the segments are taken from it: for every `B.log.swap`
(committed) it finishes step 3, whatever part of it was done; every other `*.swap` file (a
swap cut before its commit point) and everything in `cleaning/` is deleted, which leaves
the old segment as it was. So a crash at any step leaves either the old segment or the new
one, never a mix. The two are interchangeable for a reader: the cleaned copy holds the
same offsets minus the records the cleaner dropped, each frame byte for byte.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from replog.storage.checkpoint import fsync_dir
from replog.storage.checksums import checksum_file_name
from replog.storage.segment_base import index_file_name, log_file_name
from replog.storage.time_index import time_index_file_name

CLEANING_DIR = "cleaning"
_LOG_SWAP = re.compile(r"(\d{20})\.log\.swap")


def cleaning_dir(directory: Path) -> Path:
    """Where the cleaner writes cleaned copies (created on demand)."""
    path = directory / CLEANING_DIR
    path.mkdir(exist_ok=True)
    return path


def _side_names(base_offset: int) -> tuple[str, str]:
    return checksum_file_name(base_offset), index_file_name(base_offset)


def swap_in(directory: Path, base_offset: int) -> None:
    """Steps 1-3 of the module doc for the cleaned copy of segment `base_offset`."""
    staging = directory / CLEANING_DIR
    for name in _side_names(base_offset):
        if (staging / name).exists():
            os.rename(staging / name, directory / f"{name}.swap")
    fsync_dir(directory)
    log = log_file_name(base_offset)
    os.rename(staging / log, directory / f"{log}.swap")
    fsync_dir(directory)
    fsync_dir(staging)
    finish(directory, base_offset)


def finish(directory: Path, base_offset: int) -> None:
    """Step 3: a committed swap's files take the old ones' names (idempotent)."""
    for name in _side_names(base_offset):
        swap = directory / f"{name}.swap"
        if swap.exists():
            os.replace(swap, directory / name)
        elif name.endswith(".idx") and (directory / f"{log_file_name(base_offset)}.swap").exists():
            (directory / name).unlink(missing_ok=True)  # no cleaned index: rebuilt on open
    (directory / time_index_file_name(base_offset)).unlink(missing_ok=True)
    log = log_file_name(base_offset)
    if (directory / f"{log}.swap").exists():
        os.replace(directory / f"{log}.swap", directory / log)
    fsync_dir(directory)


def is_cleaner_leftover(name: str) -> bool:
    """Whether a name in a partition directory means `recover` has work to do."""
    return name.endswith(".swap") or name == CLEANING_DIR


def recover(directory: Path) -> None:
    """Finish committed swaps, discard the rest (see the module doc)."""
    with os.scandir(directory) as listing:
        names = [e.name for e in listing]
    for name in names:
        if m := _LOG_SWAP.fullmatch(name):
            finish(directory, int(m.group(1)))
    left = [name for name in names if name.endswith(".swap") and not _LOG_SWAP.fullmatch(name)]
    for name in left:
        (directory / name).unlink(missing_ok=True)
    staging = directory / CLEANING_DIR
    if staging.is_dir():
        for entry in os.scandir(staging):
            os.unlink(entry.path)
        staging.rmdir()  # made again by the next pass
    fsync_dir(directory)
