"""Durable quorum state of a partition replica: `{epoch, voted_for, leader_id}`.

The driver stores it in the partition directory as the file `quorum-state`, written
atomically (temp file, fsync, rename, fsync dir), whenever the core emits
`PersistQuorumState`, and before it performs any output that follows it (in particular
before sending a vote). The encoding is the driver's; the core only needs these fields back
on restart.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QuorumState:
    epoch: int = 0
    voted_for: int | None = None
    leader_id: int | None = None
