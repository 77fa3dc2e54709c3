"""The membership of one partition (voters, observers) and its history in the log.

A leader changes the membership by appending a control record (`MembershipChange`, see
`outputs.py`); the record at offset `o` makes `Membership(voters, observers)` the membership
from `o` on. Every replica uses the **latest** membership in its log, committed or not (Raft
thesis 4.1); a truncation that removes a membership record reverts to the one before. Before
the first record, the partition's starting membership (`ReplicaConfig.voters` /
`observers`) is in force.

`MembershipHistory` keeps the `(offset, membership)` entries of the log, like the epoch
history: pure data, persisted through a `PersistMembershipHistory` output (durable file
`membership-history`, written atomically by the driver; a missing file is an empty history).

Invariants (asserted): entry offsets strictly increase.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Membership:
    """Who votes and who only follows. A replica in neither set takes no part: it is not
    sent to, never votes and never campaigns."""

    voters: tuple[int, ...]
    observers: tuple[int, ...] = ()

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def replicas(self) -> tuple[int, ...]:
        return self.voters + self.observers

    def problem(self) -> str | None:
        """Why this is not a valid membership (None: it is)."""
        if not self.voters:
            return "a partition needs at least one voter"
        if len(set(self.voters)) != len(self.voters):
            return f"duplicate voters {self.voters}"
        if len(set(self.observers)) != len(self.observers):
            return f"duplicate observers {self.observers}"
        both = sorted(set(self.voters) & set(self.observers))
        if both:
            return f"replicas both voter and observer: {both}"
        return None

    def same_as(self, other: Membership) -> bool:
        """The same sets (order does not matter)."""
        return set(self.voters) == set(other.voters) and set(self.observers) == set(other.observers)


@dataclass(frozen=True, slots=True)
class MembershipEntry:
    """The control record at `offset` makes `membership` the partition's membership."""

    offset: int
    membership: Membership


class MembershipHistory:
    """The membership entries of one replica's log, above the starting membership."""

    def __init__(self, starting: Membership, entries: Iterable[MembershipEntry] = ()) -> None:
        self.starting = starting
        self._entries: list[MembershipEntry] = []
        for entry in entries:
            self.append(entry)

    @property
    def entries(self) -> tuple[MembershipEntry, ...]:
        return tuple(self._entries)

    @property
    def current(self) -> Membership:
        """The latest membership of the log (the starting one if it holds no change)."""
        return self._entries[-1].membership if self._entries else self.starting

    @property
    def latest_offset(self) -> int:
        """The offset of the latest membership record (-1: none)."""
        return self._entries[-1].offset if self._entries else -1

    def append(self, entry: MembershipEntry) -> None:
        assert entry.offset >= 0, entry
        assert entry.membership.problem() is None, entry
        if self._entries:
            assert entry.offset > self._entries[-1].offset, (entry, self._entries[-1])
        self._entries.append(entry)

    def truncate_to(self, offset: int) -> bool:
        """Forget the entries at or after `offset` (their records are gone). Returns
        whether anything was removed."""
        keep = [e for e in self._entries if e.offset < offset]
        changed = len(keep) != len(self._entries)
        self._entries = keep
        return changed

    def forget_before(self, offset: int) -> bool:
        """Drop the entries before the one in force at `offset` (the records below
        `offset` are deleted). Returns whether anything was dropped."""
        keep = [*self.in_force_at(offset), *(e for e in self._entries if e.offset >= offset)]
        changed = len(keep) != len(self._entries)
        self._entries = keep
        return changed

    def between(self, start_offset: int, end_offset: int) -> tuple[MembershipEntry, ...]:
        """The entries whose records lie in `[start_offset, end_offset)`."""
        return tuple(e for e in self._entries if start_offset <= e.offset < end_offset)

    def in_force_at(self, offset: int) -> tuple[MembershipEntry, ...]:
        """The last entry before `offset` (empty: the starting membership is in force
        there): what a replica that starts an empty log at `offset` needs."""
        before = [e for e in self._entries if e.offset < offset]
        return tuple(before[-1:])
