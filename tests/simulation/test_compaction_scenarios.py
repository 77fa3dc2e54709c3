"""Named scenarios of compacted topics (compaction.py): a follower cut off while its
leader's cleaner drops a key's superseded value and its tombstone, then healed.

With `delete_retention_ms` longer than the cut, the follower copies the leader's cleaned
range with its gaps and gets the tombstone: every replica's latest record of the key is
the tombstone, and the follower's own cleaner then drops the older value it holds. With a
`delete_retention_ms` shorter than the cut, the tombstone has expired and the leader
dropped it: the follower copies a gap where it was and keeps the key's older value, the
limit of `delete.retention.ms` that docs/operations.md (Log compaction) states and Kafka
shares; the checks allow exactly that shape and count it (`resurrections`).
"""

from __future__ import annotations

from replog.replication import Acks
from tests.simulation.compaction import CompactionConfig
from tests.simulation.sim import Node, SimConfig, Simulation, _check_converged

KEY, OTHER = 0, 1


def _calm(delete_retention_ms: int) -> Simulation:
    config = SimConfig(
        seed=7,
        crash_per_s=0.0,
        partition_per_s=0.0,
        appends_per_s=0.0,
        loss=0.0,
        duplication=0.0,
        compaction=CompactionConfig(
            keys=2,
            tombstones=0.0,
            clean_interval_ms=10**7,  # passes only when the scenario asks
            delete_retention_ms=delete_retention_ms,
            segment_records_max=2,
        ),
    )
    sim = Simulation(config)
    assert sim.run_for(2000, lambda: sim.leader() is not None)
    return sim


def _append(sim: Simulation, key: int, tombstone: bool = False) -> None:
    leader = sim.leader()
    assert leader is not None and sim.compaction is not None
    sim.compaction.script.append((key, tombstone))
    request = sim.requests[sim.client_append(Acks.ALL, leader.id, 1)]
    assert sim.run_for(2000, lambda: request.outcome != "pending")
    assert request.outcome == "acked"


def _holds(sim: Simulation, node: Node, key: int) -> list[int]:
    """Offsets of the key's records the node holds (present, below its HW)."""
    assert sim.compaction is not None
    gone = sim.compaction.gone(node.id)
    wanted = f"k{key}".encode()
    return [
        o
        for o in range(node.log_start, node.hw)
        if o not in gone and sim.compaction._meta(o).key == wanted
    ]


def _cut_follower_while_the_leader_drops_a_tombstone(
    delete_retention_ms: int,
) -> tuple[Simulation, Node, Node]:
    sim = _calm(delete_retention_ms)
    _append(sim, KEY)
    sim.run_for(500)  # every replica holds the value
    leader = sim.leader()
    assert leader is not None
    follower = next(n for n in sim.nodes.values() if n is not leader)
    sim.partition({follower.id})
    assert sim.leader() is leader
    _append(sim, KEY, tombstone=True)
    for _ in range(6):  # later records, so that the tombstone's segment closes below the HW
        _append(sim, OTHER)
    sim.run_for(1000)
    assert sim.compaction is not None
    sim.compaction.clean(leader.id)
    sim.run_for(200)  # the pass's swaps
    sim.heal()
    _check_converged(sim, sim.now + 5000)
    return sim, leader, follower


def test_a_follower_behind_by_less_than_delete_retention_gets_the_tombstone() -> None:
    sim, leader, follower = _cut_follower_while_the_leader_drops_a_tombstone(10**7)
    compaction = sim.compaction
    assert compaction is not None
    tombstone = _holds(sim, leader, KEY)
    assert len(tombstone) == 1 and compaction._meta(tombstone[0]).tombstone
    assert compaction.stats.gaps_received > 0  # the superseded values of the other key
    assert _holds(sim, follower, KEY)[-1] == tombstone[0]
    sim.run_for(100)  # flushed
    compaction.clean(follower.id)
    sim.run_for(200)
    assert _holds(sim, follower, KEY) == tombstone  # its own pass dropped the old value
    compaction.check_final()
    assert compaction.stats.resurrections == 0


def test_a_follower_behind_by_more_than_delete_retention_keeps_the_older_value() -> None:
    sim, leader, follower = _cut_follower_while_the_leader_drops_a_tombstone(0)
    compaction = sim.compaction
    assert compaction is not None
    assert _holds(sim, leader, KEY) == []  # value and tombstone dropped
    held = _holds(sim, follower, KEY)
    assert len(held) == 1 and not compaction._meta(held[0]).tombstone
    compaction.check_final()  # allowed in exactly this shape, and counted
    assert compaction.stats.resurrections == 1
