"""The background scrubber: re-verifies every segment's CRC32C at a bounded byte rate.

Reads verify what they serve, but data nobody reads (old segments, a follower's log) can rot
unnoticed until a failover needs it. The scrubber walks every block of every segment of
every partition it is given, at most `bytes_per_s` on average, one `step_bytes` step at a
time: each step holds one partition's lock only for its `pread` and CRC (about 1 ms per MiB),
so appends and reads are barely delayed. Index entries are checked on a segment's first
step. Findings are recorded by the partition itself (`PartitionLog.corrupt_ranges()` and
`integrity_issues()`; reads of those ranges then raise `CorruptDataError`) and passed to
`on_corrupt`, e.g. for a metric or a log line.

It is synchronous and starts no thread. The server runs it in a thread it supervises::

    scrubber = Scrubber(registry.open_partitions, bytes_per_s=8 * MIB, on_corrupt=report)
    stop = threading.Event()
    thread = threading.Thread(target=scrubber.run, args=(stop,), name="replog-scrubber")
    thread.start()
    ...
    stop.set(); thread.join()

`run` repeats passes (pausing `pass_interval_s` between them) until `stop` is set; `run_pass`
does one pass and returns what it did (tests, `replog` tools).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from replog.errors import InvalidConfigError, LogClosedError, ReplogError
from replog.storage.integrity import IntegrityIssue
from replog.storage.partition_log import PartitionLog

MIB = 1024 * 1024


@dataclass(slots=True)
class ScrubPass:
    partitions: int = 0
    bytes_verified: int = 0
    found: list[tuple[PartitionLog, IntegrityIssue]] = field(default_factory=list)


class Scrubber:
    def __init__(
        self,
        partitions: Callable[[], Iterable[PartitionLog]],
        *,
        bytes_per_s: int,
        step_bytes: int = 1 * MIB,
        on_corrupt: Callable[[PartitionLog, IntegrityIssue], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if bytes_per_s < 1 or step_bytes < 1:
            raise InvalidConfigError("scrubber: bytes_per_s and step_bytes must be >= 1")
        self._partitions = partitions
        self.bytes_per_s = bytes_per_s
        self.step_bytes = step_bytes
        self._on_corrupt = on_corrupt
        self._clock = clock
        self._next_step_at = clock()

    def _pace(self, verified: int, stop: threading.Event) -> None:
        """Wait so that the average rate stays at or below `bytes_per_s`."""
        now = self._clock()
        self._next_step_at = max(self._next_step_at, now) + verified / self.bytes_per_s
        delay = self._next_step_at - now
        if delay > 0:
            stop.wait(delay)

    def scrub_partition(
        self, plog: PartitionLog, stop: threading.Event, result: ScrubPass | None = None
    ) -> ScrubPass:
        """Verify every segment of one partition, paced; stop early if `stop` is set."""
        result = result if result is not None else ScrubPass()
        result.partitions += 1
        try:
            known = {(i.segment, i.start_position) for i in plog.corrupt_ranges()}
        except LogClosedError:
            return result  # closed (its topic deleted, the node stopping) under the scrubber
        cursor: tuple[int, int] | None = None
        while not stop.is_set():
            try:
                cursor, verified = plog.scrub_step(cursor, self.step_bytes)
            except ReplogError:
                break  # closed, deleted or an I/O error: the next pass tries again
            result.bytes_verified += verified
            if cursor is None:
                break
            self._pace(verified, stop)
        try:
            issues = plog.corrupt_ranges()
        except LogClosedError:
            return result
        for issue in issues:
            if (issue.segment, issue.start_position) not in known:
                result.found.append((plog, issue))
                if self._on_corrupt is not None:
                    self._on_corrupt(plog, issue)
        return result

    def run_pass(self, stop: threading.Event | None = None) -> ScrubPass:
        stop = stop if stop is not None else threading.Event()
        result = ScrubPass()
        for plog in list(self._partitions()):
            if stop.is_set():
                break
            self.scrub_partition(plog, stop, result)
        return result

    def run(self, stop: threading.Event, *, pass_interval_s: float = 60.0) -> None:
        while not stop.is_set():
            self.run_pass(stop)
            stop.wait(pass_interval_s)
