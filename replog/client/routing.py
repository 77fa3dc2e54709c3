"""Where a client's calls go: the nodes it knows, the one it talks to, the partition leaders.

Pure state, no I/O (the sync `Client` and the `AsyncClient` share it):

- `known`: the bootstrap addresses, then every node the latest metadata named (bootstraps
  first, in the order given; duplicates dropped). One bootstrap address is enough: the
  client learns the rest from `GetMetadata` before its first call (`discovered`) and
  whenever it fetches metadata again.
- `current`: the node that admin and metadata calls go to, and data calls whose partition
  leader is not known.
- `leaders`: (topic, partition) -> the leader's address, from metadata and NOT_LEADER hints.

A node that does not answer (connection refused or reset, shutting down, no answer before
the deadline) is suspect for `SUSPECT_S`: it is forgotten as a leader, `current` moves to
the next known node that is not suspect, and a NOT_LEADER hint naming it is not followed
(a follower names its dead leader until it notices). A node whose attempt died (no answer
within the attempt deadline: paused, hung, cut off) stays suspect for `DEAD_SUSPECT_S`,
until it answers again: a paused leader is not asked again while the others elect a new
one, and metadata that still names it as a leader is not followed (a NOT_LEADER hint
naming it is, after `SUSPECT_S`: the replicas have had an election's time to learn of
another leader, so the hint says a slow leader is still the leader). How often and how long
a call retries is its `RetryPolicy`'s business (`retry.py`): rotating never loops on its own.

`reached` says whether any node ever answered (`answered`); before that, `connect_failed`
tells the client when every bootstrap address failed to connect (`connect.check`: fail
fast, with the likely cause).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from replog.errors import (
    DeadlineExceededError,
    LeaderUnknownError,
    NotLeaderError,
    PartitionOfflineError,
    ReplogError,
    UnavailableError,
)

if TYPE_CHECKING:
    from replog.v1 import admin_pb2

# How long a node that did not answer is passed over (rotation, leader hints). About one
# election: by then its partitions have new leaders, or it is back.
SUSPECT_S = 1.0
# A node that accepted the call and never answered (a paused or hung process) is passed
# over longer: the new leader is elected by then, and asking it again costs a whole attempt.
DEAD_SUSPECT_S = 5.0


def split_addresses(address: str) -> list[str]:
    """`"host:port,host:port"` -> the addresses, in order (blanks dropped)."""
    out = [a.strip() for a in address.split(",") if a.strip()]
    if not out:
        raise ValueError(f"no address in {address!r}")
    return out


def unreachable_error(err: ReplogError) -> bool:
    """Whether `err` says the node itself did not serve the call (any node may do better)."""
    if isinstance(err, DeadlineExceededError):
        return True
    return isinstance(err, UnavailableError) and not isinstance(err, LeaderUnknownError)


class Routing:
    def __init__(self, bootstraps: Sequence[str]) -> None:
        assert bootstraps, "a client needs at least one address"
        self.bootstraps = tuple(dict.fromkeys(bootstraps))
        self.known = self.bootstraps
        self.current = self.bootstraps[0]
        self.leaders: dict[tuple[str, int], str] = {}
        self.discovered = False  # metadata has named the cluster's nodes at least once
        # address -> (monotonic time it failed, time suspicion ends)
        self._suspects: dict[str, tuple[float, float]] = {}
        self.reached = False  # some node answered a call (connect.check)
        self._connect_failures: set[str] = set()  # bootstraps that failed before contact
        self._lock = threading.Lock()

    def address(self, topic: str | None = None, partition: int = 0) -> str:
        """Where a call goes: the partition's leader when known, else `current`."""
        if topic is None:
            return self.current
        return self.leaders.get((topic, partition), self.current)

    def suspect(self, address: str, now: float | None = None, *, hint: bool = False) -> bool:
        """Whether `address` is passed over now. For a NOT_LEADER hint naming it (`hint`), only
        during the first `SUSPECT_S`: by then the replicas have heard of a new leader, so a
        hint that still names it is news that it leads (a slow leader, not a dead one)."""
        found = self._suspects.get(address)
        if found is None:
            return False
        failed, until = found
        now = time.monotonic() if now is None else now
        return now < (min(until, failed + SUSPECT_S) if hint else until)

    def answered(self, address: str) -> None:
        """`address` answered a call (maybe with an error of its own): no longer suspect."""
        self.reached = True
        if address in self._suspects:
            with self._lock:
                self._suspects.pop(address, None)

    def connect_failed(self, address: str) -> bool:
        """`address` could not be connected to; True when no node was ever reached and every
        bootstrap address has now failed so (the call should fail at once)."""
        with self._lock:
            self._connect_failures.add(address)
            return not self.reached and self._connect_failures >= set(self.bootstraps)

    # -- what the client learned ----------------------------------------------------------

    def learn(self, meta: admin_pb2.Metadata) -> None:
        """Take the nodes and partition leaders of a `GetMetadata` answer."""
        addresses = {n.id: n.address for n in meta.nodes}
        with self._lock:
            self.known = tuple(dict.fromkeys((*self.bootstraps, *addresses.values())))
            if self.current not in self.known:
                self.current = self.known[0]
            self.discovered = True
            now = time.monotonic()
            for t in meta.topics:
                for p in t.partitions:
                    if p.leader_id in addresses and self.suspect(addresses[p.leader_id], now):
                        # A node that has not heard of the new leader yet names the one that
                        # stopped answering: ask the next healthy node instead.
                        self.leaders.pop((t.name, p.partition), None)
                    elif p.leader_id in addresses:
                        self.leaders[(t.name, p.partition)] = addresses[p.leader_id]
                    elif p.replicas and p.replicas[0] in addresses:
                        # The answering node holds no replica: a replica knows the leader.
                        self.leaders[(t.name, p.partition)] = addresses[p.replicas[0]]

    def failed(
        self, err: ReplogError, address: str, *, idempotent: bool, now: float | None = None
    ) -> ReplogError:
        """Note that a call to `address` failed with `err`; returns what the call raises.

        A timed-out idempotent call (a read) becomes a retriable UNAVAILABLE, to be retried
        elsewhere; any other timed-out call stays DEADLINE_EXCEEDED: its outcome is unknown.
        """
        if unreachable_error(err):
            dead = isinstance(err, DeadlineExceededError)
            self.unreachable(address, now, DEAD_SUSPECT_S if dead else SUSPECT_S)
        if isinstance(err, DeadlineExceededError) and idempotent:
            return UnavailableError(
                f"no answer before the deadline; trying another node ({err.message})",
                grpc_code="DEADLINE_EXCEEDED",
            )
        return err

    def reroute(
        self, err: ReplogError, topic: str | None, partition: int, now: float | None = None
    ) -> bool:
        """Before the retry of a call that failed with `err`: True when the retry goes to
        another node and is worth making at once (no backoff)."""
        if isinstance(err, NotLeaderError) and topic is not None:
            return self.not_leader(topic, partition, err.leader_address or "", now)
        if isinstance(err, LeaderUnknownError):
            # This replica (or, for a call without a topic, this node's cluster metadata) is
            # between leaders; another node may already know the new one. A node cut off
            # from its peers answers this forever: staying on it would spend the budget.
            if topic is not None:
                self.leaders.pop((topic, partition), None)
            self._rotate(self.current, now)
            return False
        if isinstance(err, PartitionOfflineError) and topic is not None:
            # This node's replica is offline (a disk error) and knows no leader: the others
            # elect one. Off this node, even when it is the one metadata is asked of.
            offline = self.address(topic, partition)
            self.leaders.pop((topic, partition), None)
            self._rotate(offline, now)
            return len(self.known) > 1
        return unreachable_error(err) and len(self.known) > 1

    def not_leader(
        self, topic: str, partition: int, leader_address: str, now: float | None = None
    ) -> bool:
        """Route the partition to the leader a NOT_LEADER answer names; True when that is a
        new address. A hint naming a suspect node, or none, comes from a replica that has not
        heard of the new leader yet: the retry goes to the next healthy node (which may
        have), not to the same replica again."""
        before = self.address(topic, partition)
        if not leader_address or self.suspect(leader_address, now, hint=True):
            self.leaders.pop((topic, partition), None)
            self._rotate(before, now)
            return False
        self.leaders[(topic, partition)] = leader_address
        return leader_address != before

    def unreachable(self, address: str, now: float | None = None, for_s: float = SUSPECT_S) -> None:
        """`address` did not answer: suspect it (`for_s`), forget it as a leader, move off it."""
        with self._lock:
            failed = time.monotonic() if now is None else now
            self._suspects[address] = (failed, failed + for_s)
            for key in [k for k, a in self.leaders.items() if a == address]:
                del self.leaders[key]
        if self.current == address:
            self._rotate(address, now)

    def _rotate(self, address: str, now: float | None) -> None:
        """`current` becomes the next known node after `address` that is not suspect (the
        plain next one when all are)."""
        with self._lock:
            known = self.known
            start = known.index(address) + 1 if address in known else 0
            ring = [known[(start + i) % len(known)] for i in range(len(known))]
            healthy = [a for a in ring if a != address and not self.suspect(a, now)]
            self.current = healthy[0] if healthy else ring[0]


def needs_metadata(err: ReplogError, routed_to: str) -> bool:
    """Whether a data call's retry should first ask metadata where the partition's leader is."""
    if isinstance(err, NotLeaderError):
        return not err.leader_address or err.leader_address != routed_to
    return isinstance(err, LeaderUnknownError) or unreachable_error(err)


def topic_partition_moved(routing: Routing, topic: str, partition: int) -> bool:
    """Whether metadata named a leader for the partition (the retry goes there at once)."""
    return (topic, partition) in routing.leaders
