"""A repaired voter keeps its vote floor until it holds again what it acknowledged in its
current epoch (`Core.caught_up_after_repair`), found by the compaction sweep (seed 2272 of
`--flush never --interrupts --transfers --corruption --compaction`).

Node 2 acknowledges a record of the current epoch that its leader has not counted yet (the
fetch that says so is late: a slow or reordered message), then discards its log (bit rot)
and refetches it. The leader's answers carry the old HW, which is past the epoch's start:
the rule "caught up once the leader's HW covers my epoch" held already, though node 2
acknowledged more than that HW in this very epoch. The late fetch then lets the leader
commit the record with node 2's acknowledgement while node 2 lacks it and votes freely: a
vote from it could elect a leader without a committed record.
"""

from __future__ import annotations

from replog.replication import Acks, FetchRequest
from tests.simulation.sim import Message, Node, _Delivery
from tests.simulation.test_scenarios import calm, elect, wait_replicated


def test_a_repaired_voter_keeps_its_floor_until_it_holds_what_it_acknowledged_this_epoch() -> None:
    sim = calm(3, election_timeout_ms_min=150, election_timeout_ms_max=300)
    elect(sim, 1)
    for _ in range(3):
        sim.client_append(Acks.ALL, 1, 2)
    wait_replicated(sim, 1, [2, 3])
    assert sim.run_for(500, lambda: sim.nodes[2].hw == len(sim.nodes[1].log))
    sim.partition({1, 2}, {3})
    held: list[Message] = []
    send = sim._send

    def holding(node: Node, to: int, message: Message) -> None:
        if node.id == 2 and to == 1 and isinstance(message, FetchRequest) and holding.on:
            held.append(message)  # late: delivered below
        else:
            send(node, to, message)

    holding.on = True  # type: ignore[attr-defined]
    sim._send = holding  # type: ignore[method-assign]
    hw = sim.nodes[1].hw
    request = sim.client_append(Acks.ALL, 1, 1)
    assert sim.run_for(500, lambda: len(sim.nodes[2].log) == hw + 1)
    sim.run_for(100)
    assert sim.requests[request].outcome == "pending" and sim.nodes[1].hw == hw
    sim.corrupt(2, offset=0)
    sim.repair(2)
    assert sim.nodes[2].quorum.vote_floor == hw + 1
    holding.on = False  # type: ignore[attr-defined]
    sim.fetch_records_max = 1  # node 2 refetches one record at a time: it stops at the HW
    assert sim.run_for(500, lambda: sim.nodes[2].flushed >= hw)
    assert len(sim.nodes[2].log) == hw
    assert sim.nodes[2].quorum.vote_floor == hw + 1, "floor cleared below what it acked"
    late = max(held, key=lambda m: m.fetch_offset)
    assert late.fetch_offset == hw + 1
    sim._schedule(0, "msg", _Delivery(2, 1, late))
    # (the checker: the leader's HW counts node 2 only while its floor stands)
    assert sim.run_for(1000, lambda: sim.requests[request].outcome == "acked")
    wait_replicated(sim, 1, [2])
    caught_up = sim.run_for(1000, lambda: sim.nodes[2].quorum.vote_floor == 0)
    assert caught_up, "holding what it acknowledged, it votes again"
