"""The server's membership controllers as actors of the simulator (`SimConfig.controller`).

Two controllers of the server move a partition's membership through the core, and both are
pure at heart; here each runs on every simulated node at seeded random intervals
(`control_interval_ms`, +-50%), computing its step with the REAL pure function from the
core's state as the server computes it from the driver, and applying it through the inputs
the driver uses (`Replica.change_membership`, `Replica.transfer_leadership`):

* `reassign`: `replog.server.cluster.reassignment.decide` on the partition's serving leader
  (`Reassigner._step`): `State(me, voters, observers, target, caught_up(HW, replica_status
  rows, me))`, the membership being the latest of the core's log, the HW the driver's, the
  rows `Simulation.replica_status` (as `ReplicaDriver.replica_status`). A `Change` waits for
  its record to commit (or a refusal, a lost caller or the caller's timeout), a `Transfer`
  settles `SETTLE_S`, `Complete` asks for the current membership again (it waits for its
  record's commit) and then proposes `complete_reassignment`. Refusals back off as the loop
  does (`BACKOFF_S_MIN` doubling to `BACKOFF_S_MAX`, the longest for refusals that are not
  retriable); the progress is dropped when the node stops leading, as the loop drops it.
  The metadata is a real `MetadataImage` (one topic, one partition) to which the operator's
  `reassign_partition` commands and the completions are applied at once (validated by it:
  while a move is in progress only a cancel, the assignment itself, is accepted). A node
  starts its replica when a target first names it, with the assignment as voters plus
  itself as observer and the unreachable vote floor (`Node._make_replica`: `JOINING_STATE`),
  and deletes it (disk wiped) a little after a completion leaves it out of the partition's
  hosts (the reconciler).
* `keeper`: `replog.server.cluster.membership.decide` on the `__cluster` partition's serving leader
  (`QuorumKeeper.run_once`) after the members of a `MetadataImage` changed by the
  operator's `add_node` / `remove_node` (first five members by id vote, the others observe).
  A node added starts (a little later) as the server starts a node being added on an empty
  directory (identity start "joining", `Node.__init__`): an observer, its peer list (the
  members when it was added) but itself voting (`joining_members`), under the unreachable
  vote floor (`identity.UNREACHABLE_FLOOR`); the log's membership governs once it holds a
  record, and it holds one from the keeper's first step on (the starting quorum, recorded
  at the first election). (The server starts a node being added from the quorum a peer's
  log reports, itself an observer: the same sets of voters, once it fetched the record.) A
  node removed is stopped and its data deleted once it is out of the leader's membership, or
  at once now and then (a dead node removed), one such voter at a time so that the quorum
  stays. The keeper's loop waits `IDLE_POLL_S` / `BUSY_POLL_S` / its backoff, and is woken
  early when its node applies metadata (here: its HW moved).

The operator moves at `moves_per_s` during the chaos (a new target, or a cancel; a member
added or removed, the leader's own node among them), and once more when the cluster heals
(the reassigner's only if no move is in progress), so that schedules converge from some
change. After
healing, `check_done` then requires the controller to reach its target within
`controller_bound_ms`: the reassignment completed (its membership committed and equal to
the assignment), or the keeper's `decide` answering None on the serving leader with its
membership committed.

What is simplified: the metadata is one oracle applied at once (in the server it is the
`__cluster` log, applied on each node a little later), and the completion proposal always
reaches it. A caller cancelled by `interrupts_per_s` counts as a caller that timed out.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from replog.errors import ReplogError
from replog.replication import AckFailure, QuorumState, Replica, Role
from replog.server.cluster import membership, reassignment
from replog.server.cluster.identity import UNREACHABLE_FLOOR
from replog.server.cluster.reassignment import Change, Complete, Transfer, Wait, caught_up
from replog.server.meta.metadata import Command, CreateTopic, MetadataImage, NodeAddress, TopicMeta
from replog.server.meta.metadata_log import replica_config_members
from replog.server.partitions.handover import FRESH_MS
from tests.simulation.checker import check

if TYPE_CHECKING:
    from tests.simulation.sim import SimConfig, Simulation

TOPIC = "moved"
# The driver raises MembershipChangeRefusedError (not retriable) for these refusals, and a
# retriable error (busy, not leader, outcome unknown) for every other (`ReplicaDriver._failure`).
REFUSED = (
    AckFailure.INVALID_MEMBERSHIP,
    AckFailure.TOO_MANY_VOTER_CHANGES,
    AckFailure.LEADER_REMOVAL,
)
# The quorum state a replica that a target adds starts with: the unreachable vote floor, as
# `Node._make_replica` starts it (`identity.floor_replica`), so that a replica deleted by a
# completion and named again votes only once it caught up with a leader. (Before, it started
# with none, and voted, empty, for a stale candidate: see test_controller_schedules.py.)
JOINING_STATE: QuorumState = UNREACHABLE_FLOOR
CALL_TIMEOUT_MS = 5000  # the loops' change_membership timeout (ack_timeout_ms: 30 s default)
START_DELAY_MS_MAX = 500  # a node's replica starts or is deleted this long after the metadata
DEAD_NOTICED_MS = 500  # after FRESH_MS, before the operator removes another node


@dataclass
class _Loop:
    """One node's controller task (a new one each time the node's process starts)."""

    incarnation: int
    waiting: int = 0  # the membership request it awaits (0: none)
    waiting_until: int = 0
    step: Change | Complete | None = None  # what it awaits
    attempts: int = 0  # refusals in a row
    next_at: int = 0  # reassigner: retry_at; keeper: the end of its wait
    hw_seen: int = -1  # keeper: its node's HW at its last pass (metadata applied: a wake)


@dataclass
class Controller:
    """What both controllers share: the per-node loops, the awaited calls, the log."""

    sim: Simulation
    rng: random.Random
    image: MetadataImage = field(default_factory=MetadataImage)
    loops: dict[int, _Loop] = field(default_factory=dict)
    steps: list[tuple[int, int, str]] = field(default_factory=list)  # (ms, node, step)
    steps_at_heal: int = 0
    moves: list[tuple[int, str]] = field(default_factory=list)  # (ms, the operator's move)

    def interval(self) -> int:
        every = self.sim.config.control_interval_ms
        return self.rng.randint(every // 2, every * 3 // 2)

    def run_pass(self, node_id: int) -> None:
        """One pass of the node's loop (a new loop if its process restarted): while a call
        is awaited, only see whether it ended; else `step`."""
        node = self.sim.nodes[node_id]
        loop = self.loops.get(node_id)
        if loop is None or loop.incarnation != node.incarnation:
            loop = self.loops[node_id] = _Loop(node.incarnation)
        if node.replica is None:
            return
        if not loop.waiting:
            self.step(node_id, loop, node.replica)
            return
        request = self.sim.membership_requests[loop.waiting]
        if request.outcome == "pending" and self.sim.now < loop.waiting_until:
            return
        loop.waiting = 0
        if request.outcome == "acked":
            self.ended(loop, True, True)
        elif request.outcome == "failed":
            self.ended(loop, False, request.failure not in REFUSED)
        else:  # the caller timed out or was cancelled: outcome unknown (retriable)
            self.ended(loop, False, True)

    def step(self, node_id: int, loop: _Loop, replica: Replica) -> None:
        """The loop's pass when it awaits nothing."""
        raise NotImplementedError

    def ended(self, loop: _Loop, ok: bool, retriable: bool) -> None:
        """The awaited call ended: succeeded, or failed (retriable or not)."""
        raise NotImplementedError

    def handle(self, payload: object) -> int | None:
        """A "control" event: a node's pass (payload: its id; returns when to pass again),
        or a replica started or deleted on a node (("start" | "delete", id))."""
        if isinstance(payload, int):
            self.run_pass(payload)
            return self.interval()
        assert isinstance(payload, tuple)
        kind, node_id = payload
        if kind == "start":
            self.start(node_id)
        else:
            self.delete(node_id)
        return None

    def ask(self, node_id: int, loop: _Loop, step: Change | Complete) -> None:
        replica = self.sim.nodes[node_id].replica
        assert replica is not None
        m = replica.membership
        voters, observers = m.voters, m.observers  # Complete: wait for its commit
        if isinstance(step, Change):
            voters, observers = step.voters, step.observers
        loop.waiting = self.sim.change_membership(node_id, voters, observers)
        loop.waiting_until = self.sim.now + CALL_TIMEOUT_MS
        loop.step = step

    def apply(self, command: Command) -> None:
        """A metadata command, committed and applied at once."""
        self.image.apply(self.image.applied_offset, command)

    def note(self, node_id: int, step: object) -> None:
        self.steps.append((self.sim.now, node_id, repr(step)))

    def start(self, node_id: int) -> None:
        raise NotImplementedError

    def delete(self, node_id: int) -> None:
        sim = self.sim
        if node_id not in sim.deleted:
            sim.delete_replica(node_id)

    def chaos(self) -> None:
        """The operator's moves during the chaos."""
        raise NotImplementedError

    def settle(self) -> None:
        """The cluster heals: the operator moves once more (the reassigner's only if no
        move is in progress)."""
        self.steps_at_heal = len(self.steps)
        self.last_move()

    def last_move(self) -> None:
        raise NotImplementedError

    def steps_since_heal(self) -> int:
        """The steps taken since the cluster healed (a Wait is no step)."""
        return sum(1 for _, _, step in self.steps[self.steps_at_heal :] if "Wait(" not in step)

    def done(self) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


class Reassigner(Controller):
    """`replog.server.cluster.reassignment` on every node, for the simulation's one partition."""

    def __init__(self, sim: Simulation, rng: random.Random) -> None:
        super().__init__(sim, rng)
        self.apply(CreateTopic(TOPIC, 1, (sim.voters,)))
        sim.deleted.update(sim.spares)  # no replica until a target names the node
        self.completed: list[tuple[int, tuple[int, ...]]] = []  # (ms, replicas)
        self.wiped: set[int] = set()  # nodes whose replica a completion deleted

    @property
    def meta(self) -> TopicMeta:
        return self.image.topics[TOPIC]

    def target(self) -> tuple[int, ...] | None:
        return self.meta.targets.get(0)

    def assignment(self) -> tuple[int, ...]:
        assignment: tuple[int, ...] = self.meta.assignment[0]
        return assignment

    def ended(self, loop: _Loop, ok: bool, retriable: bool) -> None:
        awaited = loop.step
        if ok and isinstance(awaited, Complete):
            ok, retriable = self._complete(awaited.replicas), True
        if ok:
            loop.attempts = 0
            loop.next_at = self.sim.now + (0 if isinstance(awaited, Change) else _ms(SETTLE_S))
        else:
            self._failed(loop, retriable)

    def step(self, node_id: int, loop: _Loop, replica: Replica) -> None:
        """`Reassigner._step` (the loop drops a partition's progress where it does not
        lead it, or when it is not being moved)."""
        sim = self.sim
        target = self.target()
        if target is None or not replica.serving:  # (its progress is dropped)
            loop.attempts, loop.next_at = 0, 0
            return
        if loop.next_at > sim.now:
            return
        m = replica.membership
        status = sim.replica_status(node_id)
        hw = sim.nodes[node_id].hw  # (the driver's PartitionLog HW)
        state = reassignment.State(
            node_id, m.voters, m.observers, target, caught_up(hw, status, node_id)
        )
        step = reassignment.decide(state)
        self.note(node_id, step)
        if isinstance(step, Change | Complete):
            self.ask(node_id, loop, step)
        elif isinstance(step, Transfer):
            sim.transfer(node_id, step.target)  # returns once the owner took it
            loop.attempts = 0
            loop.next_at = sim.now + _ms(SETTLE_S)
        else:
            assert isinstance(step, Wait)

    def _failed(self, loop: _Loop, retriable: bool) -> None:
        loop.attempts += 1
        delay_s = BACKOFF_S_MAX
        if retriable:
            delay_s = min(BACKOFF_S_MAX, BACKOFF_S_MIN * 2 ** (loop.attempts - 1))
        loop.next_at = self.sim.now + _ms(delay_s)

    def _complete(self, replicas: tuple[int, ...]) -> bool:
        """Propose `complete_reassignment` (applied at once); False if refused (not the
        reassignment in force)."""
        meta = self.meta
        try:
            command = self.image.complete_reassignment(TOPIC, meta.topic_id, 0, replicas)
        except ReplogError:
            return False
        hosts = set(meta.hosts(0))
        self.apply(command)
        self.completed.append((self.sim.now, replicas))
        # the nodes left out delete their replica (each when it applies the completion)
        for gone in sorted(hosts - set(self.meta.hosts(0))):
            delay = self.rng.randint(0, START_DELAY_MS_MAX)
            self.sim._schedule(delay, "control", ("delete", gone))
        return True

    def delete(self, node_id: int) -> None:
        if node_id not in self.meta.hosts(0):  # (a new target may name it again)
            super().delete(node_id)
            self.wiped.add(node_id)

    def start(self, node_id: int) -> None:
        """The node's reconciler creates the replica a target added (`_make_replica`)."""
        sim = self.sim
        if node_id in sim.deleted and node_id in self.meta.hosts(0):
            sim.create_replica(node_id, self.assignment(), (node_id,), JOINING_STATE)

    def reassign(self, replicas: tuple[int, ...]) -> bool:
        """The operator's `replog partition reassign` (validated and applied at once)."""
        before = set(self.meta.hosts(0))
        try:
            command = self.image.reassign_partition(TOPIC, 0, replicas, self.sim.ids)
        except ReplogError:
            return False
        self.apply(command)
        self.moves.append((self.sim.now, f"reassign {list(replicas)}"))
        for added in sorted(set(self.meta.hosts(0)) - before):
            delay = self.rng.randint(0, START_DELAY_MS_MAX)
            self.sim._schedule(delay, "control", ("start", added))
        return True

    def _new_target(self) -> tuple[int, ...]:
        """A random target of as many replicas; half of the time it names again a node
        whose replica a completion deleted (its new replica starts empty)."""
        rng = self.rng
        size = len(self.sim.voters)
        again = sorted(self.sim.deleted & self.wiped)
        while True:
            replicas = tuple(rng.sample(self.sim.ids, size))
            if again and rng.random() < 0.5 and not set(again) & set(replicas):
                continue
            if replicas != self.assignment():
                return replicas

    def chaos(self) -> None:
        cfg = self.sim.config
        if self.rng.random() >= cfg.moves_per_s * TICK_S:
            return
        target = self.target()
        if target is None:
            self.reassign(self._new_target())
        elif target != self.assignment() and self.rng.random() < 0.5:
            self.reassign(self.assignment())  # cancel: back to the replicas of before

    def last_move(self) -> None:
        if self.target() is None:
            self.reassign(self._new_target())

    def done(self) -> bool:
        """No reassignment in progress, and the leader's membership (committed) is the
        assignment, every replica a voter."""
        leader = self.sim.leader()
        if self.target() is not None or leader is None or leader.replica is None:
            return False
        replica = leader.replica
        m, history = replica.membership, replica.membership_history
        committed = not history or history[-1].offset < replica.high_watermark
        return (
            replica.serving
            and committed
            and set(m.voters) == set(self.assignment())
            and not m.observers
        )

    def describe(self) -> str:
        return (
            f"assignment {list(self.assignment())}, target {self.target()}, "
            f"moves {self.moves[-4:]}, completed {self.completed[-2:]}, steps {self.steps[-6:]}"
        )


class Keeper(Controller):
    """`replog.server.cluster.membership.QuorumKeeper` on every node, for the `__cluster`
    partition."""

    def __init__(self, sim: Simulation, rng: random.Random) -> None:
        super().__init__(sim, rng)
        members = (*sim.voters, *sim.observers)
        self.image = MetadataImage({i: _address(i) for i in members})
        sim.deleted.update(sim.spares)  # not started yet
        self.leaving: set[int] = set()  # removed members still running
        self.dead: set[int] = set()  # removed and stopped before they left the membership
        self.removals_from = 0  # no removal before (a node died: see `_move`)
        self.peer_lists: dict[int, list[int]] = {}  # a node added: the members then

    def members(self) -> list[int]:
        return sorted(self.image.nodes)

    def run_pass(self, node_id: int) -> None:
        self._stop_gone()
        super().run_pass(node_id)

    def ended(self, loop: _Loop, ok: bool, retriable: bool) -> None:
        if ok:
            loop.attempts, loop.next_at = 0, self.sim.now
            return
        loop.attempts += 1
        delay_s = membership.BACKOFF_S_MAX
        if retriable:
            delay_s = min(delay_s, membership.BUSY_POLL_S * 2.0 ** (loop.attempts - 1))
        loop.next_at = self.sim.now + _ms(delay_s)

    def step(self, node_id: int, loop: _Loop, replica: Replica) -> None:
        """`QuorumKeeper.run_once`, and its wait (woken when its node applies metadata)."""
        sim = self.sim
        node = sim.nodes[node_id]
        woken = node.hw != loop.hw_seen  # the node applied metadata: the keeper is woken
        loop.hw_seen = node.hw
        if sim.now < loop.next_at and not woken:
            return
        if replica.role is not Role.LEADER or not replica.serving:
            loop.attempts, loop.next_at = 0, sim.now + _ms(membership.IDLE_POLL_S)
            return
        m = replica.membership
        ready = caught_up(node.hw, sim.replica_status(node_id), node_id)
        recorded = bool(replica.membership_history)
        step = membership.decide(
            node_id, m.voters, m.observers, self.members(), ready, recorded=recorded
        )
        if step is None:
            loop.attempts, loop.next_at = 0, sim.now + _ms(membership.IDLE_POLL_S)
            return
        self.note(node_id, step)
        if isinstance(step, Wait):
            loop.next_at = sim.now + _ms(membership.BUSY_POLL_S)
        elif isinstance(step, Change):
            self.ask(node_id, loop, step)
        else:
            sim.transfer(node_id, step.target)
            loop.attempts, loop.next_at = 0, sim.now + _ms(membership.BUSY_POLL_S)

    def _stop_gone(self) -> None:
        """Removed members out of the serving leader's committed membership are stopped and
        their data directory deleted (the operator's `kill`, then `rm -r`)."""
        leader = self.sim.leader()
        if not self.leaving or leader is None or leader.replica is None:
            return
        replica = leader.replica
        history = replica.membership_history
        if not replica.serving or (history and history[-1].offset >= replica.high_watermark):
            return
        for gone in sorted(self.leaving - {leader.id, *replica.membership.replicas}):
            self.leaving.discard(gone)
            self.dead.discard(gone)
            if gone not in self.sim.deleted:
                self.sim.delete_replica(gone)

    def start(self, node_id: int) -> None:
        """`replog serve` of a node added, on an empty directory: its peers are the members
        when `replog node add` answered (itself among them). It starts as the fix means a
        node being added to start ("joining": an observer), under the unreachable vote
        floor. (The server's `identity.decide` picks "joining" for it: the quorum the
        freshest peer's log holds, itself an observer; see test_controller_schedules.py.)"""
        sim = self.sim
        if node_id in sim.deleted and node_id in self.image.nodes:
            voters, observers = START_MEMBERS(node_id, self.peer_lists[node_id])
            sim.create_replica(node_id, voters, observers, UNREACHABLE_FLOOR)

    def add(self, node_id: int) -> None:
        self.apply(self.image.add_node(node_id, _address(node_id).address))
        self.peer_lists[node_id] = self.members()
        self.moves.append((self.sim.now, f"add {node_id}"))
        self.leaving.discard(node_id)
        self.dead.discard(node_id)
        delay = self.rng.randint(0, START_DELAY_MS_MAX)
        self.sim._schedule(delay, "control", ("start", node_id))

    def remove(self, node_id: int, *, dead: bool) -> None:
        self.apply(self.image.remove_node(node_id))
        self.moves.append((self.sim.now, f"remove {node_id}" + (" (dead)" if dead else "")))
        self.leaving.add(node_id)
        if dead:
            self.dead.add(node_id)
            self.sim.delete_replica(node_id)
            self.removals_from = self.sim.now + FRESH_MS + DEAD_NOTICED_MS

    def _move(self, *, kill: bool) -> None:
        """Add a node, or remove one (the leader's own now and then; a dead one now and
        then). With bit rot, three members at least and no dead node: a node repairing its
        disk under its vote floor is then the one replica the quorum may lack. After a
        dead node (which dies while the keeper has nothing to do), no other is removed
        until the leader sees it down: `decide` counts a replica that fetched within
        `FRESH_MS` as caught up, and removing a live voter while a dead one still looks
        caught up leaves voters that can never elect. (The keeper's own pending removals
        did that too, with a voter dying in that second: a limit of `caught_up`, not
        modelled here, so dead nodes die only while the keeper is idle.)"""
        rng = self.rng
        sim = self.sim
        members = self.members()
        rot = bool(sim.config.corruptions_per_s)
        fewest = 3 if rot else 1
        outside = [i for i in sim.ids if i not in self.image.nodes]
        leader = sim.leader()
        if outside and (len(members) <= fewest or rng.random() < 0.5):
            self.add(rng.choice(outside))
            return
        if len(members) <= fewest or sim.now < self.removals_from:
            return
        if leader is not None and leader.id in members and rng.random() < 0.3:
            gone = leader.id  # the leader leaves: it hands over first
        else:
            gone = rng.choice(members)
        voters = leader.replica.membership.voters if leader and leader.replica else ()
        # a dead node removed: at most one such voter at a time, of three or more voters,
        # while the keeper has nothing else to do
        dead = (
            kill
            and not rot
            and rng.random() < 0.25
            and leader is not None
            and gone != leader.id
            and len(voters) >= 3
            and not self.dead & set(voters)
            and self._decided() is None
        )
        self.remove(gone, dead=dead)

    def chaos(self) -> None:
        if self.rng.random() < self.sim.config.moves_per_s * TICK_S:
            self._move(kill=True)

    def last_move(self) -> None:
        self._move(kill=False)

    def _decided(self) -> object:
        leader = self.sim.leader()
        if leader is None or leader.replica is None:
            return "no leader"
        replica = leader.replica
        m = replica.membership
        ready = caught_up(leader.hw, self.sim.replica_status(leader.id), leader.id)
        recorded = bool(leader.replica.membership_history)
        return membership.decide(
            leader.id, m.voters, m.observers, self.members(), ready, recorded=recorded
        )

    def done(self) -> bool:
        leader = self.sim.leader()
        if leader is None or leader.replica is None or not leader.replica.serving:
            return False
        history = leader.replica.membership_history
        committed = not history or history[-1].offset < leader.replica.high_watermark
        return committed and self._decided() is None

    def describe(self) -> str:
        return (
            f"members {self.members()}, leaving {sorted(self.leaving)}, keeper says "
            f"{self._decided()!r}, moves {self.moves[-4:]}, steps {self.steps[-6:]}"
        )


def joining_members(node_id: int, peers: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The `__cluster` membership a node added starts with (`Node.__init__`, identity start
    "joining"): its peer list's without itself, and itself an observer."""
    voters, observers = replica_config_members([p for p in peers if p != node_id])
    return voters, (*observers, node_id)


# How a node added starts its `__cluster` replica (a scenario puts the former start back).
START_MEMBERS: Callable[[int, list[int]], tuple[tuple[int, ...], tuple[int, ...]]] = joining_members


def make_controller(sim: Simulation) -> Controller:
    cfg = sim.config
    rng = random.Random(f"controller-{cfg.seed}-{cfg.shape}")
    if cfg.controller == "reassign":
        return Reassigner(sim, rng)
    assert cfg.controller == "keeper", cfg.controller
    return Keeper(sim, rng)


def controller_bound_ms(config: SimConfig) -> int:
    """How long after a healed cluster is quiet the controller may take to reach its target:
    the longest backoff a refusal during the chaos may have left (10 s for the reassigner,
    5 s for the keeper) after a call pending at the heal (`CALL_TIMEOUT_MS`), then each step
    one pass (1.5 intervals) and a commit (200 ms), plus one hand-over (`SETTLE_S` and an
    election) and a second of slack. Steps: the reassigner's observers, one promotion and
    one removal per replica, and the completion; the keeper's observers, and one promotion
    or removal per node of the pool."""
    replicas = config.nodes + config.observers
    pool = replicas + config.spares
    if config.controller == "reassign":
        backoff_ms, steps = _ms(BACKOFF_S_MAX), 2 * replicas + 2
    else:
        backoff_ms, steps = _ms(membership.BACKOFF_S_MAX), 2 * pool + 1
    per_step_ms = config.control_interval_ms * 3 // 2 + 200
    handover_ms = _ms(SETTLE_S) + config.election_timeout_ms_max
    return backoff_ms + CALL_TIMEOUT_MS + steps * per_step_ms + handover_ms + 1000


def check_done(sim: Simulation, bound_ms: int) -> int:
    """Healed and quiet, the controller reaches its target within `bound_ms`, and a leader
    then commits an acks=all append; returns how long it took."""
    controller = sim.controller
    assert controller is not None
    start = sim.now
    reached = sim.run_until(start + bound_ms, controller.done)
    check(
        reached,
        f"controller: no convergence {bound_ms} ms after the cluster was quiet: "
        f"{controller.describe()}",
    )
    return sim.now - start


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _address(node_id: int) -> NodeAddress:
    return NodeAddress(f"127.0.0.1:{7000 + node_id}")


TICK_S = 0.01  # the chaos step's period (sim.TICK_MS)
SETTLE_S = reassignment.SETTLE_S
BACKOFF_S_MIN = reassignment.BACKOFF_S_MIN
BACKOFF_S_MAX = reassignment.BACKOFF_S_MAX
