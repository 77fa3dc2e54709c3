"""A replica whose election rounds keep ending without a leader campaigns less often
(each round costs a quorum-state fsync on every voter); word from a leader ends that."""

from __future__ import annotations

import random

from replog.replication import BeginEpoch, Replica, VoteResponse
from replog.replication.roles.core import ELECTION_BACKOFF_MAX, Step
from tests.unit.test_replication_replica import config


def deadline(r: Replica) -> int:
    return r._core.election_deadline_ms


def test_failed_rounds_double_the_election_timeout_up_to_a_cap_and_a_leader_resets_it() -> None:
    r = Replica(config(1, voters=(1, 2, 3)), random.Random(0), 0)
    r.start()
    r.receive(BeginEpoch(3, 2), 0)
    now = deadline(r)
    assert 1000 <= now <= 2000  # following a leader: the configured timeout
    r.tick(now)  # the leader went silent: a first round of pre-votes, no backoff yet
    assert r._core.step is Step.PRE_CANDIDATE
    assert 1000 <= deadline(r) - now <= 2000
    for failed in range(1, ELECTION_BACKOFF_MAX + 3):
        now = deadline(r)
        r.tick(now)  # nobody answered: the round failed
        factor = 1 << min(failed, ELECTION_BACKOFF_MAX)
        assert 1000 * factor <= deadline(r) - now <= 2000 * factor, failed
    r.receive(BeginEpoch(9, 3), now)  # a leader: no backoff any more
    assert 1000 <= deadline(r) - now <= 2000
    assert r._core.failed_rounds == 0


def test_a_late_vote_that_elects_the_candidate_ends_its_backoff() -> None:
    r = Replica(config(1, voters=(1, 2, 3)), random.Random(0), 0)
    r.start()
    r.campaign(0)
    r.tick(10_000)  # its election (epoch 1) timed out: pre-votes, its votes still open
    r.tick(30_000)  # and that round too
    assert (r._core.step, r._core.failed_rounds, r.epoch) == (Step.PRE_CANDIDATE, 2, 1)
    r.receive(VoteResponse(1, 2, True), 30_000)  # a late vote of epoch 1 elects it
    assert r._core.step is Step.LEADER
    assert r._core.failed_rounds == 0
