"""Quiescence (pure): an idle partition exchanges (almost) nothing, as CockroachDB and TiKV
quiesce their ranges, adapted to pull-based Raft.

A partition goes quiet when its leader holds nothing a follower lacks: the leader's answer
left the follower at the leader's LEO with the HW there too (`HW == LEO`), so the
follower's next fetch asks for nothing new. Then, with `quiet_fetch_wait_ms` set:

* the leader holds that fetch (`park`) for `quiet_fetch_wait_ms` instead of
  `fetch_wait_ms_max`, unless an append, a membership change or a HW comes first (they
  answer it at once, as any parked fetch). Only the *first* fetch after such an answer is
  held so: a second one with nothing answered in between (the follower retried: its fetch
  or the answer was lost, or it does not trust the quiet state) is parked as usual;
* the follower (`enter`), while its leader's node is heard, fetches again only after
  `quiet_fetch_wait_ms` (plus the usual retry margin) and campaigns only if no answer came
  for `quiet_fetch_wait_ms` plus its election timeout (a safety net: whatever went wrong,
  a silent leader is replaced in bounded time);
* the leader's check-quorum counts a voter whose fetch it holds quietly as alive, and it
  sends no `BeginEpoch` to it.

Liveness moves to the node (`liveness.NodeLiveness`): each side goes quiet only while it
hears the other's node, and `wake` (called for the node whose liveness changed: silent,
restarted, reconnected) ends the quiet state of what that node concerns: a follower of a
leader on it fetches again at once and its election timer runs as usual (randomised from
now); a leader answers the held fetch of a follower on it at the next tick and counts that
follower alive from when its node was last heard. Quiet states change timers only: votes,
logs and the HW rule are untouched.
"""

from __future__ import annotations

from replog.replication.messages import FetchRequest, Records
from replog.replication.roles.core import Core, Progress, Step


def _hears(c: Core, node: int, now_ms: int) -> bool:
    heard = c.liveness.heard_ms(node)
    return heard is not None and now_ms - heard < c.config.election_timeout_ms_min


def answered(c: Core, progress: Progress) -> None:
    """The leader sends `progress`'s replica an answer ending at its LEO: whether that
    leaves it with the whole log, HW included (its next fetch may then be held long)."""
    progress.quiet = False
    progress.answered_quiet = c.config.quiet_fetch_wait_ms > 0 and c.hw == c.leo


def park(c: Core, progress: Progress, request: FetchRequest, now_ms: int) -> None:
    """The leader parks `request` (at its LEO): quietly if it is the first fetch after an
    answer that left the follower with everything, the HW still is the LEO, no transfer is
    under way, and the follower's node is heard."""
    first, progress.answered_quiet = progress.answered_quiet, False
    progress.quiet = (
        first
        and c.hw == c.leo == request.fetch_offset
        and progress.hw_sent == c.hw
        and c.transfer is None
        and _hears(c, request.replica_id, now_ms)
    )
    if progress.quiet:
        # Jittered, between 3/4 of `quiet_fetch_wait_ms` and all of it (timing only: the
        # follower waits for the whole of it plus its election timeout): partitions that
        # went quiet together (a burst of creates) are answered spread out instead of all
        # in the same instant every `quiet_fetch_wait_ms`, a burst that, on 3 loaded nodes
        # at 1,000 partitions, delayed answers past the followers' margin (elections).
        wait = c.config.quiet_fetch_wait_ms
        progress.quiet_wait_ms = c.rng.randint(wait - wait // 4, wait)


def wake_leader(c: Core, node: int, now_ms: int) -> None:
    """The liveness of `node` changed: a fetch of its replica held quietly is answered at
    the next tick (its usual wait is over), and the replica counts as alive from when its
    node was last heard."""
    progress = c.progress.get(node)
    if progress is not None and progress.quiet:
        progress.quiet = False
        heard = c.liveness.heard_ms(node)
        last = progress.last_fetch_ms
        if heard is not None and (last is None or heard > last):
            progress.last_fetch_ms = min(heard, now_ms)


def wake_follower(c: Core, node: int, now_ms: int) -> bool:
    """The liveness of `node` changed: a quiet follower of a leader there runs its usual
    election timer again (randomised from now). True: its fetch is to be sent again (it
    may be lost with the node's memory or the link)."""
    if not (c.quiet and c.leader_id == node):
        return False
    c.quiet = False
    cfg = c.config
    timeout = c.rng.randint(cfg.election_timeout_ms_min, cfg.election_timeout_ms_max)
    c.election_deadline_ms = min(c.election_deadline_ms, now_ms + timeout)
    if c.fetch_sent_ms is None:
        return False
    c.fetch_sent_ms = None
    return True


def unpark(progress: Progress, now_ms: int) -> None:
    """A fetch held quietly is answered (news, or its time is up): its replica counts as
    alive now for check-quorum (no wake said its node went silent)."""
    if progress.quiet:
        progress.quiet = False
        progress.last_fetch_ms = now_ms


def parked_wait_ms(c: Core, progress: Progress) -> int:
    return progress.quiet_wait_ms if progress.quiet else c.config.fetch_wait_ms_max


def enter(c: Core, records: Records, now_ms: int) -> None:
    """A follower applied its leader's records answer: quiet if that left it at the
    leader's LEO with the HW there, and its leader's node is heard."""
    leader = c.leader_id
    if (
        c.config.quiet_fetch_wait_ms > 0
        and c.step is Step.FOLLOWER
        and leader is not None
        and records.high_watermark == records.end_offset == c.leo == c.hw
        and _hears(c, leader, now_ms)
    ):
        cfg = c.config
        timeout = c.rng.randint(cfg.election_timeout_ms_min, cfg.election_timeout_ms_max)
        c.election_deadline_ms = now_ms + cfg.quiet_fetch_wait_ms + timeout
        c.quiet = True


def fetch_retry_ms(c: Core) -> int:
    """How long a follower's fetch goes unanswered before it is sent again."""
    cfg = c.config
    if c.quiet:
        return cfg.quiet_fetch_wait_ms + cfg.fetch_retry_ms - cfg.fetch_wait_ms_max
    return cfg.fetch_retry_ms


def is_quiet(c: Core) -> bool:
    """A quiet follower, or a leader holding a fetch quietly: what `wake` concerns."""
    return c.quiet or any(p.quiet for p in c.progress.values())
