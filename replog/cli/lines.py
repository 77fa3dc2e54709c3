"""`replog consume`'s default output (`text`, no `-K`) straight from fetched frames (pure).

The usual fetched batch is runs of equally long data frames (one produced batch of equal
lines is one run) whose envelopes have no key, no headers and no null value. In such a run
every value sits at the same place of its frame, so one 2-D numpy copy puts the run's
values side by side with a newline after each, into the blob that is printed: no Python
object per record (decoding each record to a `bytes` and joining them cost more than the
rest of `consume`). A raw topic's frames are values as they are.

`text_lines` returns None for a batch that is not like that (keys, headers, tombstones, an
unknown envelope version, values that are not UTF-8, or many short runs: lines of varying
length), and the caller
decodes it record by record (render.py); what is printed is the same either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replog.cli.render import utf8
from replog.frames import HEADER_BYTES
from replog.records import FIXED_BYTES, VERSION
from replog.records import _data_runs as data_runs  # runs of equal data frames, in order

RECORDS_PER_RUN_MIN = 16  # fewer on average: numpy's cost per run exceeds the decoder's
NEWLINE = 10


@dataclass(frozen=True, slots=True)
class Lines:
    """A batch's printed lines: `blob`, and for each run of equally long lines (in order)
    its line count and the bytes of each line (newline included)."""

    blob: bytes | memoryview  # written as it is: a copy to `bytes` would cost as much again
    runs: tuple[tuple[int, int], ...]

    def __len__(self) -> int:
        return sum(n for n, _ in self.runs)

    def value_bytes(self) -> int:
        """The values' bytes (newlines left out), for the progress line."""
        return sum(n * (width - 1) for n, width in self.runs)

    def head(self, count: int) -> Lines:
        """The first `count` lines."""
        runs = []
        cut = 0
        for n, width in self.runs:
            if count <= 0:
                break
            taken = min(n, count)
            runs.append((taken, width))
            cut += taken * width
            count -= taken
        if cut == len(self.blob):
            return self
        return Lines(self.blob[:cut], tuple(runs))


def text_lines(buf: bytes, envelope: bool, end: int | None) -> Lines | None:
    """The data records of frames `buf` below offset `end` (None: all) as text lines, or
    None when the batch is not runs of plain equal records (see the module doc).
    `frames.FrameError` for broken frames."""
    runs = data_runs(buf)
    if not runs:
        return Lines(b"", ())
    if sum(count for _, count, _ in runs) < RECORDS_PER_RUN_MIN * len(runs):
        return None
    skip = FIXED_BYTES if envelope else 0
    taken: list[tuple[int, int, int, int]] = []  # position, count, frame bytes, value bytes
    for pos, count, length in runs:
        if length < skip or (envelope and not _plain(buf, pos, count, length)):
            return None
        frame = HEADER_BYTES + length
        below = count
        if end is not None:
            offsets = np.ndarray((count,), dtype=">u8", buffer=buf, offset=pos, strides=(frame,))
            below = int(np.searchsorted(offsets, end))
        if below:
            taken.append((pos, below, frame, length - skip))
        if below < count:
            break  # the rest is at or past `end`
    whole = np.frombuffer(buf, dtype=np.uint8)
    out = np.empty(sum(n * (value + 1) for _, n, _, value in taken), dtype=np.uint8)
    at = 0
    for pos, n, frame, value in taken:
        rows = out[at : at + n * (value + 1)].reshape(n, value + 1)
        rows[:, :value] = whole[pos : pos + n * frame].reshape(n, frame)[:, frame - value :]
        rows[:, value] = NEWLINE
        at += n * (value + 1)
    if len(out) and out.max() >= 0x80 and not utf8(out.tobytes()):
        return None  # the decoder's path replaces what is not UTF-8
    return Lines(out.data, tuple((n, value + 1) for _, n, _, value in taken))


def _plain(buf: bytes, pos: int, count: int, length: int) -> bool:
    """Whether the `count` envelopes of `length` bytes from `pos` are of the known version,
    without attributes (key, null value), key or headers, their value filling the rest."""
    frame = HEADER_BYTES + length

    def field(at: int, dtype: str) -> np.ndarray:
        return np.ndarray(
            (count,), dtype=dtype, buffer=buf, offset=pos + HEADER_BYTES + at, strides=(frame,)
        )

    return bool(
        (field(0, "u1") == VERSION).all()
        and not field(1, "u1").any()
        and not field(10, ">u4").any()
        and not field(14, ">u2").any()
        and (field(16, ">u4") == length - FIXED_BYTES).all()
    )
