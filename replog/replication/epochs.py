"""The epoch history of one partition replica: `(epoch, start_offset)` entries.

Each entry says "offset `start_offset` is the first record written in `epoch`". The epoch of
offset `o` is the last entry with `start_offset <= o`; offsets before the first entry have
epoch 0 (no record is ever written in epoch 0). Kafka calls this the leader-epoch checkpoint.

Invariants (asserted): epochs strictly increase; start offsets strictly increase, except that
the last entry may start at the log end (an epoch that has no record yet). Appending an epoch
that starts where the previous one starts replaces it (the previous epoch held no record).

Pure data: the replica persists it through a `PersistEpochHistory` output (durable file
`epoch-history`, written atomically by the driver).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EpochStart:
    """First offset written in `epoch`."""

    epoch: int
    start_offset: int


class EpochHistory:
    """Ordered `(epoch, start_offset)` entries with epoch lookups and truncation."""

    def __init__(self, entries: Iterable[EpochStart] = ()) -> None:
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for entry in entries:
            self.append(entry.epoch, entry.start_offset)

    @property
    def entries(self) -> tuple[EpochStart, ...]:
        return tuple(map(EpochStart, self._epochs, self._starts))

    def __len__(self) -> int:
        return len(self._epochs)

    @property
    def latest_epoch(self) -> int:
        """The last epoch in the history (0 if empty)."""
        return self._epochs[-1] if self._epochs else 0

    def append(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset`."""
        assert epoch > 0 and start_offset >= 0, (epoch, start_offset)
        if self._epochs:
            assert epoch > self._epochs[-1], f"epoch {epoch} after {self._epochs[-1]}"
            assert start_offset >= self._starts[-1], f"start {start_offset} < {self._starts[-1]}"
            if start_offset == self._starts[-1]:
                self._epochs.pop()
                self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)

    def epoch_of(self, offset: int) -> int:
        """Epoch of the record at `offset` (0 before the first entry)."""
        i = bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i else 0

    def last_epoch(self, log_end_offset: int) -> int:
        """Epoch of the last record of a log ending at `log_end_offset` (0 when empty)."""
        return self.epoch_of(log_end_offset - 1) if log_end_offset > 0 else 0

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """`(e, end)`: the largest known epoch `e <= epoch` and the offset after its last record.

        `end` is the start of the next epoch in the history, or `log_end_offset` when `e` is
        the latest. When no known epoch is `<= epoch`, `e` is 0 and `end` is where the first
        epoch starts (0 for any log written by this protocol).
        """
        i = bisect_right(self._epochs, epoch)  # entries [0, i) have epoch <= `epoch`
        if i == 0:
            return 0, self._starts[0] if self._starts else log_end_offset
        end = self._starts[i] if i < len(self._starts) else log_end_offset
        return self._epochs[i - 1], min(end, log_end_offset)

    def truncate_to(self, offset: int) -> bool:
        """Forget epochs that start at or after `offset` (they hold no record any more).

        Returns whether anything was removed.
        """
        i = bisect_right(self._starts, offset - 1) if offset > 0 else 0
        # keep entries whose start < offset
        changed = i < len(self._starts)
        del self._epochs[i:]
        del self._starts[i:]
        return changed

    def boundaries(self, start_offset: int, end_offset: int) -> tuple[EpochStart, ...]:
        """Epochs of the records in `[start_offset, end_offset)`, starts clipped to the range."""
        if start_offset >= end_offset:
            return ()
        out = [EpochStart(self.epoch_of(start_offset), start_offset)]
        i = bisect_right(self._starts, start_offset)
        while i < len(self._starts) and self._starts[i] < end_offset:
            out.append(EpochStart(self._epochs[i], self._starts[i]))
            i += 1
        return tuple(out)
