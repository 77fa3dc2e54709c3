"""Where a leader may end a fetch answer: at batch boundaries above the HW.

A client's batch is one `AppendRecords`, written to the leader's log at once. Followers
fetch at most `fetch_bytes_max` at a time; if an answer could end inside a batch, a
follower would hold half of it, the HW (a majority's match) could stop inside it, and a
follower elected with half a batch would commit that half while the rest is gone. So the
leader remembers the ends of the batches it appended that are not committed yet, and ends
each answer above the HW at one of them: the last boundary the read reached, or, when one
batch alone is larger than the read, the end of that batch (the caller bounds how far it
may read). Below the HW any cut is safe: what is committed is on a majority, whole.

Pure bookkeeping; the driver feeds it from the outputs it performs (appends, HW, truncation).
Ends are kept across epochs while the log is not truncated: they are boundaries of the log.
A leader that inherited uncommitted records from an earlier leader knows no boundary inside
them but its own epoch marker's end: an answer reaching into them goes to that end (all of
the inherited tail) when it fits.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

ENDS_MAX = 100_000  # past this many uncommitted batches, the oldest boundaries are forgotten


class BatchEnds:
    def __init__(self) -> None:
        self._ends: list[int] = []  # increasing, each > the HW last seen

    def __len__(self) -> int:
        return len(self._ends)

    def appended(self, end_offset: int) -> None:
        """A batch (or the epoch marker) ending before `end_offset` was written."""
        if self._ends and end_offset <= self._ends[-1]:
            return  # not past the last one: the log was rewritten without a truncation seen
        self._ends.append(end_offset)
        if len(self._ends) > ENDS_MAX:
            del self._ends[: len(self._ends) - ENDS_MAX]

    def committed(self, high_watermark: int) -> None:
        del self._ends[: bisect.bisect_right(self._ends, high_watermark)]

    def truncated(self, offset: int) -> None:
        """The log now ends at `offset`: batches past it are gone."""
        del self._ends[bisect.bisect_right(self._ends, offset) :]

    def clear(self) -> None:
        self._ends.clear()

    def known(self, offset: int) -> bool:
        """Whether `offset` is the end of a batch this leader knows."""
        i = bisect.bisect_left(self._ends, offset)
        return i < len(self._ends) and self._ends[i] == offset

    def cut(self, start: int, end: int, available_end: int, high_watermark: int) -> int:
        """Where an answer from `start` should end, given that a read reached `end` (of the
        records up to `available_end`): `end` when it is safe (everything available, at or
        below the HW, or a boundary); else the last boundary after `start` before `end`
        (the HW counts as one); else the first boundary past `end` (read further); else
        `end` (no boundary known there)."""
        if end >= available_end or end <= high_watermark:
            return end
        ends = self._ends
        i = bisect.bisect_left(ends, end)
        if i < len(ends) and ends[i] == end:
            return end
        below = ends[i - 1] if i > 0 else None
        if below is not None and below > start and below > high_watermark:
            return below
        if start < high_watermark < end:
            return high_watermark
        if i < len(ends) and ends[i] <= available_end:
            return ends[i]
        return end


def whole_batches_end(headers: Iterable[tuple[int, int]], start: int, end: int) -> int:
    """Where an answer of `[start, end)` that ends at no known boundary may end without
    splitting an idempotent batch, given the `(offset, record_count)` of the producer batch
    headers in the range, in order: `end` when every batch whose header is in the range
    ends by `end`; else the offset of the header whose batch runs past `end` (the answer
    stops before it) when that leaves something to send; else that batch's end (the caller
    reads on to it). For a leader that does not know the batch boundaries of an inherited
    tail (restarted, its `BatchEnds` gone) and cuts an answer inside it: a follower holding
    a header and half its records, elected, would commit the half, and the producer's retry
    of that sequence would be taken for a duplicate (its other records never written)."""
    for offset, count in headers:
        batch_end = offset + 1 + count
        if batch_end > end:
            return offset if offset > start else batch_end
    return end
