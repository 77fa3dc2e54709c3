"""The node-wide campaign budget (`replication/campaigns.py`): election timeouts of data
partitions start campaigns only within it; the metadata log's never wait."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from replog.replication import BeginEpoch, Replica, ReplicaConfig, Role, VoteRequest, VoteResponse
from replog.replication.campaigns import CampaignBudget, budget_of, metadata_patience
from replog.replication.driver import ReplicaDriver
from replog.replication.outputs import Send
from replog.replication.ticker import Ticker
from replog.storage import PartitionLog
from tests.unit.test_replication_driver import STORAGE, VOTERS, Cluster, wait_for


def test_the_budget_grants_a_burst_then_its_rate() -> None:
    budget = CampaignBudget(rate_per_s=10.0, burst=3)
    assert [budget.take(1000) for _ in range(4)] == [True, True, True, False]
    assert not budget.take(1050)  # half a token since
    assert budget.take(1100)  # one token a 100 ms
    assert not budget.take(1100)
    assert budget.take(5000) and budget.take(5000) and budget.take(5000)  # at most the burst
    assert not budget.take(5000)
    assert not budget.take(4000)  # a clock read late never takes tokens back nor adds any
    assert (budget.granted, budget.deferred) == (7, 5)


def test_a_spent_budget_holds_a_data_partitions_election_not_the_metadata_logs(
    tmp_path: Path,
) -> None:
    """With the node's budget spent, three data replicas' election timeouts pass again and
    again and none campaigns; a token a second later, one of them leads. Three replicas of
    the metadata log (`essential`) elect with the budget spent."""

    async def main() -> None:
        budget = budget_of(Ticker.of(asyncio.get_running_loop()))
        budget._tokens, budget.rate_per_ms = 0.0, 1e-9  # spent, for good
        data, meta = Cluster(tmp_path / "data"), Cluster(tmp_path / "meta")
        try:
            for node in VOTERS:
                await data.start(node)
            await wait_for(lambda: budget.deferred >= 10)  # timeouts of every replica, held
            assert not any(d.role is Role.LEADER for d in data.drivers.values())
            assert budget.granted == 0
            for node in VOTERS:
                await _start_essential(meta, node)
            await meta.leader()
            assert budget.granted == 0  # the metadata log took no token
            budget.rate_per_ms = 1.0 / 1000  # one token a second
            await data.leader()
        finally:
            await data.close()
            await meta.close()

    asyncio.run(main())


async def _start_essential(cluster: Cluster, node: int) -> ReplicaDriver:
    """Start `node` of `cluster` as a replica of the metadata log (as `Cluster.start`)."""
    log = PartitionLog(cluster.root / f"node{node}", "__cluster", 0, STORAGE)
    config = ReplicaConfig(
        node, VOTERS, election_timeout_ms_min=300, election_timeout_ms_max=600,
        fetch_wait_ms_max=100, fetch_retry_ms=200, begin_epoch_retry_ms=100,
    )  # fmt: skip
    transport = cluster.network.transport(node)
    driver = ReplicaDriver(
        log, config, transport, rng=random.Random(node), tick_ms=20, essential=True
    )
    cluster.logs[node], cluster.drivers[node] = log, driver
    cluster.network.attach(node, driver)
    await driver.start()
    return driver


def test_the_metadata_log_waits_longer_before_an_election_than_a_data_partition() -> None:
    config = ReplicaConfig(1, VOTERS, election_timeout_ms_min=1000, election_timeout_ms_max=2000)
    patient = metadata_patience(config)
    assert (patient.election_timeout_ms_min, patient.election_timeout_ms_max) == (3000, 6000)
    first = (patient.first_election_timeout_ms_min, patient.first_election_timeout_ms_max)
    assert first == (1000, 2000)  # until it has known a leader (below)
    assert patient.fetch_retry_ms == config.fetch_retry_ms and patient.voters == VOTERS


def _first_prevote_ms(replica: Replica, since_ms: int) -> int:
    """When `replica`'s election timeout first asks for pre-votes after `since_ms` (ticks
    every 10 ms)."""
    for now in range(since_ms, since_ms + 20_000, 10):
        if any(
            isinstance(o, Send) and isinstance(o.message, VoteRequest) for o in replica.tick(now)
        ):
            return now - since_ms
    raise AssertionError("no election timeout within 20 s")


def test_the_metadata_logs_patience_keeps_a_known_leader_not_a_clusters_first_election() -> None:
    """A replica of the metadata log that has known no leader since it started (a cluster
    that starts: nothing to keep) asks for pre-votes after the node's plain timeout (1-2 s);
    once it has heard a leader, a leader that goes silent is waited out 3-6 s, on every seed;
    after it has led and stepped down too."""
    config = metadata_patience(
        ReplicaConfig(1, VOTERS, election_timeout_ms_min=1000, election_timeout_ms_max=2000)
    )
    for seed in range(20):
        fresh = Replica(config, random.Random(seed), 0)
        fresh.start()
        assert 1000 <= _first_prevote_ms(fresh, 0) <= 2000
        followed = Replica(config, random.Random(seed), 0)
        followed.start()
        followed.receive(BeginEpoch(1, 2), 0)  # replica 2 leads epoch 1
        assert 3000 <= _first_prevote_ms(followed, 0) <= 6000
        led = Replica(config, random.Random(seed), 0)
        led.start()
        led.campaign(0)
        led.receive(VoteResponse(1, 2, True), 0)
        assert led.role is Role.LEADER
        led.receive(BeginEpoch(2, 3), 100)  # a newer leader, silent from then on
        assert 3000 <= _first_prevote_ms(led, 100) <= 6000
