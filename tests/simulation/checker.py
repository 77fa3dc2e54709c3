"""Invariants of the replicated log, checked by the simulator as it applies every output.

* election safety: at most one leader per epoch, over the whole run;
* log matching: two replicas that ever hold the same (offset, epoch) hold identical logs up
  to it (a hash chain over (epoch, value, control) per offset, compared across all time);
* leader completeness: every offset that was ever below any replica's HW, and every acked
  acks=all record, is in the log of every leader of a later epoch at its offset, unchanged
  (a leader of an older epoch elected late, after a pause, holds what earlier epochs
  committed: `Checker.on_new_leader`); no replica ever
  truncates a committed record;
* HW: monotonic on a leader within its epoch, never above LEO anywhere; when a leader moves
  it to X, a majority of the *voters* hold the leader's record at X - 1 (observers hold
  copies too, but never count);
* offsets: dense (appends start at LEO), a client value gets one offset, never re-assigned;
* readers: a leader that serves (its own epoch committed) has a HW above every offset any
  client was told was committed with acks=all, so `latest` never goes back (checked by the
  simulator after every event).

Observers are checked like every replica (their records join the same hash chains, so
their logs are prefix-consistent copies; their HW covers committed records only); the
simulator also checks that an observer never campaigns, never grants a vote and never
becomes a candidate or leader.

Membership changes (`memberships_per_s`): "voters" above are those of the leader's current
(latest) membership, and the simulator also checks after every event that no leader's log
holds more than one uncommitted membership record; that every leader was granted votes by a
majority of its own membership's voters; that a replica grants a vote only to a candidate
whose voters include it and campaigns only as a voter of its own membership; and that an
acknowledged change is committed at the offset it was acknowledged with.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class InvariantViolation(AssertionError):
    """The simulated cluster broke one of the protocol's invariants."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise InvariantViolation(message)


RETRIED = b"-p"  # marks idempotent producers' values (they may be assigned again)


@dataclass(slots=True)
class SimRecord:
    value: bytes
    control: bool
    epoch: int
    chain: int  # hash of (previous chain, epoch, value, control)


@dataclass
class Checker:
    leaders: dict[int, int] = field(default_factory=dict)  # epoch -> leader id
    seen: dict[tuple[int, int], int] = field(default_factory=dict)  # (offset, epoch) -> chain
    committed: list[SimRecord] = field(default_factory=list)  # the committed prefix
    # per committed offset, the epoch of the replica whose HW first covered it (the epoch
    # its leader committed it in, as Raft counts: `on_new_leader`)
    commit_epochs: list[int] = field(default_factory=list)
    assigned: dict[bytes, int] = field(default_factory=dict)  # client value -> offset
    retried: dict[bytes, set[int]] = field(default_factory=dict)  # producer value -> offsets
    leader_hw: dict[int, tuple[int, int]] = field(default_factory=dict)  # node -> (epoch, hw)
    acked_all: dict[int, bytes] = field(default_factory=dict)  # offset -> value
    acked_leader: dict[int, bytes] = field(default_factory=dict)  # offset -> value
    acked_all_max: int = -1  # the highest offset any client was told is committed

    def record(self, log: list[SimRecord], value: bytes, control: bool, epoch: int) -> SimRecord:
        previous = log[-1].chain if log else 0
        return SimRecord(value, control, epoch, hash((previous, epoch, value, control)))

    def on_append(
        self, node: int, log: list[SimRecord], rec: SimRecord, *, assigned_here: bool
    ) -> None:
        offset = len(log)
        if rec.epoch <= 0 or (log and rec.epoch < log[-1].epoch):
            check(False, f"node {node}: record at {offset} has epoch {rec.epoch}")
        key = (offset, rec.epoch)
        known = self.seen.setdefault(key, rec.chain)
        if known != rec.chain:
            check(False, f"log matching: node {node} differs at (offset, epoch) {key}")
        if not rec.control and RETRIED in rec.value:
            # An idempotent producer's value: a retry may be assigned again by a later
            # leader after the first assignment was truncated (Simulation.check_producers
            # checks that the committed log holds it once).
            offsets = self.retried.setdefault(rec.value, set())
            if assigned_here:
                offsets.add(offset)
            elif offset not in offsets:
                check(False, f"node {node}: {rec.value!r} at {offset}, assigned at {offsets}")
        elif not rec.control:
            if assigned_here:
                if rec.value in self.assigned:
                    check(False, f"value {rec.value!r} assigned twice")
                self.assigned[rec.value] = offset
            elif self.assigned.get(rec.value) != offset:
                where = self.assigned.get(rec.value)
                check(False, f"node {node}: {rec.value!r} at {offset}, assigned at {where}")

    def on_truncate(self, node: int, log: list[SimRecord], offset: int, hw: int) -> None:
        check(offset >= hw, f"node {node}: truncation to {offset} below HW {hw}")
        check(offset <= len(log), f"node {node}: truncation past LEO")
        if offset < len(self.committed) and offset < len(log):
            check(
                log[offset].chain != self.committed[offset].chain,
                f"node {node}: truncation to {offset} removes committed records",
            )

    def on_high_watermark(self, node: int, log: list[SimRecord], hw: int, epoch: int = 0) -> None:
        """`epoch`: the replica's epoch (a HW it holds was its leader's in that epoch)."""
        check(hw <= len(log), f"node {node}: HW {hw} above LEO {len(log)}")
        if hw == 0:
            return
        known = len(self.committed)
        if hw <= known:
            check(
                log[hw - 1].chain == self.committed[hw - 1].chain,
                f"node {node}: HW {hw} over records that differ from the committed ones",
            )
            return
        if known:
            check(
                log[known - 1].chain == self.committed[known - 1].chain,
                f"node {node}: log differs from the committed prefix below {known}",
            )
        self.committed.extend(log[known:hw])
        self.commit_epochs.extend([epoch] * (hw - known))

    def on_commit(
        self, node: int, log: list[SimRecord], hw: int, voter_logs: list[list[SimRecord]]
    ) -> None:
        """Leader `node` moved its HW to `hw`: a majority of the voters (the leader among
        them, crashed ones included: they keep what they acknowledged) hold its record at
        `hw - 1`."""
        if hw == 0:
            return
        chain = log[hw - 1].chain
        holders = sum(1 for v in voter_logs if len(v) >= hw and v[hw - 1].chain == chain)
        if holders < len(voter_logs) // 2 + 1:
            check(
                False,
                f"leader {node}: HW {hw} with only {holders} of {len(voter_logs)} voters "
                "holding the record",
            )

    def on_leader(self, node: int, epoch: int, hw: int) -> None:
        """`node` leads `epoch` with HW `hw` (called after every event)."""
        holder = self.leaders.setdefault(epoch, node)
        if holder != node:
            check(False, f"election safety: epoch {epoch} led by {holder} and {node}")
        previous = self.leader_hw.get(node)
        if previous is not None and previous[0] == epoch and hw < previous[1]:
            check(False, f"leader {node} HW went back {previous[1]} -> {hw}")
        self.leader_hw[node] = (epoch, hw)

    def on_new_leader(
        self, node: int, epoch: int, log: list[SimRecord], damaged: set[int] | None = None
    ) -> None:
        """`damaged`: offsets whose bytes rotted on this node's disk (its checksums refuse
        them; it repairs itself from the others): the record is there, unreadable.

        By epoch, as Raft states it: a leader of `epoch` holds every record committed in
        an earlier epoch (committed in: the epoch of the leader whose HW covered it first,
        whatever epoch the record was written in). A process paused while it was a
        candidate (SIGSTOP: `quiet.py`'s pauses) may take up its leadership of an old epoch
        after later epochs committed more: it commits nothing (its voters moved on) and
        serves nothing (its own epoch never commits; the simulator checks what serving
        leaders answer after every event)."""
        known = next(
            (i for i, e in enumerate(self.commit_epochs) if e >= epoch), len(self.committed)
        )
        check(
            len(log) >= known
            and (known == 0 or log[known - 1].chain == self.committed[known - 1].chain),
            f"leader completeness: leader {node} of epoch {epoch} lacks committed records",
        )
        for offset, value in self.acked_all.items():
            if (damaged and offset in damaged) or offset >= known:
                continue
            check(log[offset].value == value, f"leader {node} lost acked record at {offset}")

    def on_ack_all(self, base: int, values: tuple[bytes, ...]) -> None:
        for i, value in enumerate(values):
            offset = base + i
            check(
                offset < len(self.committed) and self.committed[offset].value == value,
                f"acks=all completed for {value!r} at {offset} before it committed",
            )
            self.acked_all[offset] = value
            self.acked_all_max = max(self.acked_all_max, offset)

    def on_ack_leader(self, base: int, values: tuple[bytes, ...]) -> None:
        for i, value in enumerate(values):
            self.acked_leader[base + i] = value
