"""When a replica's owner runs: its ticks on the node's one timer, and the wakes of the
node's liveness (a base of `ReplicaDriver`; its state is the driver's).

Ticks: after each pass the owner asks the node's `Ticker` to wake it when the core's next
timer is due (`Replica.next_tick_ms`), no sooner than `tick_ms`, on a grid of `tick_ms`.

Campaigns (`campaigns.py`): an election timeout of a data partition starts a campaign
only within the node's budget (one per ticker, i.e. per node); over it, it waits a fresh
election timeout.

Liveness (`liveness.py`, `roles/quiet.py`): the transport may carry the node's
`NodeLiveness` (`transport.liveness`; none: nothing goes quiet). While the core is quiet
(`Replica.quiet`) the driver watches it; a wake for a peer node is handed to the core
(`Replica.wake`) at the owner's next tick, which it brings forward to now.
"""

from __future__ import annotations

import math
import random

from replog.replication.campaigns import budget_of
from replog.replication.faults import FaultHandling
from replog.replication.liveness import NodeLiveness
from replog.replication.outputs import Output
from replog.replication.ticker import Ticker, Wakeup


class Timing(FaultHandling):
    """The owner's tick scheduling and the liveness wakes."""

    tick_ms: int
    _rng: random.Random
    _stopping: bool
    _ticker: Ticker | None
    _tick_wakeup: Wakeup

    def _init_liveness(self, transport: object) -> None:
        liveness = getattr(transport, "liveness", None)
        self._liveness = liveness if isinstance(liveness, NodeLiveness) else None
        self._woken: set[int] = set()  # peer nodes whose liveness changed, for the core
        self._watching = False

    def _liveness_changed(self, node: int) -> None:
        """`NodeLiveness`'s call: hand `node` to the core at a tick now."""
        self._woken.add(node)
        if not self.stopped:
            self._tick_due = True
            self._wake()

    def _within_campaign_budget(self, now: int) -> None:
        """Before a tick: an election timeout that would start a campaign takes a token of
        the node's `CampaignBudget` (`campaigns.py`; the metadata log, `essential`, takes
        none); without one, the timeout waits a fresh election timeout."""
        replica = self.replica
        if self.essential or self._ticker is None or not replica.election_due(now):
            return
        if not budget_of(self._ticker).take(now):
            cfg = self.config
            wait = self._rng.randint(cfg.election_timeout_ms_min, cfg.election_timeout_ms_max)
            replica.defer_election(now + wait)

    def _woken_outputs(self, now: int) -> list[Output]:
        outputs: list[Output] = []
        woken, self._woken = self._woken, set()
        for node in sorted(woken):
            outputs += self.replica.wake(node, now)
        return outputs

    def _watch_liveness(self, quiet: bool) -> None:
        """Be woken by the node's liveness while the core is quiet (only then)."""
        liveness = self._liveness
        if liveness is None or quiet == self._watching:
            return
        self._watching = quiet
        if quiet:
            liveness.watch(self._liveness_changed)
        else:
            liveness.unwatch(self._liveness_changed)

    def _due_ms(self) -> int | None:
        """When the owner next has a tick to run (None: not until an input comes): the
        core's next timer, or the retry of a failed log operation."""
        if self._offline is not None or self._stopping:
            return None
        if self._failed is not None:
            return int(self._retry_at * 1000)
        return self.replica.next_tick_ms()

    def _schedule_tick(self) -> None:
        """After each pass of the owner: be woken when the next tick is due, no sooner
        than `tick_ms` from now (the most often a replica ever ticks)."""
        ticker = self._ticker
        if ticker is None:
            return
        self._watch_liveness(self.replica.quiet and not self._stopping)
        due = self._due_ms()
        if due is None:
            ticker.cancel(self._tick_wakeup)
            return
        self._wake_at(ticker, max(due - self._now_ms(), self.tick_ms))

    def _wake_at(self, ticker: Ticker, delay_ms: int) -> None:
        """Be woken `delay_ms` from now, rounded up to the next multiple of `tick_ms` on the
        loop's clock: the replicas of a node whose timers come due together tick together,
        and their messages to a peer leave in one batch (the answers to parked fetches of
        every partition two nodes share, then the fetches that follow them, stay in step)."""
        grid_s = self.tick_ms / 1000
        at = math.ceil((ticker.loop.time() + delay_ms / 1000) / grid_s) * grid_s
        ticker.schedule(self._tick_wakeup, at)

    def _tick_fired(self) -> None:
        """The ticker's call: tick if the core's timer is due (it may have moved later
        since this wake-up was armed: then be woken at the new time instead)."""
        due = self._due_ms()
        if due is None or self._ticker is None:
            return
        ahead_ms = due - self._now_ms()
        if ahead_ms > 0:
            self._wake_at(self._ticker, ahead_ms)
            return
        self._tick_due = True
        self._wake()
