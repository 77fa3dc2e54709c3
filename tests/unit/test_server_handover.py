"""A stopping node hands its partitions over instead of leaving them to an election."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from replog.errors import NotLeaderError
from replog.replication import Acks, ReplicaConfig, Role
from replog.replication.driver import ReplicaDriver
from replog.server.partitions.handover import FRESH_MS, hand_over, handed_over, pick_target
from replog.server.partitions.replicated import ReplicatedPartition
from replog.server.supervisor import Supervisor
from replog.storage import PartitionLog
from tests.unit.test_replication_driver import (
    DEADLINE_S,
    STORAGE,
    VOTERS,
    Cluster,
    LocalNetwork,
    data_values,
    run,
    wait_for,
)


def test_the_target_is_the_freshest_most_caught_up_other_voter() -> None:
    status = [(1, 100, 0, 0), (2, 90, 10, 5), (3, 100, 0, 20), (4, 100, 0, 5)]
    assert pick_target(1, (1, 2, 3), status) == 3  # 4 is not a voter; 3 beats 2 on offset
    assert pick_target(1, (1, 2, 3, 4), status) == 3  # a tie goes to the lower id
    assert pick_target(1, (1, 2), [(1, 5, 0, 0), (2, 5, 0, -1)]) is None  # never fetched
    assert pick_target(1, (1, 2), [(1, 5, 0, 0), (2, 5, 0, 60_000)]) is None  # gone quiet
    assert pick_target(1, (1,), [(1, 5, 0, 0)]) is None


def test_a_tie_goes_to_the_preferred_replica_else_spreads_over_the_tied_voters() -> None:
    status = [(1, 100, 0, 0), (2, 100, 0, 5), (3, 100, 0, 5)]
    # the preferred replica (voters[0]) when it is among the best: the balancer's choice
    assert [pick_target(1, (3, 1, 2), status, spread=s) for s in range(4)] == [3, 3, 3, 3]
    # this node is the preferred one: the partitions of a node handing many over spread
    assert [pick_target(1, (1, 2, 3), status, spread=s) for s in range(4)] == [2, 3, 2, 3]
    # the furthest along still wins over a tie
    ahead = [(1, 100, 0, 0), (2, 100, 0, 5), (3, 99, 1, 5)]
    assert [pick_target(1, (3, 1, 2), ahead, spread=s) for s in range(2)] == [2, 2]


def test_many_partitions_are_handed_over_a_few_at_a_time_within_the_window(
    tmp_path: Path,
) -> None:
    """A node leading many partitions hands them all over with at most `window` transfers
    under way at once (a stopping node leading 1,000 partitions used to hand the requests
    over one at a time and ran out of its time budget before most had moved)."""

    async def scenario() -> None:
        clusters = [Cluster(tmp_path / f"p{i}", election_ms=(3000, 6000)) for i in range(5)]
        try:
            for cluster in clusters:
                for node in VOTERS:
                    await cluster.start(node)
            leaders = []
            for cluster in clusters:
                await cluster.drivers[1].campaign()
                await wait_for(lambda c=cluster: c.drivers[1].serving)
                leaders.append(cluster.drivers[1])
            await wait_for(
                lambda: all(0 <= row[3] <= FRESH_MS for d in leaders for row in d.replica_status())
            )
            most = 0
            requested: list[ReplicaDriver] = []
            real = ReplicaDriver.transfer_leadership

            async def counted(self: ReplicaDriver, target: int) -> None:
                # under way: asked, and not yet led elsewhere by a leader that serves
                nonlocal most
                open_now = sum(1 for d in requested if not handed_over(d))
                most = max(most, open_now + 1)
                requested.append(self)
                await real(self, target)

            ReplicaDriver.transfer_leadership = counted  # type: ignore[method-assign]
            try:
                result = await hand_over(leaders, timeout_s=DEADLINE_S, window=2)
            finally:
                ReplicaDriver.transfer_leadership = real  # type: ignore[method-assign]
            assert (result.led, result.moved, result.serving) == (5, 5, 5)
            assert 1 <= most <= 2, most
            new = [next(n for n, d in c.drivers.items() if d.serving) for c in clusters]
            assert set(new) == {2, 3}, new  # spread over both other voters
        finally:
            for cluster in clusters:
                await cluster.close()

    asyncio.run(scenario())


def test_a_leader_hands_over_at_once_and_writes_go_on_at_the_new_leader(tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        first = await cluster.leader()
        driver = cluster.drivers[first]
        await driver.append([b"before"], Acks.ALL, DEADLINE_S)
        epoch = driver.epoch
        # every follower has fetched lately (the driver test config polls every 100 ms)
        await wait_for(lambda: all(0 <= row[3] <= FRESH_MS for row in driver.replica_status()))
        result = await hand_over([driver], timeout_s=DEADLINE_S)
        assert (result.led, result.moved, result.serving) == (1, 1, 1)
        # another voter took over in one election (TimeoutNow), and already serves
        second = await cluster.leader()
        assert second != first and driver.role is Role.FOLLOWER
        assert cluster.drivers[second].epoch == epoch + 1 and cluster.drivers[second].serving
        await cluster.drivers[second].append([b"after"], Acks.ALL, DEADLINE_S)
        log = cluster.logs[second]
        assert data_values(log, log.high_watermark) == [b"before", b"after"]

    run(scenario, tmp_path)


def test_a_stopping_leader_stays_until_its_successor_serves_without_the_third_voter(
    tmp_path: Path,
) -> None:
    """The third voter hears nothing (as a node that just restarted, whose peers' links to
    it are still in their reconnect backoff): the new leader's epoch can only commit with
    the old leader's acknowledgement, so the hand-over waits for it before the node stops."""

    async def scenario(cluster: Cluster) -> None:
        first = await cluster.leader()
        driver = cluster.drivers[first]
        await driver.append([b"before"], Acks.ALL, DEADLINE_S)
        target, third = sorted(n for n in VOTERS if n != first)
        cluster.network.cut.add(third)
        # the hand-over picks a voter that fetched lately: once the third has gone quiet
        await wait_for(lambda: pick_target(first, VOTERS, driver.replica_status()) == target)
        result = await hand_over([driver], timeout_s=DEADLINE_S)
        assert (result.led, result.moved, result.serving) == (1, 1, 1)
        successor = cluster.drivers[target]
        assert successor.role is Role.LEADER and successor.serving
        await cluster.crash(first)  # the node stops; the successor keeps serving
        cluster.network.cut.discard(third)
        await successor.append([b"after"], Acks.ALL, DEADLINE_S)
        log = cluster.logs[target]
        assert data_values(log, log.high_watermark) == [b"before", b"after"]

    run(scenario, tmp_path)


def test_a_stopping_leader_lets_a_lagging_voter_catch_up_before_it_hands_over(
    tmp_path: Path,
) -> None:
    """Once the leader is gone every commit needs both other voters: while one of them
    lags (here: cut off), the leader keeps leading and starts no transfer; when it has
    caught up, the hand-over goes ahead."""

    async def scenario(cluster: Cluster) -> None:
        first = await cluster.leader()
        driver = cluster.drivers[first]
        lagging = max(n for n in VOTERS if n != first)
        cluster.network.cut.add(lagging)
        await driver.append([b"while it lags"], Acks.ALL, DEADLINE_S)
        handing = asyncio.create_task(hand_over([driver], DEADLINE_S * 3, catch_up_s=DEADLINE_S))
        await asyncio.sleep(0.1)  # the hand-over looks every 5 ms: give it a few looks
        assert not handing.done()
        assert driver.role is Role.LEADER and driver.transferring_to is None
        cluster.network.cut.discard(lagging)
        result = await asyncio.wait_for(handing, DEADLINE_S * 3)
        assert (result.led, result.moved, result.serving) == (1, 1, 1)
        successor = await cluster.leader()
        await cluster.crash(first)
        await cluster.drivers[successor].append([b"after"], Acks.ALL, DEADLINE_S)
        log = cluster.logs[lagging]
        await wait_for(lambda: log.high_watermark == cluster.logs[successor].high_watermark)
        assert data_values(log, log.high_watermark) == [b"while it lags", b"after"]

    run(scenario, tmp_path)


def test_a_leader_handing_over_names_the_target_so_clients_go_there_at_once(
    tmp_path: Path,
) -> None:
    """While a transfer is under way the old leader answers NOT_LEADER with the target's
    address (a client retries there without a backoff), not LEADER_UNKNOWN."""

    async def scenario() -> None:
        network = LocalNetwork()
        supervisor = Supervisor(lambda exc: None)
        addresses = {n: f"node{n}.example:7070" for n in VOTERS}
        parts: dict[int, ReplicatedPartition] = {}
        try:
            for node in VOTERS:
                log = PartitionLog(tmp_path / f"node{node}", "t", 0, STORAGE)
                # a transfer is given up after election_timeout_ms_max: long enough here
                config = ReplicaConfig(
                    node, VOTERS, election_timeout_ms_min=30_000, election_timeout_ms_max=60_000,
                    fetch_wait_ms_max=100, fetch_retry_ms=200, begin_epoch_retry_ms=100,
                )  # fmt: skip
                part = ReplicatedPartition(
                    log, config, network.transport(node), addresses,
                    fetch_bytes_max=1 << 20, spawn=supervisor.spawn,
                )  # fmt: skip
                parts[node] = part
                network.attach(node, part.driver)
                await part.start()
            leader = parts[1]
            await leader.driver.campaign()
            await wait_for(lambda: leader.is_leader)
            await leader.append([b"before"], Acks.ALL, DEADLINE_S)
            network.cut.add(3)  # the target never gets TimeoutNow: the transfer stays open
            await leader.driver.transfer_leadership(3)
            assert leader.driver.transferring_to == 3
            with pytest.raises(NotLeaderError) as refused:
                leader.check_leader()
            assert refused.value.leader_id == 3
            assert refused.value.leader_address == addresses[3]
        finally:
            for part in parts.values():
                await part.stop()
                part.log.close()
            await supervisor.close()
            await network.close()

    asyncio.run(scenario())


class _Settling:
    """What `ReplicatedPartition` asks of its driver, set by the test."""

    def __init__(self, role: Role, leader_id: int | None = None) -> None:
        self.role = role
        self.serving = False
        self.stopped = False
        self.transferring_to: int | None = None
        self.leader_id = leader_id
        self.voted_for: int | None = None
        self.offline: object = None  # an I/O error took the replica offline (issue 25)


def test_a_request_during_a_leadership_change_is_answered_once_it_has_settled(
    tmp_path: Path,
) -> None:
    """A request that reaches a replica while leadership changes (a candidate; a new
    leader whose epoch is not committed yet; an old leader handing over, then a follower
    waiting to hear who won) waits instead of being refused with LEADER_UNKNOWN, which
    sends a client elsewhere with a backoff; it is answered once the change settles."""

    async def scenario() -> None:
        supervisor = Supervisor(lambda exc: None)
        log = PartitionLog(tmp_path / "node3", "t", 0, STORAGE)
        part = ReplicatedPartition(
            log, ReplicaConfig(3, VOTERS), LocalNetwork().transport(3),
            {n: f"node{n}:7070" for n in VOTERS}, fetch_bytes_max=1 << 20,
            spawn=supervisor.spawn,
        )  # fmt: skip

        async def still_waiting(waiting: asyncio.Task[None]) -> bool:
            await asyncio.sleep(0.05)  # the waiter looks every 5 ms: give it a few looks
            return not waiting.done()

        try:
            # elected, then its epoch committed: the request goes on at this node
            settling = _Settling(Role.CANDIDATE)
            part.driver = settling  # type: ignore[assignment]
            waiting = asyncio.create_task(part.wait_leadership(DEADLINE_S))
            assert await still_waiting(waiting)
            settling.role, settling.leader_id = Role.LEADER, 3
            assert await still_waiting(waiting)
            settling.serving = True
            await asyncio.wait_for(waiting, DEADLINE_S)
            part.check_leader()

            # another candidate won: the answer names it
            settling = _Settling(Role.CANDIDATE)
            part.driver = settling  # type: ignore[assignment]
            waiting = asyncio.create_task(part.wait_leadership(DEADLINE_S))
            assert await still_waiting(waiting)
            settling.role, settling.leader_id = Role.FOLLOWER, 2
            await asyncio.wait_for(waiting, DEADLINE_S)
            with pytest.raises(NotLeaderError) as refused:
                part.check_leader()
            assert refused.value.leader_id == 2

            # handing over to node 2: waits through the election it votes in, then names 2
            settling = _Settling(Role.LEADER, leader_id=3)
            settling.transferring_to = 2
            part.driver = settling  # type: ignore[assignment]
            waiting = asyncio.create_task(part.wait_leadership(DEADLINE_S))
            assert await still_waiting(waiting)
            settling.role, settling.leader_id, settling.voted_for = Role.FOLLOWER, None, 2
            settling.transferring_to = None
            assert await still_waiting(waiting)
            settling.leader_id = 2  # its BeginEpoch arrived
            await asyncio.wait_for(waiting, DEADLINE_S)
            with pytest.raises(NotLeaderError) as refused:
                part.check_leader()
            assert refused.value.leader_id == 2
        finally:
            log.close()
            await supervisor.close()

    asyncio.run(scenario())
