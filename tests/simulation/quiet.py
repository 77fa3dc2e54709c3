"""The node-level liveness of quiescence in the simulator (`SimConfig.quiet_fetch_wait_ms`).

Each simulated node is one process: while it runs it has a `NodeLiveness` (new at each
start: a crash loses it) fed by every message delivered to it and by heartbeats every
`HEARTBEAT_MS` to every other node, which carry the sender's incarnation and go through the
same network as the replication traffic (loss, delay, partitions, one-way cuts). The same
timer checks for silent peers (`NodeLiveness.check`); a liveness event wakes the node's
replica (`Replica.wake`), as the server's driver does.

The chaos this adds (its own random draws, so a seed's other draws stay what they were):
pauses (a node stops for a while: no ticks, no heartbeats, what is sent to it waits, then it
goes on with its state: a SIGSTOP), one-way cuts (messages from one node to another are
lost, the other way works), and reconnects (a stream opens again: `NodeLiveness.connected`).
With few appends, partitions spend long stretches quiet, so crashes, quick restarts (a new
incarnation: fetches held in the old process's memory are gone), pauses and cuts hit quiet
partitions and their leaders.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from replog.replication.liveness import NodeLiveness

if TYPE_CHECKING:
    from tests.simulation.sim import Node, Simulation

HEARTBEAT_MS = 30


@dataclass(frozen=True, slots=True)
class Heartbeat:
    src: int
    dst: int
    incarnation: int


def start_node(sim: Simulation, node: Node) -> NodeLiveness:
    """A new process's liveness; its events wake the node's replica."""
    liveness = NodeLiveness(sim.config.election_timeout_ms_min)

    def waker(peer: int) -> None:
        if node.replica is not None and node.liveness is liveness:
            sim._input(node, lambda r: r.wake(peer, sim.now))

    liveness.watch(waker)
    return liveness


def schedule(sim: Simulation) -> None:
    for node_id in sim.ids:
        sim._schedule(sim.rng.randint(0, HEARTBEAT_MS), "heartbeat", node_id)


def paused(sim: Simulation, node_id: int) -> bool:
    return sim.nodes[node_id].paused_until > sim.now


def resume(sim: Simulation, node_id: int) -> None:
    """A paused node runs again: its overdue timers first (the liveness check, then a
    tick), then what was sent to it meanwhile. So a leader paused past its check-quorum
    steps down before it answers anything: without leader leases, a read served before
    that could see a HW below one a newer leader acknowledged, with or without
    quiescence (a limit of the protocol, not modelled: the simulator's readers check
    would flag it)."""
    node = sim.nodes[node_id]
    if node.replica is None or paused(sim, node_id):
        return
    if node.liveness is not None:
        node.liveness.check(sim.now)
    sim._input(node, sim._tick)


def heartbeat(sim: Simulation, node_id: int) -> None:
    """The node's heartbeat timer: check for silent peers, then tell every peer it lives."""
    node = sim.nodes[node_id]
    if node.replica is not None and node.liveness is not None and not paused(sim, node_id):
        node.liveness.check(sim.now)
        for peer in sim.ids:
            if peer != node_id and not lost(sim, node_id, peer):
                beat = Heartbeat(node_id, peer, node.incarnation)
                sim._schedule(sim.rng.randint(1, sim.config.delay_ms_max), "beat", beat)
    sim._schedule(HEARTBEAT_MS, "heartbeat", node_id)


def lost(sim: Simulation, src: int, dst: int) -> bool:
    return sim.groups[src] != sim.groups[dst] or (src, dst) in sim.cuts


def deliver_heartbeat(sim: Simulation, beat: Heartbeat) -> None:
    node = sim.nodes[beat.dst]
    if paused(sim, beat.dst):  # it reads the stream once it runs again
        sim._schedule(node.paused_until - sim.now, "beat", beat)
        return
    if node.replica is not None and node.liveness is not None and not lost(sim, beat.src, beat.dst):
        node.liveness.heard(beat.src, sim.now, beat.incarnation)


def heard(sim: Simulation, src: int, dst: int) -> None:
    """A replication message from `src` reached `dst`: traffic counts as a heartbeat."""
    liveness = sim.nodes[dst].liveness
    if liveness is not None:
        liveness.heard(src, sim.now)


def chaos(sim: Simulation, rng: random.Random) -> None:
    """Pauses, one-way cuts and reconnects (see the module docstring)."""
    cfg = sim.config
    per_tick = 10 / 1000
    up = [i for i, n in sim.nodes.items() if n.replica is not None]
    if up and rng.random() < cfg.pauses_per_s * per_tick:
        leader = sim.leader()
        victim = leader.id if leader is not None and rng.random() < 0.5 else rng.choice(up)
        duration = rng.choice([50, 300, 1200])
        sim.nodes[victim].paused_until = max(sim.nodes[victim].paused_until, sim.now + duration)
        sim._schedule(duration, "resume", victim)
    if rng.random() < cfg.one_way_per_s * per_tick:
        if rng.random() < 0.4:
            sim.cuts.clear()
        else:
            src, dst = rng.sample(list(sim.ids), 2)
            leader = sim.leader()
            if leader is not None and rng.random() < 0.5:  # the leader's side, one way
                other = rng.choice([i for i in sim.ids if i != leader.id])
                src, dst = (leader.id, other) if rng.random() < 0.5 else (other, leader.id)
            sim.cuts.add((src, dst))
    if up and rng.random() < cfg.one_way_per_s * per_tick:
        node = sim.nodes[rng.choice(up)]
        peer = rng.choice([i for i in sim.ids if i != node.id])
        if node.liveness is not None and not lost(sim, peer, node.id):
            node.liveness.connected(peer, sim.now)
