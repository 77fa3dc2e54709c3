"""The node-wide budget of campaigns: how many election timeouts of data partitions may
start a campaign (a pre-vote round, then maybe an election) per second on one node (pure:
no I/O, no clock; times in ms).

Why. A node that stalls for longer than the election timeout (a loaded machine), or many
leaderships that move at once (a node stopped or restarted), make hundreds of partitions
time out together. Each election writes (fsyncs) the quorum state on the candidate and on
each voter; with hundreds at once the answers come after the rounds have timed out, the
next rounds start, and the storm feeds itself (measured: 3 nodes at 2,000 partitions never
settled, the metadata log included). With the budget a node starts at most `rate_per_s`
campaigns a second (after a burst of `burst`): the rounds it starts finish, and the replicas
over the budget wait a fresh election timeout before they ask again (`Timing`). The metadata
log is never held (it takes no token). Timing only: a campaign deferred is a slower timer,
which the protocol already tolerates; votes, logs and the HW are untouched.
"""

from __future__ import annotations

import dataclasses
import weakref

from replog.replication.config import ReplicaConfig

CAMPAIGNS_PER_S = 20.0  # a node's sustained rate of campaigns started by data partitions
CAMPAIGNS_BURST = 50  # ... and how many may start at once after a quiet stretch
# The metadata log's election timeout (and its leader's check-quorum) is this many times a
# data partition's once it has known a leader: a loaded node's event loop stalls for
# seconds in a storm, and the metadata log losing its leader to a stall stops every create
# and delete. Its failover after a real crash takes that much longer (3-6 s at the default
# 1 s). Until a replica has known a leader (a cluster that starts, a node that restarts)
# its timeout is the node's plain one: there is no leader to keep, and 3-6 s before a
# fresh cluster's first election outlasted clients' retries of their first CreateTopic.
METADATA_PATIENCE = 3


def metadata_patience(config: ReplicaConfig) -> ReplicaConfig:
    """`config` (the node's replica config) for a replica of the metadata log."""
    return dataclasses.replace(
        config,
        election_timeout_ms_min=config.election_timeout_ms_min * METADATA_PATIENCE,
        election_timeout_ms_max=config.election_timeout_ms_max * METADATA_PATIENCE,
        first_election_timeout_ms_min=config.election_timeout_ms_min,
        first_election_timeout_ms_max=config.election_timeout_ms_max,
    )


class CampaignBudget:
    """A token bucket: `take(now_ms)` is True when a campaign may start now."""

    def __init__(self, rate_per_s: float = CAMPAIGNS_PER_S, burst: int = CAMPAIGNS_BURST) -> None:
        assert rate_per_s > 0 and burst >= 1, (rate_per_s, burst)
        self.rate_per_ms = rate_per_s / 1000.0
        self.burst = float(burst)
        self._tokens = float(burst)
        self._at_ms: int | None = None
        self.granted = 0  # campaigns allowed (for tests and metrics)
        self.deferred = 0  # election timeouts sent back to wait (for tests and metrics)

    def take(self, now_ms: int) -> bool:
        at = self._at_ms
        if at is not None and now_ms > at:
            self._tokens = min(self.burst, self._tokens + (now_ms - at) * self.rate_per_ms)
        if at is None or now_ms > at:
            self._at_ms = now_ms
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            self.granted += 1
            return True
        self.deferred += 1
        return False


_BUDGETS: weakref.WeakKeyDictionary[object, CampaignBudget] = weakref.WeakKeyDictionary()


def budget_of(owner: object) -> CampaignBudget:
    """The budget shared by every replica of `owner` (a node's event loop), made on first
    use."""
    budget = _BUDGETS.get(owner)
    if budget is None:
        budget = _BUDGETS[owner] = CampaignBudget()
    return budget
