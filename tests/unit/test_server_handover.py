"""A stopping node hands its partitions over instead of leaving them to an election."""

from __future__ import annotations

import asyncio
from pathlib import Path

from replog.replication import Acks, Role
from replog.server.handover import hand_over, pick_target
from tests.unit.test_replication_driver import DEADLINE_S, Cluster, data_values, run


def test_the_target_is_the_freshest_most_caught_up_other_voter() -> None:
    status = [(1, 100, 0, 0), (2, 90, 10, 5), (3, 100, 0, 20), (4, 100, 0, 5)]
    assert pick_target(1, (1, 2, 3), status) == 3  # 4 is not a voter; 3 beats 2 on offset
    assert pick_target(1, (1, 2, 3, 4), status) == 3  # a tie goes to the lower id
    assert pick_target(1, (1, 2), [(1, 5, 0, 0), (2, 5, 0, -1)]) is None  # never fetched
    assert pick_target(1, (1, 2), [(1, 5, 0, 0), (2, 5, 0, 60_000)]) is None  # gone quiet
    assert pick_target(1, (1,), [(1, 5, 0, 0)]) is None


def test_a_leader_hands_over_at_once_and_writes_go_on_at_the_new_leader(tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        first = await cluster.leader()
        driver = cluster.drivers[first]
        await driver.append([b"before"], Acks.ALL, DEADLINE_S)
        loop = asyncio.get_running_loop()
        # every follower has fetched recently (the driver test config polls every 100 ms)
        await asyncio.sleep(0.3)
        result = await hand_over([driver], timeout_s=DEADLINE_S)
        assert (result.led, result.moved) == (1, 1)
        assert (
            result.seconds < 0.6 * cluster.drivers[first].config.election_timeout_ms_min / 1000 * 2
        )
        started = loop.time()
        second = await cluster.leader()
        assert second != first and driver.role is Role.FOLLOWER
        await cluster.drivers[second].append([b"after"], Acks.ALL, DEADLINE_S)
        assert loop.time() - started < DEADLINE_S
        log = cluster.logs[second]
        assert data_values(log, log.high_watermark) == [b"before", b"after"]

    run(scenario, tmp_path)
