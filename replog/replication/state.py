"""Durable quorum state of a partition replica: `{epoch, voted_for, leader_id}`.

The driver stores it in the partition directory as the file `quorum-state`, written
atomically (temp file, fsync, rename, fsync dir), whenever the core emits
`PersistQuorumState`, and before it performs any output that follows it (in particular
before sending a vote). The encoding is the driver's; the core only needs these fields back
on restart.

Ranges (checked on the wire by the server's codec and on load by the driver): epochs
`0..EPOCH_MAX` (2^31 - 1, Kafka's int32 leader epochs), offsets `0..OFFSET_MAX` (2^62:
the sum of any two still fits in 63 bits), node ids `0..NODE_ID_MAX`.
"""

from __future__ import annotations

from dataclasses import dataclass

EPOCH_MAX = 2**31 - 1
OFFSET_MAX = 2**62
NODE_ID_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class QuorumState:
    """`vote_floor` / `vote_floor_epoch`: set when this replica's log was discarded (a repair
    of corrupt data): the end and last epoch of the log it had, whose records it may have
    acknowledged. Until its log is back there (or a leader's HW shows it holds all that is
    committed), it does not campaign, and it votes only for a candidate whose log is at least
    as up to date as that former log, not merely as its own (emptied) one: otherwise its vote
    could elect a leader that lacks records it had helped to commit (the wiped-disk hazard
    that KIP-853 addresses)."""

    epoch: int = 0
    voted_for: int | None = None
    leader_id: int | None = None
    vote_floor: int = 0
    vote_floor_epoch: int = 0
