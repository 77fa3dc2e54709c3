"""A one-line progress display for long CLI commands, written to stderr only.

The line is redrawn in place with a carriage return, at most every `REDRAW_INTERVAL_S`
(the first update and the final line are always drawn):

    produced 120,000 records  4.1 MB  38,211 records/s  1.3 MB/s  ETA 0:07

ETA is shown when the total is known (a regular file on stdin: its size in bytes;
`consume --until-latest`: the records up to the high watermark seen at start).
Stdout is never touched, so piping a command's output stays clean.
"""

from __future__ import annotations

import time
from dataclasses import KW_ONLY, dataclass, field
from typing import TextIO

REDRAW_INTERVAL_S = 0.25


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def human_duration(seconds: float) -> str:
    s = max(0, round(seconds))
    hours, rest = divmod(s, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass(eq=False)
class Progress:
    """Counts records and bytes; draws to `stream` only when `enabled`.

    Exactly one of `total_records` / `total_bytes` (or neither) gives the ETA.
    """

    stream: TextIO
    verb: str
    _: KW_ONLY
    enabled: bool
    total_records: int | None = None
    total_bytes: int | None = None
    records: int = field(default=0, init=False)
    bytes: int = field(default=0, init=False)
    started: float = field(default_factory=time.perf_counter, init=False)
    _drawn_at: float | None = field(default=None, init=False)
    _width: int = field(default=0, init=False)

    def update(self, records: int, nbytes: int) -> None:
        self.records += records
        self.bytes += nbytes
        if not self.enabled:
            return
        now = time.perf_counter()
        if self._drawn_at is None or now - self._drawn_at >= REDRAW_INTERVAL_S:
            self._drawn_at = now
            self._draw(self.line(now), end="")

    def finish(self) -> None:
        if self.enabled:
            elapsed = time.perf_counter() - self.started
            self._draw(self.line(time.perf_counter()) + f"  done in {elapsed:.1f}s", end="\n")

    def line(self, now: float) -> str:
        elapsed = max(now - self.started, 1e-9)
        record_rate = self.records / elapsed
        byte_rate = self.bytes / elapsed
        text = (
            f"{self.verb} {self.records:,} records  {human_bytes(self.bytes)}  "
            f"{record_rate:,.0f} records/s  {human_bytes(byte_rate)}/s"
        )
        eta: float | None = None
        if self.total_bytes is not None and byte_rate > 0:
            eta = max(self.total_bytes - self.bytes, 0) / byte_rate
        elif self.total_records is not None and record_rate > 0:
            eta = max(self.total_records - self.records, 0) / record_rate
        if eta is not None:
            text += f"  ETA {human_duration(eta)}"
        return text

    def _draw(self, text: str, end: str) -> None:
        pad = " " * max(self._width - len(text), 0)  # erase the tail of a longer line
        self._width = len(text)
        print(f"\r{text}{pad}", end=end, file=self.stream, flush=True)
