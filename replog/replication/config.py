"""Configuration of one replica of the replication core (times in milliseconds)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """`flush_always`: the leader counts only its flushed offset toward HW and acks=leader
    waits for the flush; followers fetch again only once their log is flushed.

    `observers` replicate the log like followers but never vote, never campaign and never
    count toward the majority (KIP-595's observers); this replica is a voter or an observer.
    """

    replica_id: int
    voters: tuple[int, ...]
    observers: tuple[int, ...] = ()
    election_timeout_ms_min: int = 1000
    election_timeout_ms_max: int = 2000
    # The election timeout of a replica that has known no leader since it started (it has
    # neither led nor heard one): 0, the range above. The metadata log's is the node's
    # plain range while its own is `METADATA_PATIENCE` times longer (`campaigns.py`): the
    # patience keeps a known leader through a loaded node's stalls; with none known there
    # is nothing to keep, and a cluster that starts elects its first one as fast as a data
    # partition does.
    first_election_timeout_ms_min: int = 0
    first_election_timeout_ms_max: int = 0
    fetch_wait_ms_max: int = 500
    # A follower's parked fetch whose only news is a new HW waits this long for records to
    # carry it (0: answered at once; see `leading.hw_news`). Off: with it on, the simulator
    # found a leader serving a HW below one a reader had seen (seed 227, --flush never
    # --interrupts --transfers --corruption); not to be turned on before that is fixed.
    hw_linger_ms: int = 0
    fetch_retry_ms: int = 600
    begin_epoch_retry_ms: int = 200
    flush_always: bool = True
    # Quiescence (`quiet.py`): a fetch of a follower that holds the leader's whole log, HW
    # included, is held this long instead of `fetch_wait_ms_max`, and the follower, while
    # its leader's node is heard (`liveness`), waits that long before it fetches again or
    # campaigns. 0: off (every replica exchanges a fetch and an answer each fetch wait).
    quiet_fetch_wait_ms: int = 0

    def __post_init__(self) -> None:
        assert self.voters, "a partition needs at least one voter"
        assert self.replica_id in self.voters or self.replica_id in self.observers, (
            self.replica_id,
            self.voters,
            self.observers,
        )
        assert len(set(self.voters)) == len(self.voters), self.voters
        assert len(set(self.observers)) == len(self.observers), self.observers
        assert not set(self.voters) & set(self.observers), (self.voters, self.observers)
        assert 0 < self.election_timeout_ms_min < self.election_timeout_ms_max
        first = (self.first_election_timeout_ms_min, self.first_election_timeout_ms_max)
        assert first == (0, 0) or self.fetch_retry_ms < first[0] < first[1], first
        assert 0 < self.fetch_wait_ms_max < self.fetch_retry_ms
        assert 0 <= self.hw_linger_ms < self.fetch_wait_ms_max
        # a leader must answer a parked fetch before the follower gives up on it
        assert self.fetch_retry_ms < self.election_timeout_ms_min
        assert 0 < self.begin_epoch_retry_ms < self.election_timeout_ms_min
        assert self.quiet_fetch_wait_ms == 0 or self.quiet_fetch_wait_ms > self.fetch_retry_ms

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def is_voter(self) -> bool:
        """Whether this replica votes (else it is an observer)."""
        return self.replica_id in self.voters
