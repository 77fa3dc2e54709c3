# length: one simulated cluster whose parts share its event queue and state; the checker,
# the owner model, quiescence and compaction already live beside it in their own modules
"""A seeded, deterministic simulator of N replicas of the replication core.

Replicas 1..`nodes` are voters; `observers` more replicas (ids after the voters) follow the
log without voting, as the nodes beyond the fifth do for `__cluster`. Faults hit observers
like voters (crashes, partitions, lost messages); after healing they too must converge.

Everything runs on one simulated clock driven by an event heap (time, sequence number), so a
seed fully determines a schedule. The simulated pieces:

* network: each message gets a random delay (reordering), may be lost or duplicated, and is
  dropped at delivery time if sender and receiver are in different partition groups;
  `vote_delay_ms_max` / `vote_duplication` make vote and pre-vote traffic late past
  election timeouts and duplicated (busy nodes in a burst of topic creations), and
  `start_spread_ms` creates a partition's replicas at different times;
* disks: a node's log is a list of records with a flushed prefix; a flush completes a short
  random time after appends; `quorum-state` and `epoch-history` writes are durable at once
  (the driver's contract). A crash loses the unflushed tail (power loss) under
  flush_always, or nothing (process crash, page cache survives) otherwise; `power_loss`
  makes every crash a power loss under the other modes too (flush=interval/never, where
  nothing waits for an fsync: acknowledged records can then be lost, as the README's ack
  table says). Retention deletes a prefix now and then (below the node's HW): offsets
  below `log_start` are gone,
  and reading them for a fetch answer fails the run; a follower told to start at a leader's
  log start keeps only the committed records below it as stand-ins for the checker;
* the driver: it performs each node's outputs in order against its disk and the network,
  filling `Records.frames` with real `replog.frames` bytes, clipped to a few records.
  With `owner=True` it is modelled as the real driver's owner task: inputs wait in an
  inbox while a previous input's outputs are performed, every disk output takes a little
  simulated time (other events run in between), and a crash can strike between any two
  outputs. `interrupts_per_s` then cancels the caller of a node's in-flight input (what
  gRPC does to a handler whose client went away): under the owner rule the client only
  stops waiting (its append's outcome becomes unknown); `interrupt_drops_outputs` models
  the old driver, where the cancellation also dropped the input's remaining outputs;
* clients: appends with acks=all and acks=leader to the node that currently leads (or any);
  with `producers`, also idempotent producers (`SimProducer`) that resend a batch with the
  same sequence numbers until it is acknowledged (after failures, interrupts, leader
  changes, crashes), abandon it for a new producer id after many tries, and now and then
  are replaced by a new instance in the next epoch while the old one keeps retrying (a
  zombie). After the run the committed log must hold every data value at most once, each
  producer's batches in sequence order without gaps, and no batch of an epoch after a
  newer epoch's batch (`check_producers`).

* membership changes (`memberships_per_s`): the leader is asked for one change at a time
  (`membership_step`), retried on refusals worth retrying; `spares` start in neither set.
* the leader balancer (`balance_interval_ms`): every node runs the server's `balance_once`
  for its partition at seeded random intervals, through the whole run (faults and after):
  a serving leader asks the real `replog.server.cluster.balancer.preferred_target` about its
  voters and `replica_status` rows (computed from the core, see `replica_status`) and
  starts a transfer to the replica it names. `voter_order` sets the starting voters' order
  (voters[0] is the preferred leader). After healing, `run_schedule` then also checks that
  leadership ends on the preferred replica within `balance_bound_ms` and stays there.
* the server's membership controllers (`controller`, controllers.py): the reassigner or the
  metadata quorum keeper runs on every node with its real pure `decide`, after targets or
  members an operator changes; replicas are created and deleted as the server does. After
  healing, `run_schedule` then also checks that it reaches its target within
  `controller_bound_ms`.

Invariants (checker.py) are checked as outputs are applied and after every event.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from replog import frames
from replog.replication import (
    AckCompleted,
    AckFailed,
    AckFailure,
    Acks,
    AppendControl,
    AppendFrames,
    AppendRecords,
    EpochHistory,
    EpochStart,
    FetchResponse,
    Membership,
    MembershipChange,
    MembershipEntry,
    Message,
    Output,
    PersistEpochHistory,
    PersistMembershipHistory,
    PersistQuorumState,
    QuorumState,
    Records,
    Replica,
    ReplicaConfig,
    ResetLog,
    Role,
    Send,
    SetHighWatermark,
    TruncateTo,
    VoteRequest,
    VoteResponse,
)
from replog.replication.batch_ends import BatchEnds, whole_batches_end
from replog.replication.durable import durable_quorum_state
from replog.replication.liveness import NodeLiveness
from replog.replication.producers import ProducerBatch, ProducerTable, decode_header
from replog.replication.roles.core import Step
from replog.server.cluster.balancer import preferred_target
from tests.simulation import quiet
from tests.simulation.checker import Checker, InvariantViolation, SimRecord, check
from tests.simulation.compaction import Compaction, CompactionConfig, CompactionStats
from tests.simulation.controllers import check_done, controller_bound_ms, make_controller

TICK_MS = 10
ANSWER_RECORDS_MAX = 64  # how far past fetch_records_max an answer may go to end a batch


@dataclass(frozen=True)
class SimConfig:
    seed: int
    nodes: int = 3  # voters
    observers: int = 0
    flush_always: bool = True
    chaos_ms: int = 3000  # faults happen during this phase
    liveness_ms: int = 10000  # after healing, a leader must commit a new append by then
    loss: float = 0.05
    duplication: float = 0.02
    delay_ms_max: int = 20
    flush_delay_ms_max: int = 15
    crash_per_s: float = 0.3
    partition_per_s: float = 0.3
    appends_per_s: float = 40.0
    retention_per_s: float = 0.0
    fetch_records_max: int = 4
    election_timeout_ms_min: int = 150
    election_timeout_ms_max: int = 300
    power_loss: bool = False  # crashes lose unflushed writes under every flush mode
    owner: bool = False  # model the driver's owner task (inbox, outputs over time)
    interrupts_per_s: float = 0.0  # cancelled callers of in-flight inputs (owner only)
    interrupt_drops_outputs: bool = False  # the old driver: a cancel drops outputs
    transfers_per_s: float = 0.0  # leadership transfers to a random voter
    corruptions_per_s: float = 0.0  # a committed record's bytes flipped on one node's disk
    producers: int = 0  # idempotent producers appending beside the plain clients
    # Replicas in neither set at the start (ids after the observers): each starts with the
    # starting membership plus itself as an observer, as a server would start a replica
    # that joins later; it takes no part until a membership change adds it.
    spares: int = 0
    memberships_per_s: float = 0.0  # membership changes asked of the leader (one at a time)
    balance_interval_ms: int = 0  # each node's leader balancer (0: none), +-50% jitter
    voter_order: tuple[int, ...] = ()  # the starting voters in this order (): 1..nodes
    # the server's membership controllers (controllers.py): "reassign" | "keeper" ("": none),
    # their passes on each node (+-50%), and the operator's moves during the chaos
    controller: str = ""
    control_interval_ms: int = 0
    moves_per_s: float = 0.0
    # vote and pre-vote traffic only (a busy node: issue 25's topic bursts): an extra delay
    # of up to this many ms, past election timeouts (0: none), and more copies of a message
    vote_delay_ms_max: int = 0
    vote_duplication: float = 0.0
    # a new partition's replicas are created at random times within this many ms (nodes
    # apply a topic's creation record at different times; messages to a replica not yet
    # created are lost, the first ones created campaign alone)
    start_spread_ms: int = 0
    # quiescence (quiet.py): a follower's fetch at the leader's LEO and HW is held this long
    # (0: off), with node heartbeats; pauses and one-way cuts of links during the chaos
    quiet_fetch_wait_ms: int = 0
    pauses_per_s: float = 0.0
    one_way_per_s: float = 0.0
    # a compacted topic (compaction.py): keyed values and tombstones, each replica's cleaner
    compaction: CompactionConfig | None = None

    def repro(self) -> str:
        flush = "" if self.flush_always else " --flush never"
        observers = f" --observers {self.observers}" if self.observers else ""
        owner = " --interrupts" if self.owner else ""
        transfers = " --transfers" if self.transfers_per_s else ""
        corruption = " --corruption" if self.corruptions_per_s else ""
        producers = f" --producers {self.producers}" if self.producers else ""
        members = f" --memberships --spares {self.spares}" if self.memberships_per_s else ""
        balance = " --balance" if self.balance_interval_ms else ""
        order = f" --voters {','.join(map(str, self.voter_order))}" if self.voter_order else ""
        control = (
            f" --controller {self.controller} --spares {self.spares}" if self.controller else ""
        )
        votes = " --late-votes" if self.vote_delay_ms_max else ""
        votes += " --quiet" if self.quiet_fetch_wait_ms else ""
        votes += " --compaction" if self.compaction else ""
        return (
            f"python -m tests.simulation.run --seed {self.seed} --nodes {self.nodes}"
            f"{observers}{flush}{owner}{transfers}{corruption}{producers}{members}{balance}"
            f"{order}{control}{votes}"
        )

    @property
    def shape(self) -> str:
        """Names the cluster in seeds: `3`, or `5+2` with observers (voter-only runs keep
        the seeds they always had)."""
        return f"{self.nodes}+{self.observers}" if self.observers else str(self.nodes)

    # length: every dimension's seeded draw in one place, in the order seeds have always used
    @staticmethod
    def random(
        seed: int,
        nodes: int,
        *,
        flush_always: bool = True,
        observers: int = 0,
        interrupts: bool = False,
        transfers: bool = False,
        corruption: bool = False,
        producers: int = 0,
        memberships: bool = False,
        spares: int = 0,
        balance: bool = False,
        voter_order: tuple[int, ...] = (),
        controller: str = "",
        late_votes: bool = False,
        quiet: bool = False,
        compaction: bool = False,
    ) -> SimConfig:
        """Fault rates drawn from the seed, so that seeds cover calm and hostile networks.
        `interrupts`: the owner model with cancelled callers (a rate drawn separately, so
        the other draws of a seed stay what they were); `late_votes`: vote and pre-vote
        messages late past election timeouts and duplicated (drawn separately too)."""
        shape = f"{nodes}+{observers}" if observers else str(nodes)
        rng = random.Random(f"config-{seed}-{shape}")
        owner_rate = random.Random(f"interrupts-{seed}-{shape}").choice([2.0, 10.0, 40.0])
        transfer_rate = random.Random(f"transfers-{seed}-{shape}").choice([0.5, 2.0, 10.0])
        corruption_rate = random.Random(f"corruption-{seed}-{shape}").choice([0.5, 2.0, 5.0])
        membership_rate = random.Random(f"memberships-{seed}-{shape}").choice([2.0, 5.0, 20.0])
        balance_ms = random.Random(f"balance-{seed}-{shape}").choice([50, 200, 1000])
        control = random.Random(f"control-{seed}-{shape}")
        control_ms, moves_rate = control.choice([50, 100, 300]), control.choice([0.5, 2.0, 5.0])
        votes = random.Random(f"votes-{seed}-{shape}")
        vote_delay, vote_copies = votes.choice([100, 400, 1000]), votes.choice([0.1, 0.3, 0.6])
        spread = votes.choice([0, 100, 500, 1500])
        calm = random.Random(f"quiet-{seed}-{shape}")
        quiet_ms, pauses = calm.choice([400, 1500]), calm.choice([0.0, 0.5, 2.0])
        one_way, quiet_appends = calm.choice([0.0, 0.5, 2.0]), calm.choice([0.5, 2.0, 10.0])
        config = SimConfig(
            compaction=CompactionConfig.random(seed, shape) if compaction else None,
            start_spread_ms=spread if late_votes else 0,
            vote_delay_ms_max=vote_delay if late_votes else 0,
            vote_duplication=vote_copies if late_votes else 0.0,
            controller=controller,
            control_interval_ms=control_ms if controller else 0,
            moves_per_s=moves_rate if controller else 0.0,
            balance_interval_ms=balance_ms if balance else 0,
            voter_order=voter_order,
            spares=spares,
            memberships_per_s=membership_rate if memberships else 0.0,
            producers=producers,
            corruptions_per_s=corruption_rate if corruption else 0.0,
            transfers_per_s=transfer_rate if transfers else 0.0,
            owner=interrupts,
            interrupts_per_s=owner_rate if interrupts else 0.0,
            seed=seed,
            nodes=nodes,
            observers=observers,
            flush_always=flush_always,
            loss=rng.choice([0.0, 0.02, 0.1, 0.3]),
            duplication=rng.choice([0.0, 0.02, 0.1]),
            delay_ms_max=rng.choice([1, 5, 20, 60]),
            flush_delay_ms_max=rng.choice([0, 10, 50]),
            crash_per_s=rng.choice([0.0, 1.0, 4.0]),
            partition_per_s=rng.choice([0.0, 0.5, 2.0]),
            appends_per_s=rng.choice([10.0, 50.0, 200.0]),
            fetch_records_max=rng.choice([2, 10, 100]),
            # (no retention with producers: a replica that restarts or is reset rebuilds its
            # producer table from the log it holds; retention of a batch still being retried
            # is outside the guarantee, see docs/design.md)
            retention_per_s=0.0 if producers else rng.choice([0.0, 0.0, 2.0, 10.0]),
        )
        if not quiet:
            return config
        # few appends, so that partitions spend long stretches quiet, and a longer chaos
        return replace(
            config,
            quiet_fetch_wait_ms=quiet_ms,
            pauses_per_s=pauses,
            one_way_per_s=one_way,
            appends_per_s=quiet_appends,
            chaos_ms=8000,
        )


@dataclass
class Node:
    id: int
    replica: Replica | None = None
    log: list[SimRecord] = field(default_factory=list)
    log_start: int = 0  # retention deleted log[:log_start]
    flushed: int = 0
    quorum: QuorumState = field(default_factory=QuorumState)
    history: EpochHistory = field(default_factory=EpochHistory)
    hw: int = 0  # the driver's PartitionLog HW (volatile)
    hw_checkpoint: int = 0  # the `high-watermark` file, written now and then
    incarnation: int = 0
    flush_pending: bool = False
    was_leader_epoch: int = 0  # the epoch in which the checker last saw it lead
    # the owner model: outputs still to perform, inputs waiting, the append being performed
    busy: deque[Output] = field(default_factory=deque)
    inbox: deque[Callable[[Replica], list[Output]]] = field(default_factory=deque)
    caller: int | None = None  # request id of the client append whose outputs run now
    perform_scheduled: bool = False
    # disk damage: offsets whose bytes were flipped (the checksums know); a repaired node is
    # damaged until its vote floor is cleared (quorum.vote_floor)
    corrupt: set[int] = field(default_factory=set)
    # the driver's uncommitted batch boundaries (answers above the HW end at one of them)
    batch_ends: BatchEnds = field(default_factory=BatchEnds)
    before_repair: list[SimRecord] | None = None  # its log when it was discarded
    memberships: tuple[MembershipEntry, ...] = ()  # the `membership-history` file
    liveness: NodeLiveness | None = None  # its process's view of the others (quiet.py)
    paused_until: int = 0  # a paused process (quiet.py): it does nothing until then

    def held(self, leader_log: list[SimRecord], hw: int) -> list[SimRecord]:
        """Its log, or, if only that holds the leader's record at `hw - 1`, what it held
        before a repair discarded its log (it acknowledged from that)."""
        old = self.before_repair
        if hw > 0 and old is not None and len(old) >= hw:
            chain = leader_log[hw - 1].chain
            holds_now = len(self.log) >= hw and self.log[hw - 1].chain == chain
            if not holds_now and old[hw - 1].chain == chain:
                return old
        return self.log

    @property
    def idle(self) -> bool:
        return not self.busy and not self.inbox


@dataclass(frozen=True, slots=True)
class _Delivery:
    src: int
    dst: int
    message: Message


@dataclass(frozen=True, slots=True)
class _Flush:
    node: int
    incarnation: int


@dataclass(frozen=True, slots=True)
class _Wake:
    """The owner of `node` goes on performing after a disk output (owner model)."""

    node: int
    incarnation: int


VOTES = (VoteRequest, VoteResponse)  # the traffic `vote_delay_ms_max` delays

# Outputs the driver performs with an await (disk I/O): other events may run after them.
_DISK = (PersistQuorumState, PersistEpochHistory, PersistMembershipHistory, AppendRecords,
         AppendControl, AppendFrames, TruncateTo, ResetLog)  # fmt: skip


@dataclass
class ClientRequest:
    node: int
    values: tuple[bytes, ...]
    acks: Acks
    outcome: str = "pending"  # pending | acked | failed | unknown
    failure: AckFailure | None = None


@dataclass
class SimProducer:
    """An idempotent producer: one batch in flight, resent with the same numbers."""

    producer_id: int
    epoch: int = 0
    next_sequence: int = 0
    pending: tuple[int, tuple[bytes, ...]] | None = None  # (base sequence, values)
    request_id: int = 0  # its latest attempt
    attempts: int = 0
    zombie: bool = False  # replaced by a newer instance: retries, starts nothing new


@dataclass
class MembershipRequest:
    """A membership change asked of a leader (retried on refusals by `membership_step`)."""

    node: int
    membership: Membership
    outcome: str = "pending"  # pending | acked | failed | unknown
    failure: AckFailure | None = None
    offset: int = -1


# Refusals worth asking again (later, or of another leader).
_RETRIED = (  # (TOO_MANY_VOTER_CHANGES, LEADER_REMOVAL, INVALID_MEMBERSHIP: never)
    AckFailure.NOT_LEADER,
    AckFailure.OUTCOME_UNKNOWN,
    AckFailure.EPOCH_NOT_COMMITTED,
    AckFailure.MEMBERSHIP_CHANGE_IN_PROGRESS,
    AckFailure.NOT_CAUGHT_UP,
)
MEMBERSHIP_REQUEST_IDS = 2 * 10**12


def membership_value(change: MembershipChange) -> bytes:
    """The membership record's value on a simulated disk."""
    return f"members voters={change.voters} observers={change.observers}".encode()


class Simulation:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.rng = random.Random(f"sim-{config.seed}-{config.shape}")
        self.now = 0
        self.checker = Checker()
        self.voters = config.voter_order or tuple(range(1, config.nodes + 1))
        assert sorted(self.voters) == list(range(1, config.nodes + 1)), config.voter_order
        self.observers = tuple(range(config.nodes + 1, config.nodes + config.observers + 1))
        start = config.nodes + config.observers + 1
        self.spares = tuple(range(start, start + config.spares))
        self.ids = self.voters + self.observers + self.spares
        # membership changes: the requests (by request id), the one being retried, and the
        # votes each (epoch, candidate) was granted (sent: some may be lost on the way)
        self.membership_requests: dict[int, MembershipRequest] = {}
        self.membership_goal: tuple[int, int] | None = None  # (request id, attempts)
        self.votes_granted: dict[tuple[int, int], set[int]] = {}
        self.nodes = {i: Node(i) for i in self.ids}
        self.groups: dict[int, int] = dict.fromkeys(self.ids, 0)
        self.cuts: set[tuple[int, int]] = set()  # (src, dst): lost one way (quiet.py)
        self.quiet_rng = random.Random(f"quiet-chaos-{config.seed}-{config.shape}")
        self.loss = config.loss
        self.duplication = config.duplication
        self.fetch_records_max = config.fetch_records_max
        self.chaos = True
        self._events: list[tuple[int, int, str, object]] = []
        self._seq = 0
        self.requests: dict[int, ClientRequest] = {}
        self.values_sent = 0
        # Answers above the HW end between batches, as the driver's do; scenarios of the
        # core's own safety (whatever answers a leader sends) turn it off.
        self.cut_at_batch_ends = True
        self.request_ids = 10**12  # producers' attempts (plain appends use values_sent)
        self.producers = [SimProducer(i + 1) for i in range(config.producers)]
        self.producer_ids = config.producers
        self.events_run = 0
        self.last_delivered: tuple[int, int, Message] | None = None
        # the leader balancer's rule (scenarios put a broken one in) and its transfers
        self.balance_rule: Callable[
            [int, Sequence[int], Sequence[tuple[int, int, int, int]]], int | None
        ] = preferred_target
        self.balancer_transfers: list[tuple[int, int, int]] = []  # (ms, leader, target)
        # nodes without a replica (never created, or deleted: not restarted), and the
        # starting membership and quorum state of replicas created later (controllers.py)
        self.deleted: set[int] = set()
        self.starting: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self.controller = make_controller(self) if config.controller else None
        self.compaction = Compaction(self, config.compaction) if config.compaction else None
        spread = random.Random(f"spread-{config.seed}-{config.shape}")
        for i in self.ids:
            if i not in self.deleted and config.start_spread_ms:
                self._schedule(spread.randint(0, config.start_spread_ms), "restart", i)
            elif i not in self.deleted:
                self._start_node(i)
            self._schedule(self.rng.randint(0, TICK_MS), "tick", i)
        self._schedule(0, "chaos", None)
        if config.quiet_fetch_wait_ms:
            quiet.schedule(self)
        if config.balance_interval_ms:
            for i in self.ids:
                self._schedule(self._balance_delay(), "balance", i)
        if self.controller is not None:
            for i in self.ids:
                self._schedule(self.controller.interval(), "control", i)
        if self.compaction is not None:
            self.compaction.schedule()

    # -- event loop ----------------------------------------------------------------------

    def _schedule(self, delay_ms: int, kind: str, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._events, (self.now + delay_ms, self._seq, kind, payload))

    def run_until(self, until_ms: int, stop: Callable[[], bool] | None = None) -> bool:
        """Run events up to `until_ms`; True if `stop()` became true first."""
        while self._events and self._events[0][0] <= until_ms:
            time, _, kind, payload = heapq.heappop(self._events)
            self.now = time
            self._handle(kind, payload)
            self.events_run += 1
            self.check_step()
            if stop is not None and stop():
                return True
        self.now = max(self.now, until_ms)
        return False

    def _handle(self, kind: str, payload: object) -> None:
        if kind == "tick":
            assert isinstance(payload, int)
            node = self.nodes[payload]
            if not quiet.paused(self, payload):
                self._input(node, self._tick)
            self._schedule(TICK_MS, "tick", payload)
        elif kind == "msg":
            assert isinstance(payload, _Delivery)
            src, dst = payload.src, payload.dst
            node = self.nodes[dst]
            if quiet.paused(self, dst):  # it reads the message once it runs again
                self._schedule(node.paused_until - self.now, "msg", payload)
            elif node.replica is not None and not quiet.lost(self, src, dst):
                quiet.heard(self, src, dst)
                self.last_delivered = (src, dst, payload.message)
                message = payload.message
                self._input(node, lambda r: r.receive(message, self.now))
        elif kind == "flush":
            assert isinstance(payload, _Flush)
            node = self.nodes[payload.node]
            if node.replica is not None and node.incarnation == payload.incarnation:
                node.flush_pending = False
                node.flushed = len(node.log)
                # read when handled: a truncation in between lowers what is flushed
                self._input(node, lambda r: r.flushed(node.flushed, self.now))
        elif kind == "perform":
            assert isinstance(payload, _Wake)
            node = self.nodes[payload.node]
            if node.replica is not None and node.incarnation == payload.incarnation:
                node.perform_scheduled = False
                self._continue(node)
        elif kind == "restart":
            assert isinstance(payload, int)
            if self.nodes[payload].replica is None and payload not in self.deleted:
                self._start_node(payload)
        elif kind == "repair":
            assert isinstance(payload, int)
            self.repair(payload)
        elif kind == "balance":
            assert isinstance(payload, int)
            self.balance(payload)
            self._schedule(self._balance_delay(), "balance", payload)
        elif kind == "control":
            assert self.controller is not None
            again = self.controller.handle(payload)
            if again is not None:
                self._schedule(again, "control", payload)
        elif kind == "chaos":
            if self.chaos:
                self._chaos_step()
                if self.config.pauses_per_s or self.config.one_way_per_s:
                    quiet.chaos(self, self.quiet_rng)
                self._schedule(TICK_MS, "chaos", None)
        elif kind == "heartbeat":
            assert isinstance(payload, int)
            quiet.heartbeat(self, payload)
        elif kind == "resume":
            assert isinstance(payload, int)
            quiet.resume(self, payload)
        elif kind == "beat":
            assert isinstance(payload, quiet.Heartbeat)
            quiet.deliver_heartbeat(self, payload)
        elif kind in ("clean", "swap"):
            assert self.compaction is not None
            self.compaction.handle(kind, payload)
        else:  # pragma: no cover
            raise AssertionError(kind)

    def _chaos_step(self) -> None:
        cfg = self.config
        rng = self.rng
        per_tick = TICK_MS / 1000
        if rng.random() < cfg.appends_per_s * per_tick:
            self.client_append(rng.choice([Acks.ALL, Acks.ALL, Acks.LEADER]))
        if cfg.producers and rng.random() < cfg.appends_per_s * per_tick:
            self.producer_step()
        if rng.random() < cfg.crash_per_s * per_tick:
            up = [i for i, n in self.nodes.items() if n.replica is not None]
            leader = self.leader()
            if up:
                # leaders are the interesting victims: target them half of the time
                victims = [leader.id if leader and rng.random() < 0.5 else rng.choice(up)]
                if rng.random() < 0.25:  # a correlated failure (one rack's power)
                    victims.append(rng.choice(up))
                for victim in victims:
                    self.crash(victim)
                    self._schedule(rng.randint(20, 800), "restart", victim)
        if cfg.retention_per_s and rng.random() < cfg.retention_per_s * per_tick:
            self.retention(rng.choice(self.ids))
        if cfg.transfers_per_s and rng.random() < cfg.transfers_per_s * per_tick:
            leader = self.leader()
            voters = leader.replica.membership.voters if leader and leader.replica else ()
            if leader is not None and len(voters) > 1:
                self.transfer(leader.id, rng.choice([v for v in voters if v != leader.id]))
        if cfg.memberships_per_s and rng.random() < cfg.memberships_per_s * per_tick:
            self.membership_step()
        if cfg.corruptions_per_s and rng.random() < cfg.corruptions_per_s * per_tick:
            self.corrupt(rng.choice(self.ids))
        if cfg.interrupts_per_s and rng.random() < cfg.interrupts_per_s * per_tick:
            busy = [n for n in self.nodes.values() if n.replica is not None and not n.idle]
            if busy:
                self.interrupt(rng.choice(busy).id)
        if rng.random() < cfg.partition_per_s * per_tick:
            leader = self.leader()
            if rng.random() < 0.4:
                self.heal()
            elif leader is not None and rng.random() < 0.3:
                self.partition({leader.id})  # the leader alone, the rest together
            else:
                self.partition(*self._random_groups())
        if self.controller is not None:  # (its own rng: the draws above stay what they were)
            self.controller.chaos()

    def _random_groups(self) -> list[set[int]]:
        nodes = list(self.ids)
        self.rng.shuffle(nodes)
        cut = self.rng.randint(1, len(nodes) - 1)
        return [set(nodes[:cut]), set(nodes[cut:])]

    # -- faults --------------------------------------------------------------------------

    def partition(self, *groups: set[int]) -> None:
        """Only nodes in the same group talk (nodes in no group form one more group)."""
        self.groups = dict.fromkeys(self.ids, len(groups))
        for index, group in enumerate(groups):
            for node in group:
                self.groups[node] = index

    def heal(self) -> None:
        self.groups = dict.fromkeys(self.ids, 0)
        self.cuts.clear()

    def corrupt(self, node_id: int, offset: int | None = None) -> None:
        """Flip the bytes of one committed record on one node's disk (bit rot). One node at
        a time is damaged or under repair: the quorum tolerates the loss of a minority's
        copies, not of a majority's. The checksums know the record is bad: a read of it for
        a fetch answer is refused (never served) and starts a repair, and so does the
        scrubber, some time later."""
        node = self.nodes[node_id]
        # damaged: a corrupt record, or repaired and not durably caught up (its vote floor)
        if node.replica is None or any(
            n.corrupt or n.quorum.vote_floor for n in self.nodes.values()
        ):
            return
        if node.hw <= node.log_start:
            return
        if offset is None:
            offset = self.rng.randint(node.log_start, node.hw - 1)
        if self.compaction is not None and offset in self.compaction.gone(node_id):
            return  # (a gap: nothing on disk there)
        rec = node.log[offset]
        flipped = bytes([rec.value[0] ^ 0x01]) + rec.value[1:] if rec.value else b"\x01"
        node.log[offset] = SimRecord(flipped, rec.control, rec.epoch, rec.chain)
        node.corrupt.add(offset)
        self._schedule(self.rng.randint(100, 1000), "repair", node_id)  # the scrubber

    def repair(self, node_id: int) -> None:
        """The node discards its log (keeping votes and epoch history) and fetches it again;
        a leader first stops leading (here: the process restarts, as a hand-over would make
        it a follower). A node that is down is repaired where it lies (it restarts later)."""
        node = self.nodes[node_id]
        if not node.corrupt:
            return
        up = node.replica is not None
        self.crash(node_id)
        # durable first, as the driver does: no votes until it holds again what it may have
        # acknowledged (QuorumState.vote_floor)
        q = node.quorum
        former = (node.history.last_epoch(len(node.log)), len(node.log))
        floor_epoch, floor = max((q.vote_floor_epoch, q.vote_floor), former)
        node.quorum = QuorumState(q.epoch, q.voted_for, q.leader_id, floor, floor_epoch)
        node.before_repair = list(node.log)
        del node.log[node.log_start :]
        node.flushed = node.hw_checkpoint = node.log_start
        if self.compaction is not None:
            self.compaction.reset(node_id, node.log_start)
        node.corrupt.clear()
        if up:
            self._start_node(node_id)

    def delete_replica(self, node_id: int) -> None:
        """The node's replica is deleted (its process stopped, its directory removed): it
        is not restarted until `create_replica`. The checker still counts what it held as
        acknowledged (`Node.held`) until a new replica of it votes."""
        node = self.nodes[node_id]
        self.crash(node_id)
        node.before_repair = list(node.log)
        node.log = []
        node.log_start = node.flushed = node.hw = node.hw_checkpoint = 0
        if self.compaction is not None:
            self.compaction.reset(node_id, 0)
        node.quorum = QuorumState()
        node.history = EpochHistory()
        node.memberships = ()
        node.corrupt.clear()
        self.deleted.add(node_id)

    def create_replica(
        self, node_id: int, voters: tuple[int, ...], observers: tuple[int, ...], state: QuorumState
    ) -> None:
        """A new replica on an empty directory of a node that has none, with this starting
        membership and quorum state (a vote floor, or none)."""
        assert node_id in self.deleted and self.nodes[node_id].replica is None
        self.deleted.discard(node_id)
        self.starting[node_id] = (voters, observers)
        self.nodes[node_id].quorum = state
        self._start_node(node_id)

    def interrupt(self, node_id: int) -> None:
        """Cancel the caller of the node's in-flight input (a gRPC handler whose client went
        away). The client stops waiting; the owner goes on, unless the old rule is modelled,
        where the remaining outputs of that input were dropped."""
        node = self.nodes[node_id]
        if node.caller is not None:
            request = self.requests.get(node.caller) or self.membership_requests[node.caller]
            if request.outcome == "pending":
                request.outcome = "unknown"
        if self.config.interrupt_drops_outputs:
            node.busy.clear()
            node.caller = None

    def crash(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.replica is None:
            return
        node.replica = None
        node.liveness = None
        node.paused_until = 0
        node.busy.clear()  # the process died between two outputs: the rest never happen
        node.inbox.clear()
        node.caller = None
        node.perform_scheduled = False
        node.incarnation += 1
        node.flush_pending = False
        node.batch_ends = BatchEnds()  # volatile, as in the driver
        node.hw = 0
        if self.config.flush_always or self.config.power_loss:
            del node.log[node.flushed :]  # power loss: the page cache is gone
        node.flushed = len(node.log)
        if self.compaction is not None:
            self.compaction.crashed(node)
        for request in (*self.requests.values(), *self.membership_requests.values()):
            if request.node == node_id and request.outcome == "pending":
                request.outcome = "unknown"

    def retention(self, node_id: int, offset: int | None = None) -> None:
        """Delete a prefix of a node's log (as whole segments would go): never past its HW
        nor its flushed offset; `offset` None picks one at random."""
        node = self.nodes[node_id]
        if node.replica is None:
            return

        def call(replica: Replica) -> list[Output]:
            upper = min(node.hw, node.flushed)
            if upper <= node.log_start:
                return []
            start = self.rng.randint(node.log_start, upper) if offset is None else offset
            node.log_start = start
            if self.compaction is not None:
                self.compaction.retention(node.id, start)
            for gone in [o for o in node.corrupt if o < start]:  # deleted with its segment
                node.corrupt.discard(gone)
                node.log[gone] = self.checker.committed[gone]  # a stand-in, like ResetLog's
            return replica.log_start_advanced(start, self.now)

        self._input(node, call)

    def change_membership(
        self, node_id: int, voters: tuple[int, ...], observers: tuple[int, ...]
    ) -> int:
        """Ask node `node_id` to change the membership; returns the request id."""
        request_id = MEMBERSHIP_REQUEST_IDS + len(self.membership_requests) + 1
        membership = Membership(voters, observers)
        self.membership_requests[request_id] = MembershipRequest(node_id, membership)
        self._input(
            self.nodes[node_id],
            lambda r: r.change_membership(request_id, voters, observers, self.now),
            request_id,
        )
        return request_id

    def membership_step(self) -> None:
        """One membership move: wait for the change under way, ask for it again (of the
        current leader) after a refusal worth retrying, or pick a new one at random among:
        promote an observer, demote a voter (never the leader) to observer, remove a voter
        or an observer, add a replica that is in neither set as an observer."""
        leader = self.leader()
        if leader is None or leader.replica is None:
            return
        rng = self.rng
        if self.membership_goal is not None:
            request_id, attempts = self.membership_goal
            request = self.membership_requests[request_id]
            if request.outcome == "pending":
                return
            retry = request.outcome == "unknown" or request.failure in _RETRIED
            # after an unknown outcome, now and then another change instead: a new leader
            # asked for a different change than its predecessor's uncommitted one is the
            # single-server-change bug's setting (Ongaro, raft-dev 2015)
            unknown = request.outcome == "unknown" or request.failure is AckFailure.OUTCOME_UNKNOWN
            if unknown and rng.random() < 0.5:
                retry = False
            if request.outcome != "acked" and retry and attempts < 20:
                m = request.membership
                again = self.change_membership(leader.id, m.voters, m.observers)
                self.membership_goal = (again, attempts + 1)
                return
            self.membership_goal = None
        current = leader.replica.membership
        voters, observers = list(current.voters), list(current.observers)
        outside = [i for i in self.ids if i not in current.replicas]
        others = [v for v in voters if v != leader.id]
        moves = ["add"] if outside else []
        if observers:
            moves += ["promote", "drop"]
        # At least 2 voters; 3 with bit rot: a repairing node that lost its disk is half of
        # 2 voters, not the minority the quorum tolerates (its vote floor then stalls them).
        if others and len(voters) > (3 if self.config.corruptions_per_s else 2):
            moves += ["demote", "remove"]
            if observers:
                moves.append("swap")  # two voters changed: always refused
        if not moves:
            return
        move = rng.choice(moves)
        if move == "add":
            observers.append(rng.choice(outside))
        elif move == "promote":
            chosen = rng.choice(observers)
            observers.remove(chosen)
            voters.append(chosen)
        elif move == "drop":
            observers.remove(rng.choice(observers))
        elif move == "swap":
            promoted, demoted = rng.choice(observers), rng.choice(others)
            observers.remove(promoted)
            voters.remove(demoted)
            voters.append(promoted)
            observers.append(demoted)
        else:
            chosen = rng.choice(others)
            voters.remove(chosen)
            if move == "demote":
                observers.append(chosen)
        request_id = self.change_membership(leader.id, tuple(voters), tuple(observers))
        self.membership_goal = (request_id, 1)

    def transfer(self, node_id: int, target: int) -> None:
        """Node `node_id` (a leader) hands leadership to voter `target`."""
        self._input(self.nodes[node_id], lambda r: r.transfer_leadership(target, self.now))

    # -- the leader balancer --------------------------------------------------------------

    def _balance_delay(self) -> int:
        interval = self.config.balance_interval_ms
        return self.rng.randint(interval // 2, interval * 3 // 2)

    def balance(self, node_id: int) -> int | None:
        """The server's `balance_once` on node `node_id` (whose one partition this is): if
        it is a serving leader, `balance_rule` (the real `preferred_target`) decides from its
        voters and `replica_status` rows, and a transfer to the replica it names starts
        (`ReplicaDriver.transfer_leadership`: an input of the owner). Returns that target."""
        replica = self.nodes[node_id].replica
        if replica is None or replica.role is not Role.LEADER or not replica.serving:
            return None
        voters = replica.membership.voters
        target = self.balance_rule(node_id, voters, self.replica_status(node_id))
        if target is not None:
            self.balancer_transfers.append((self.now, node_id, target))
            self.transfer(node_id, target)
        return target

    def replica_status(self, node_id: int) -> list[tuple[int, int, int, int]]:
        """`ReplicaDriver.replica_status()` of node `node_id`, from the same sources: empty
        unless it leads; else one row per replica, sorted by id: the leader's own
        `(id, LEO, 0, 0)`, and for each follower the core's `followers()` entry
        `(match, last_fetch_ms)` as `(id, match, max(0, LEO - match), now - last_fetch_ms)`
        (-1 when it has not fetched in this epoch). The LEO is the one on disk
        (`PartitionLog.log_end_offset` for the driver, `len(node.log)` here: under the owner
        model it may trail the core's by the outputs not yet performed); `now` is the
        simulated clock, which is also the core's clock."""
        node = self.nodes[node_id]
        replica = node.replica
        if replica is None or replica.role is not Role.LEADER:
            return []
        leo = len(node.log)
        rows = [(node_id, leo, 0, 0)]
        held = replica.held_quietly()  # (0 for a fetch held quietly now, as the driver)
        for other, (match, last) in sorted(replica.followers().items()):
            ago = 0 if other in held else (-1 if last is None else self.now - last)
            rows.append((other, match, max(0, leo - match), ago))
        return sorted(rows)

    def campaign(self, node_id: int) -> None:
        assert self.nodes[node_id].replica is not None
        self._input(self.nodes[node_id], lambda r: r.campaign(self.now))

    def run_for(self, duration_ms: int, stop: Callable[[], bool] | None = None) -> bool:
        return self.run_until(self.now + duration_ms, stop)

    def replica(self, node_id: int) -> Replica:
        replica = self.nodes[node_id].replica
        assert replica is not None, f"node {node_id} is down"
        return replica

    def restart(self, node_id: int) -> None:
        self._start_node(node_id)

    def _start_node(self, node_id: int) -> None:
        cfg = self.config
        node = self.nodes[node_id]
        assert node.replica is None
        voters, observers = self.voters, self.observers
        if node_id in self.spares:
            observers += (node_id,)
        if node_id in self.starting:
            voters, observers = self.starting[node_id]
        config = ReplicaConfig(
            replica_id=node_id,
            voters=voters,
            observers=observers,
            election_timeout_ms_min=cfg.election_timeout_ms_min,
            election_timeout_ms_max=cfg.election_timeout_ms_max,
            fetch_wait_ms_max=50,
            fetch_retry_ms=100,
            begin_epoch_retry_ms=50,
            flush_always=cfg.flush_always,
            quiet_fetch_wait_ms=cfg.quiet_fetch_wait_ms,
        )
        node.liveness = quiet.start_node(self, node) if cfg.quiet_fetch_wait_ms else None
        rng = random.Random(f"replica-{cfg.seed}-{node_id}-{node.incarnation}")
        replica = Replica(
            config,
            rng,
            self.now,
            state=node.quorum,
            history=node.history.entries,
            log_end_offset=len(node.log),
            high_watermark=min(node.hw_checkpoint, len(node.log)),
            log_start_offset=node.log_start,
            producers=producer_table(node.log, node.log_start),
            memberships=node.memberships,
            liveness=node.liveness,
        )
        node.replica = replica
        node.flushed = len(node.log)
        node.hw = replica.high_watermark
        self.checker.on_high_watermark(node.id, node.log, node.hw, node.quorum.epoch)
        self._input(node, lambda r: r.start())
        self._check_epochs(node)

    def settle(self) -> None:
        """End the chaos: heal the network, stop faults, restart every node (the scrubber
        still repairs what is damaged)."""
        self.chaos = False
        self.heal()
        self.loss = 0.0
        self.duplication = 0.0
        self.fetch_records_max = 100  # a healthy network: normal max_bytes
        for node_id, node in self.nodes.items():
            if node.replica is None and node_id not in self.deleted:
                self.restart(node_id)
        if self.controller is not None:
            self.controller.settle()

    # -- clients -------------------------------------------------------------------------

    def leader(self) -> Node | None:
        leaders = [
            n
            for n in self.nodes.values()
            if n.replica is not None and n.replica.step is Step.LEADER  # (= role LEADER)
        ]
        if not leaders:
            return None
        return max(leaders, key=lambda n: n.replica.epoch if n.replica else 0)

    def client_append(self, acks: Acks, node_id: int | None = None, count: int = 0) -> int:
        """Append `count` (1-3 if 0) fresh values; returns the request id (0: no node up)."""
        if node_id is None:
            leader = self.leader()
            up = [n for n in self.nodes.values() if n.replica is not None]
            if leader is not None and self.rng.random() < 0.9:
                node_id = leader.id
            elif up:
                node_id = self.rng.choice(up).id
            else:
                return 0
        node = self.nodes[node_id]
        assert node.replica is not None
        count = count or self.rng.randint(1, 3)
        values = []
        for _ in range(count):
            self.values_sent += 1
            if self.compaction is not None:
                values.append(self.compaction.value(self.values_sent))
            else:
                values.append(f"s{self.config.seed}-v{self.values_sent}".encode())
        request_id = self.values_sent
        self.requests[request_id] = ClientRequest(node_id, tuple(values), acks)
        self._input(node, lambda r: r.append(request_id, values, acks, self.now), request_id)
        return request_id

    # -- idempotent producers ----------------------------------------------------------------

    def producer_step(self) -> None:
        """One move of a random producer: wait, resend its batch, start the next one, or be
        replaced by a new instance (the old one turns zombie)."""
        rng = self.rng
        if not self.producers:
            return
        p = rng.choice(self.producers)
        if p.pending is not None:
            request = self.requests.get(p.request_id, ClientRequest(0, (), Acks.ALL, "unknown"))
            if request.outcome == "acked":
                p.pending, p.attempts = None, 0
            elif request.outcome == "pending" and rng.random() < 0.7:
                return  # let it run
            elif request.failure is AckFailure.PRODUCER_FENCED:
                check(p.zombie, f"producer {p.producer_id} fenced while current")
                self.producers.remove(p)
                return
            elif p.attempts >= 30:  # gave up on it: its outcome stays unknown
                self.producers.remove(p)
                if not p.zombie:
                    self.producers.append(SimProducer(self._new_producer_id()))
                return
            else:
                seq, values = p.pending
                self._producer_send(p, seq, values)
                return
        if p.zombie:
            self.producers.remove(p)
            return
        if rng.random() < 0.03:  # a new instance of the same producer takes over
            p.zombie = True
            self.producers.append(SimProducer(p.producer_id, p.epoch + 1))
            return
        values = []
        for _ in range(rng.randint(1, 3)):
            self.values_sent += 1
            values.append(f"s{self.config.seed}-p{self.values_sent}".encode())
        seq = p.next_sequence
        p.next_sequence += len(values)
        p.pending = (seq, tuple(values))
        self._producer_send(p, seq, tuple(values))

    def _new_producer_id(self) -> int:
        self.producer_ids += 1
        return self.producer_ids

    def _producer_send(self, p: SimProducer, seq: int, values: tuple[bytes, ...]) -> None:
        leader = self.leader()
        up = [n for n in self.nodes.values() if n.replica is not None]
        if leader is not None and self.rng.random() < 0.9:
            node = leader
        elif up:
            node = self.rng.choice(up)
        else:
            return
        self.request_ids += 1
        request_id = self.request_ids
        acks = Acks.ALL  # (acks=leader batches may be lost: the next would follow a gap)
        self.requests[request_id] = ClientRequest(node.id, values, acks)
        p.request_id, p.attempts = request_id, p.attempts + 1
        batch = ProducerBatch(p.producer_id, p.epoch, seq)
        self._input(
            node,
            lambda r: r.append(request_id, values, acks, self.now, batch, self.now),
            request_id,
        )

    def check_producers(self) -> None:
        """The committed log: every data value at most once; per producer, batch headers in
        epoch order, and within an epoch in sequence order from 0 without gaps, each
        followed by its records."""
        log = self.checker.committed
        seen: set[bytes] = set()
        newest: dict[int, tuple[int, int]] = {}  # pid -> (epoch, next sequence)
        for offset, rec in enumerate(log):
            if not rec.control:
                check(rec.value not in seen, f"value {rec.value!r} committed twice")
                seen.add(rec.value)
                continue
            header = decode_header(rec.value)
            if header is None:
                continue
            epoch, expected = newest.get(header.producer_id, (header.producer_epoch, 0))
            check(
                header.producer_epoch >= epoch,
                f"producer {header.producer_id}: epoch {header.producer_epoch} at {offset} "
                f"after epoch {epoch}",
            )
            if header.producer_epoch > epoch:
                expected = 0
            check(
                header.base_sequence == expected,
                f"producer {header.producer_id} epoch {header.producer_epoch}: sequence "
                f"{header.base_sequence} at {offset}, expected {expected}",
            )
            records = log[offset + 1 : offset + 1 + header.record_count]
            check(
                len(records) == header.record_count and not any(r.control for r in records),
                f"batch header at {offset} is not followed by its records",
            )
            newest[header.producer_id] = (header.producer_epoch, header.last_sequence + 1)

    # -- the owner model -------------------------------------------------------------------

    def _tick(self, replica: Replica) -> list[Output]:
        """A tick of the core. The driver ticks a replica only once `next_tick_ms` has
        come (the node's ticker sleeps until then), so a tick before it must do nothing:
        checked at every tick of every schedule."""
        due = replica.next_tick_ms()
        seen = (replica.role, replica.epoch, replica.leader_id, due)
        outputs = replica.tick(self.now)
        if due is None or self.now < due:
            after = (replica.role, replica.epoch, replica.leader_id, replica.next_tick_ms())
            assert not outputs and after == seen, ("tick before its time acted", seen, outputs)
        return outputs

    def _input(
        self, node: Node, call: Callable[[Replica], list[Output]], request_id: int | None = None
    ) -> None:
        """An input for the node's core. Without the owner model it is handled and its
        outputs performed at once; with it, it waits behind the outputs in flight."""
        if node.replica is None:
            return
        if not self.config.owner:
            self.apply(node, call(node.replica))
            return

        def tagged(replica: Replica) -> list[Output]:
            node.caller = request_id
            return call(replica)

        node.inbox.append(tagged)
        if not node.perform_scheduled and len(node.inbox) == 1 and not node.busy:
            self._continue(node)

    def _continue(self, node: Node) -> None:
        """Perform outputs (and take inputs) until a disk output has to wait."""
        while node.replica is not None:
            if node.busy:
                out = node.busy.popleft()
                self.apply(node, [out])
                if isinstance(out, _DISK):
                    node.perform_scheduled = True
                    delay = self.rng.randint(0, 3)
                    self._schedule(delay, "perform", _Wake(node.id, node.incarnation))
                    return
            elif node.inbox:
                node.caller = None
                node.busy.extend(node.inbox.popleft()(node.replica))
            else:
                node.caller = None
                return

    # -- the driver ----------------------------------------------------------------------

    # length: the driver's output dispatch mirrored case by case (a match over output types)
    def apply(self, node: Node, outputs: list[Output]) -> None:
        checker = self.checker
        for out in outputs:
            if isinstance(out, Send):
                self._send(node, out.to, out.message)
            elif isinstance(out, PersistQuorumState):  # the form the driver writes
                node.quorum = durable_quorum_state(out.state, node.id)
            elif isinstance(out, PersistEpochHistory):
                node.history = EpochHistory(out.entries)
            elif isinstance(out, PersistMembershipHistory):
                node.memberships = out.entries
            elif isinstance(out, AppendRecords):
                check(out.base_offset == len(node.log), f"node {node.id}: append not at LEO")
                if out.header is not None:
                    self._append(node, out.header.encode(), control=True, assigned_here=True)
                for value in out.values:
                    self._append(node, value, control=False, assigned_here=True)
                node.batch_ends.appended(len(node.log))
            elif isinstance(out, AppendControl):
                check(out.offset == len(node.log), f"node {node.id}: control not at LEO")
                marker = out.marker
                if isinstance(marker, MembershipChange):
                    value = membership_value(marker)
                else:
                    value = f"epoch={marker.epoch} leader={marker.leader_id}".encode()
                self._append(node, value, control=True, assigned_here=False)
                node.batch_ends.appended(len(node.log))
            elif isinstance(out, AppendFrames):
                self._append_frames(node, out.records)
            elif isinstance(out, TruncateTo):
                checker.on_truncate(node.id, node.log, out.offset, node.hw)
                del node.log[out.offset :]
                node.flushed = min(node.flushed, out.offset)
                node.batch_ends.truncated(out.offset)
                if self.compaction is not None:
                    self.compaction.truncated(node.id, out.offset)
            elif isinstance(out, ResetLog):
                # Offsets below the leader's log start are committed; the node holds none of
                # them, but the checker's committed records stand in for them (so the
                # follower's later records chain onto the right hashes).
                check(
                    len(node.log) < out.offset <= len(checker.committed),
                    f"node {node.id}: reset to {out.offset} (LEO {len(node.log)}, "
                    f"committed {len(checker.committed)})",
                )
                node.log = list(checker.committed[: out.offset])
                node.log_start = node.flushed = out.offset
                node.batch_ends.clear()
                if self.compaction is not None:
                    self.compaction.reset(node.id, out.offset)
            elif isinstance(out, SetHighWatermark):
                epoch = node.replica.epoch if node.replica is not None else 0
                checker.on_high_watermark(node.id, node.log, out.offset, epoch)
                if node.replica is not None and node.replica.role is Role.LEADER:
                    # a node repairing its log still counts with what it held when it
                    # acknowledged (the leader may use that acknowledgement): the repair is
                    # a lost disk, made safe by its vote floor, not an undone commit
                    # (the majority of the leader's current membership, Raft thesis 4.1)
                    voters = node.replica.membership.voters
                    voter_logs = [self.nodes[v].held(node.log, out.offset) for v in voters]
                    checker.on_commit(node.id, node.log, out.offset, voter_logs)
                node.hw = out.offset
                node.batch_ends.committed(out.offset)
                if self.rng.random() < 0.2:  # the driver checkpoints HW periodically
                    node.hw_checkpoint = out.offset
            elif isinstance(out, AckCompleted) and out.request_id in self.membership_requests:
                self._membership_acked(out)
            elif isinstance(out, AckFailed) and out.request_id in self.membership_requests:
                m_request = self.membership_requests[out.request_id]
                m_request.outcome, m_request.failure = "failed", out.failure
            elif isinstance(out, AckCompleted):
                request = self.requests[out.request_id]
                request.outcome = "acked"
                check(
                    out.last_offset - out.base_offset + 1 == len(request.values),
                    "ack covers another number of records",
                )
                if request.acks is Acks.ALL:
                    checker.on_ack_all(out.base_offset, request.values)
                elif request.acks is Acks.LEADER:
                    checker.on_ack_leader(out.base_offset, request.values)
            elif isinstance(out, AckFailed):
                self.requests[out.request_id].outcome = "failed"
                self.requests[out.request_id].failure = out.failure
            else:  # pragma: no cover
                raise AssertionError(out)

    def _membership_acked(self, out: AckCompleted) -> None:
        """A membership change completed: its record (or, for a membership the log already
        held, the latest one) is committed and holds that membership. (The starting
        membership is recorded too when asked for: an ack never lacks a record.)"""
        request = self.membership_requests[out.request_id]
        request.outcome, request.offset = "acked", out.base_offset
        m = request.membership
        committed = self.checker.committed
        check(
            0 <= out.base_offset < len(committed)
            and committed[out.base_offset].control
            and committed[out.base_offset].value.startswith(b"members ")
            and Membership(*_parse_members(committed[out.base_offset].value)).same_as(m),
            f"membership {m} acked at {out.base_offset}, which does not hold it committed",
        )

    def _append(
        self,
        node: Node,
        value: bytes,
        *,
        control: bool,
        assigned_here: bool,
        standin: SimRecord | None = None,  # a gap: the record the node lacks (compaction)
    ) -> None:
        if standin is None:
            epoch = node.history.epoch_of(len(node.log))
            rec = self.checker.record(node.log, value, control, epoch)
        else:
            rec = standin
        self.checker.on_append(node.id, node.log, rec, assigned_here=assigned_here)
        if self.compaction is not None:
            self.compaction.appended(node.id, len(node.log))
        node.log.append(rec)
        if not node.flush_pending:
            node.flush_pending = True
            delay = self.rng.randint(0, self.config.flush_delay_ms_max)
            self._schedule(delay, "flush", _Flush(node.id, node.incarnation))

    def _append_frames(self, node: Node, records: Records) -> None:
        if self.compaction is not None:  # (offset gaps allowed)
            self.compaction.append_frames(node, records)
            return
        decoded = frames.decode(records.frames)
        check(
            decoded.offsets == list(range(records.start_offset, records.end_offset)),
            f"node {node.id}: frames do not match their range",
        )
        check(records.start_offset == len(node.log), f"node {node.id}: frames not at LEO")
        controls = decoded.control or [False] * len(decoded)
        for value, control in zip(decoded.values, controls, strict=True):
            self._append(node, value, control=control, assigned_here=False)

    def _whole_batches(self, node: Node, start: int, end: int, reached: int, avail: int) -> int:
        """As the driver's `_read_batches` past an unknown boundary: no idempotent batch is
        split (`whole_batches_end`), reading on within the answer's bound."""
        found = [
            (o, h.record_count)
            for o in range(start, end)
            if node.log[o].control and (h := decode_header(node.log[o].value)) is not None
        ]
        safe = whole_batches_end(found, start, end)
        return safe if safe <= min(avail, reached + ANSWER_RECORDS_MAX) else end

    def _read_frames(self, node: Node, start: int, end: int) -> bytes | None:
        """The frames of `[start, end)`, or None when the checksums refuse a damaged record
        in the range (the answer is not sent; the node repairs itself)."""
        check(start >= node.log_start, f"node {node.id}: read at {start} < its log start")
        if any(start <= offset < end for offset in node.corrupt):
            self._schedule(1, "repair", node.id)
            return None
        gone = self.compaction.gone(node.id) if self.compaction is not None else ()
        chunks = [
            frames.encode(offset, [rec.value], control=rec.control)
            for offset, rec in enumerate(node.log[start:end], start)
            if offset not in gone
        ]
        return b"".join(chunks)

    def _send(self, node: Node, to: int, message: Message) -> None:
        if isinstance(message, VoteRequest) and not (node.replica and node.replica.is_voter):
            check(False, f"non-voter {node.id} campaigned: {message}")
        if isinstance(message, VoteResponse) and message.granted and not message.pre_vote:
            # a vote only for a candidate that counts it (it asks only its own voters, and
            # a candidate's membership does not change while it campaigns)
            candidate = self.nodes[to].replica
            if (
                candidate is not None
                and candidate.role is Role.CANDIDATE
                and candidate.epoch == message.epoch
                and node.id not in candidate.membership.voters
            ):
                check(False, f"{node.id}, no voter of candidate {to}, granted {message}")
            self.votes_granted.setdefault((message.epoch, to), set()).add(node.id)
        if isinstance(message, FetchResponse) and isinstance(message.result, Records):
            records = message.result
            start = records.start_offset
            reached = min(records.end_offset, start + self.fetch_records_max)
            gaps = self.compaction is not None and bool(self.compaction.gone(node.id))
            if gaps:  # (a read of fetch_records_max records present)
                assert self.compaction is not None
                reached = self.compaction.reach(
                    node, start, records.end_offset, self.fetch_records_max
                )
            # as the driver's `_read_batches`: above the HW, end between batches (reading on
            # to the end of a batch larger than the read, within a bound)
            end = reached
            if self.cut_at_batch_ends:
                end = node.batch_ends.cut(start, reached, records.end_offset, node.hw)
                if end > reached + ANSWER_RECORDS_MAX:
                    end = reached
                if end < records.end_offset and end > node.hw and not node.batch_ends.known(end):
                    end = self._whole_batches(node, start, end, reached, records.end_offset)
            data = self._read_frames(node, start, end)
            if data is None:
                return
            if gaps:  # ends past a gap that reaches the answer's end (`reached`)
                assert self.compaction is not None
                end = self.compaction.past_gap(node, end, records.end_offset)
            message = FetchResponse(
                message.epoch,
                message.leader_id,
                message.fetch_offset,
                message.last_fetched_epoch,
                records.clipped(end, data),
            )
        if self.rng.random() < self.loss:
            return
        copies = 2 if self.rng.random() < self.duplication else 1
        late = self.config.vote_delay_ms_max if isinstance(message, VOTES) else 0
        if late and self.chaos:  # (own draws after the others: a seed's other draws stay)
            copies += sum(self.rng.random() < self.config.vote_duplication for _ in range(2))
        for _ in range(copies):
            delay = self.rng.randint(1, self.config.delay_ms_max)
            if late and self.chaos:
                delay += self.rng.randint(0, late)
            self._schedule(delay, "msg", _Delivery(node.id, to, message))

    # -- invariants ----------------------------------------------------------------------

    def check_step(self) -> None:
        """Per-event checks (plain ifs: this runs after every event)."""
        checker = self.checker
        newest = -1  # the newest epoch of any replica, found when a leader's check needs it
        for node in self.nodes.values():
            replica = node.replica
            if replica is None:
                continue
            leo = replica.log_end_offset
            hw = replica.high_watermark
            if node.before_repair is not None and not replica.below_vote_floor:
                node.before_repair = None
            if hw > leo or (node.idle and (leo != len(node.log) or hw != node.hw)):
                check(
                    False,
                    f"node {node.id}: core LEO {leo} HW {hw}, log {len(node.log)} HW {node.hw}",
                )
            if replica.step is Step.FOLLOWER:  # (most nodes most of the time: no role lookup)
                continue
            role = replica.role
            if role is Role.FOLLOWER:
                continue
            if not replica.is_voter:
                check(False, f"non-voter {node.id} became {role.value}")
            if role is Role.LEADER:
                epoch = replica.epoch
                checker.on_leader(node.id, epoch, hw)
                # (a paused process answers no reader; it runs its timers first when it
                # resumes: `quiet.resume`)
                paused = node.paused_until > self.now
                if replica.serving and hw <= checker.acked_all_max and not paused:
                    if newest < 0:  # (a crashed node's epoch is its durable one)
                        newest = max(
                            n.replica.epoch if n.replica else n.quorum.epoch
                            for n in self.nodes.values()
                        )
                    if epoch >= newest:
                        check(
                            False,
                            f"leader {node.id} serves HW {hw} at or below acked offset "
                            f"{checker.acked_all_max}: 'latest' went back",
                        )
                # (committed: by anyone, as the checker knows; its own HW may lag behind
                # after a restart)
                history = replica.membership_history
                if len(history) > 1 and history[-2].offset >= len(checker.committed):
                    check(False, f"leader {node.id}: two uncommitted membership changes")
                if node.was_leader_epoch != epoch:
                    node.was_leader_epoch = epoch
                    checker.on_new_leader(node.id, epoch, node.log, node.corrupt)
                    # elected by a majority of its own membership's voters
                    members = replica.membership
                    granted = self.votes_granted.get((epoch, node.id), set()) | {node.id}
                    if len(granted & set(members.voters)) < members.majority:
                        check(
                            False,
                            f"leader {node.id} of epoch {epoch} won with {sorted(granted)}, "
                            f"not a majority of its voters {members.voters}",
                        )

    def _check_epochs(self, node: Node) -> None:
        """The core's epoch history describes the records the node really holds."""
        replica = node.replica
        assert replica is not None
        for offset, rec in enumerate(node.log):
            check(
                replica.epoch_of(offset) == rec.epoch,
                f"node {node.id}: core says epoch {replica.epoch_of(offset)} at {offset}, "
                f"the record has {rec.epoch}",
            )

    def check_all_epochs(self) -> None:
        for node in self.nodes.values():
            if node.replica is not None:
                self._check_epochs(node)


@dataclass(frozen=True)
class Outcome:
    config: SimConfig
    events: int
    leaders_elected: int
    committed: int
    acked_all: int
    acked_leader_lost: int
    liveness_ms: int
    # with the balancer: the leader at the end, and how long after the cluster was quiet
    # leadership reached the preferred replica (0 and -1 without it)
    final_leader: int = 0
    balanced_ms: int = -1
    # with a controller: how long after the cluster was quiet it reached its target (-1),
    # and the steps it took after the heal
    controlled_ms: int = -1
    controller_steps: int = 0
    compaction: CompactionStats | None = None  # what the cleaners did (compaction.py)


class SimulationFailure(AssertionError):
    pass


def _parse_members(value: bytes) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """`membership_value` read back."""
    text = value.decode()
    voters = text.split("voters=")[1].split(" observers=")[0]
    observers = text.split("observers=")[1]
    return _int_tuple(voters), _int_tuple(observers)


def _int_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.strip("(),").split(",") if x.strip())


def producer_table(log: list[SimRecord], log_start: int) -> ProducerTable:
    """What the driver's start-up scan builds: every batch header on the node's disk."""
    table = ProducerTable()
    buf = b"".join(
        frames.encode(offset, [log[offset].value], control=log[offset].control)
        for offset in range(log_start, len(log))
    )
    table.apply_frames(buf, len(log))
    return table


def run_schedule(config: SimConfig) -> Outcome:
    """One seeded schedule: chaos, then heal; check liveness. Raises with a repro line."""
    sim = Simulation(config)
    try:
        sim.run_until(config.chaos_ms)
        sim.check_all_epochs()
        sim.settle()
        healed_at = sim.now
        deadline = healed_at + config.liveness_ms
        committed_at = _wait_commit(sim, deadline)
        check(
            committed_at is not None,
            f"liveness: no acks=all append committed within {config.liveness_ms} ms of healing",
        )
        _check_converged(sim, deadline)
        balanced_ms = _check_balanced(sim) if config.balance_interval_ms else -1
        controlled_ms = -1
        if sim.controller is not None:
            controlled_ms = check_done(sim, controller_bound_ms(config))
            check(
                _wait_commit(sim, sim.now + config.liveness_ms) is not None,
                "controller: no acks=all append committed after it reached its target",
            )
            _check_converged(sim, sim.now + config.liveness_ms)
        sim.check_all_epochs()
        sim.check_producers()
        if sim.compaction is not None:
            sim.compaction.check_final()
    except (InvariantViolation, AssertionError) as exc:
        raise SimulationFailure(
            f"{type(exc).__name__}: {exc} at t={sim.now} ms; reproduce: {config.repro()}"
        ) from exc
    assert committed_at is not None
    final = sim.leader()
    lost = sum(
        1
        for offset, value in sim.checker.acked_leader.items()
        if offset >= len(sim.checker.committed) or sim.checker.committed[offset].value != value
    )
    return Outcome(
        config,
        sim.events_run,
        len(sim.checker.leaders),
        len(sim.checker.committed),
        len(sim.checker.acked_all),
        lost,
        committed_at - healed_at,
        final_leader=final.id if final is not None else 0,
        balanced_ms=balanced_ms,
        controlled_ms=controlled_ms,
        controller_steps=sim.controller.steps_since_heal() if sim.controller is not None else 0,
        compaction=sim.compaction.stats if sim.compaction is not None else None,
    )


def _check_converged(sim: Simulation, deadline: int) -> None:
    """Healed and quiet, every follower ends with an exact copy of the leader's log."""

    def converged() -> bool:
        leader = sim.leader()
        if leader is None or leader.replica is None:
            return False
        hw = leader.replica.high_watermark
        return hw == len(leader.log) and all(
            n.replica is not None
            and n.idle
            and n.replica.high_watermark == hw
            and not n.corrupt  # the scrubber finds what no read did
            for n in _members(sim, leader)
        )

    check(sim.run_until(deadline, converged), "followers did not converge after healing")
    leader = sim.leader()
    assert leader is not None
    for node in _members(sim, leader):
        check(
            [(r.value, r.control) for r in node.log] == [(r.value, r.control) for r in leader.log],
            f"node {node.id}'s log differs from leader {leader.id}'s after convergence",
        )


def balance_bound_ms(config: SimConfig) -> int:
    """How long after a healed cluster is quiet leadership may take to reach the preferred
    replica: two balancer rounds (each at most 1.5 intervals apart) plus one abandoned
    transfer (`election_timeout_ms_max`) and a second of slack."""
    return 3 * config.balance_interval_ms + config.election_timeout_ms_max + 1000


def _check_balanced(sim: Simulation) -> int:
    """Healed and quiet (converged), leadership ends on the preferred replica (the first
    voter of the leader's membership) within `balance_bound_ms`; it serves (an acks=all
    append commits) and keeps leading, in the same epoch, for three more balancer
    intervals (no transfer back and forth). Returns how long it took."""
    config = sim.config
    start = sim.now
    bound = balance_bound_ms(config)

    def balanced() -> bool:
        leader = sim.leader()
        replica = leader.replica if leader is not None else None
        return (
            leader is not None
            and replica is not None
            and replica.serving
            and leader.id == replica.membership.voters[0]
        )

    if not sim.run_until(start + bound, balanced):
        leader = sim.leader()
        voters = leader.replica.membership.voters if leader and leader.replica else ()
        check(
            False,
            f"balancing: leader {leader.id if leader else None}, not the preferred replica of "
            f"voters {voters}, {bound} ms after the cluster was quiet",
        )
    took = sim.now - start
    leader = sim.leader()
    assert leader is not None and leader.replica is not None
    epoch = leader.replica.epoch
    check(
        _wait_commit(sim, sim.now + config.liveness_ms) is not None,
        f"balancing: preferred leader {leader.id} commits no acks=all append",
    )
    sim.run_for(3 * config.balance_interval_ms)
    now = sim.leader()
    check(
        now is leader and leader.replica is not None and leader.replica.epoch == epoch,
        f"balancing: leadership left preferred replica {leader.id} (epoch {epoch}) in a quiet "
        f"cluster: now {now.id if now else None}",
    )
    return took


def _members(sim: Simulation, leader: Node) -> list[Node]:
    """The nodes of the leader's membership (a replica in neither set is sent nothing)."""
    assert leader.replica is not None
    replicas = (leader.id, *leader.replica.membership.replicas)
    return [n for n in sim.nodes.values() if n.id in replicas]


def _wait_commit(sim: Simulation, deadline: int) -> int | None:
    """Append with acks=all to the leader until one append completes; when, or None."""
    while sim.now < deadline:
        if not sim.run_until(deadline, lambda: sim.leader() is not None):
            return None
        leader = sim.leader()
        assert leader is not None
        request_id = sim.client_append(Acks.ALL, leader.id, 1)
        request = sim.requests[request_id]

        def answered(request: ClientRequest = request) -> bool:
            return request.outcome != "pending"

        sim.run_until(deadline, answered)
        if request.outcome == "acked":
            return sim.now
    return None


def starting_history(entries: list[tuple[int, int]]) -> tuple[EpochStart, ...]:
    return tuple(EpochStart(e, s) for e, s in entries)
