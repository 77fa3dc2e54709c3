"""Liveness of peer nodes, one view per node (pure: no I/O, no clock; times in ms).

Quiescence (`roles/quiet.py`) moves the liveness of idle partitions from the partitions to
the node: a quiet partition exchanges nothing for long stretches, so its replicas learn
whether the other side is alive from the node's links instead. The transport reports
every batch it receives from a peer (heartbeats included: an idle link carries an empty
batch every heartbeat interval) with the sender's *incarnation* (an id drawn at process
start, sent when a stream opens), and calls `check` on a timer.

`NodeLiveness` tells the replicas of its node that are quiet (`watch`) when something about
a peer node changed that may have cost them a message or their leader: the node went silent
for `silence_ms` (crashed, paused, cut off), came back with another incarnation (restarted:
fetches parked in its memory are gone), or opened a new stream (the link broke: what was in
flight on it may be lost). A woken replica leaves its quiet state (`Replica.wake`) and runs
its ordinary timers again. It never changes votes, logs or the HW: only when timers fire.
"""

from __future__ import annotations

from collections.abc import Callable

Waker = Callable[[int], None]  # called with the node whose liveness changed


class NodeLiveness:
    """What one node hears of its peers, and the quiet replicas to wake when that changes."""

    def __init__(self, silence_ms: int) -> None:
        assert silence_ms > 0, silence_ms
        self.silence_ms = silence_ms
        self._heard: dict[int, int] = {}
        self._incarnations: dict[int, int] = {}
        self._silent: set[int] = set()  # nodes woken for as silent, not heard since
        self._watchers: set[Waker] = set()
        self.wakes = 0  # liveness events that woke the quiet replicas (for tests, metrics)

    def heard_ms(self, node: int) -> int | None:
        """When `node` was last heard (None: never)."""
        return self._heard.get(node)

    def incarnation(self, node: int) -> int | None:
        return self._incarnations.get(node)

    def heard(self, node: int, now_ms: int, incarnation: int | None = None) -> None:
        """Traffic from `node` (its incarnation when the stream says it). A new incarnation
        wakes the quiet replicas: the node restarted."""
        known = self._incarnations.get(node)
        if incarnation is not None:
            self._incarnations[node] = incarnation
        self._heard[node] = max(now_ms, self._heard.get(node, now_ms))
        self._silent.discard(node)
        if incarnation is not None and known is not None and known != incarnation:
            self._wake(node)

    def connected(self, node: int, now_ms: int, incarnation: int | None = None) -> None:
        """`node` opened a new stream here: what was in flight on the old one may be lost."""
        self.heard(node, now_ms, incarnation)
        self._wake(node)

    def check(self, now_ms: int) -> None:
        """Wake the quiet replicas once for each node silent for `silence_ms` (a timer calls
        this every heartbeat interval)."""
        for node, at in list(self._heard.items()):
            if now_ms - at >= self.silence_ms and node not in self._silent:
                self._silent.add(node)
                self._wake(node)

    def watch(self, waker: Waker) -> None:
        self._watchers.add(waker)

    def unwatch(self, waker: Waker) -> None:
        self._watchers.discard(waker)

    @property
    def watched(self) -> int:
        """Quiet replicas watching (for tests and metrics)."""
        return len(self._watchers)

    def _wake(self, node: int) -> None:
        self.wakes += 1
        for waker in list(self._watchers):
            waker(node)


class NeverHeard:
    """The liveness of a replica outside a node (tests, tools): no peer is ever heard, so
    nothing goes quiet."""

    def heard_ms(self, node: int) -> int | None:
        return None
