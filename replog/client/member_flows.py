"""A group member's steps, once for the threaded and the asyncio consumer (sans-I/O flows).

What a member does around its two pure cores (`member_rules.Membership`: join, heartbeat,
reconcile, auto-commit; `fetch_rules.Positions`: positions, pauses, epochs) is written here
once, as flows: generators that yield the I/O to perform as data and get its result back
(`client_calls.drive` / `drive_blocking` run them; an error of a step is thrown into the
flow at its `yield`). The steps: a Groups call (`group_rpcs.GroupRpc`), and the consumer's
own I/O, each naming the twin's method that performs it (`ResetOffset`, `Restart`,
`StopFetch`, `StartHeartbeats`, `HeartbeatNow`, `AwaitHeartbeat`). `GroupConsumer` and
`AsyncGroupConsumer` keep their threads or tasks, queue and events only.

The order is the protocol's: before poll waits for records, a member that must (re)join
first drops its partitions (no commit: they may be someone else's already) and joins;
then it reconciles (revoked partitions are committed, `on_revoke` runs, then the added
ones start from the group's committed offsets, or `auto_offset_reset`, then `on_assign`),
then auto-commits when due.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from replog.client import group_rpcs as rpcs
from replog.client.fetch_rules import GroupRecord, PartitionState, Positions
from replog.client.group_rpcs import CoordinatorMap, GroupRpc
from replog.client.member_rules import Heartbeat, Membership
from replog.client.retry import RetryPolicy
from replog.errors import IllegalGenerationError, ReplogError, UnknownMemberError

TopicPartition = tuple[str, int]
Callback = Callable[[set[TopicPartition]], None]


@dataclass(frozen=True, slots=True)
class ResetOffset:
    """The partition's "earliest" or "latest" offset (its result)."""

    tp: TopicPartition
    where: str
    method: str = "_do_reset_offset"


@dataclass(frozen=True, slots=True)
class Restart:
    """(Re)start the partition's fetch at `state.position` (none while it is paused)."""

    tp: TopicPartition
    state: PartitionState
    method: str = "_do_restart_fetch"


@dataclass(frozen=True, slots=True)
class StopFetch:
    """Stop the fetches of these partitions (no longer the member's)."""

    states: list[PartitionState]
    method: str = "_do_stop_fetch"


@dataclass(frozen=True, slots=True)
class StartHeartbeats:
    """Start the heartbeat loop (once: nothing when it runs)."""

    method: str = "_do_start_heartbeats"


@dataclass(frozen=True, slots=True)
class HeartbeatNow:
    """Heartbeat at once (the coordinator hears of a rebalance done)."""

    method: str = "_do_heartbeat_now"


@dataclass(frozen=True, slots=True)
class AwaitHeartbeat:
    """Heartbeat at once and wait for its answer, at most `timeout_s`."""

    timeout_s: float
    method: str = "_do_await_heartbeat"


@dataclass(frozen=True, slots=True)
class Take:
    """The next fetched item of the consumer's queue, waiting at most `timeout_s` (0: only
    one already there); None when there is none."""

    timeout_s: float
    method: str = "_do_take"


Step = (
    GroupRpc[Any]
    | Take
    | ResetOffset
    | Restart
    | StopFetch
    | StartHeartbeats
    | HeartbeatNow
    | AwaitHeartbeat
)
Flow = Generator[Step, Any, Any]


class Consumer(Protocol):
    """What the flows read and change of a group consumer (either twin)."""

    group: str
    topics: list[str]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    auto_commit: bool
    auto_offset_reset: str
    on_assign: Callback | None
    on_revoke: Callback | None
    _member: Membership
    _pos: Positions
    _poll_api: bool

    @property
    def calls(self) -> CoordinatorMap: ...

    @property
    def lock(self) -> contextlib.AbstractContextManager[Any]: ...

    @property
    def member_id(self) -> str | None: ...

    @property
    def generation(self) -> int: ...

    def now(self) -> float: ...


def ask(rpc: GroupRpc[Any]) -> Generator[Step, Any, Any]:
    result = yield rpc
    return result


def join(c: Consumer) -> Flow:
    """Join the group: the coordinator's first answer, then the heartbeats."""
    join_rpc = rpcs.join(
        c.calls,
        c.group,
        c.topics,
        session_timeout_ms=c.session_timeout_ms,
        rebalance_timeout_ms=c.rebalance_timeout_ms,
        client_id=c.client_id,
    )
    answer, session_ms = yield from ask(join_rpc)
    with c.lock:
        c._member.joined(answer, session_ms, c.now())
    yield StartHeartbeats()


def heartbeat(c: Consumer, beat: Heartbeat) -> Generator[Step, Any, bool]:
    """One heartbeat, within its session (True: answered)."""
    policy = RetryPolicy(attempts_max=1000, deadline_ms=beat.deadline_ms)
    owned, timeout_s = beat.owned, beat.timeout_s
    rpc = rpcs.heartbeat(
        c.calls, c.group, beat.member_id, beat.generation, owned, policy, timeout_s
    )
    try:
        answer = yield from ask(rpc)
    except ReplogError as err:
        with c.lock:
            unknown = isinstance(err, UnknownMemberError)
            c._member.heartbeat_failed(beat, unknown, c.now())
        return False
    with c.lock:
        c._member.heartbeat_answered(beat, answer, c.now())
    return True


def maintain(c: Consumer) -> Flow:
    """Join, reconcile, auto-commit: what poll does before it waits for records."""
    with c.lock:
        rejoin = c._member.needs_join()
    if rejoin:
        yield from drop(c, set(c._pos.partitions), commit_first=False)
        yield from join(c)
    with c.lock:
        plan = c._member.reconcile(c._pos.partitions)
    if plan is not None:
        yield from reconcile(c, *plan)
    with c.lock:
        due = c._member.auto_commit_due(c.now())
    if due:
        with contextlib.suppress(ReplogError):  # next time (or the next owner re-reads)
            yield from commit(c, c._pos.consumed_offsets())


def reconcile(c: Consumer, revoked: set[TopicPartition], added: set[TopicPartition]) -> Flow:
    """Release `revoked` (committed, then `on_revoke`), then take `added`."""
    if revoked:
        yield from drop(c, revoked, commit_first=True)
    if added:
        yield from add(c, added)
    if revoked or added:
        with c.lock:
            c._member.rebalanced()
        yield HeartbeatNow()  # tell the coordinator at once


def drop(c: Consumer, tps: set[TopicPartition], *, commit_first: bool) -> Flow:
    if not tps:
        return
    if commit_first and c.auto_commit:
        with contextlib.suppress(ReplogError):  # refused: its new owner re-reads them
            yield from commit(c, c._pos.consumed_offsets(tps))
    if c.on_revoke is not None:
        c.on_revoke(set(tps))
    with c.lock:
        states = c._pos.drop(tps)
    yield StopFetch(states)


def add(c: Consumer, tps: set[TopicPartition]) -> Flow:
    found = yield from ask(rpcs.committed(c.calls, c.group, sorted(tps)))
    committed = {(o.topic, o.partition): o.offset for o in found}
    for tp in sorted(tps):
        offset = committed.get(tp, -1)
        if offset < 0:
            offset = yield ResetOffset(tp, c.auto_offset_reset)
        with c.lock:
            state = c._pos.add(tp, offset)
        yield Restart(tp, state)
    if c.on_assign is not None:
        c.on_assign(set(tps))


def commit(c: Consumer, offsets: dict[TopicPartition, int]) -> Flow:
    """Commit `offsets` as this member (nothing when it is none). A heartbeat answer that
    crossed the commit (ILLEGAL_GENERATION): learn the new generation, once, and commit
    again. UNKNOWN_MEMBER: the member is lost (its partitions are someone else's now)."""
    member = c.member_id
    if member is None or not offsets:
        return
    try:
        yield from ask(rpcs.commit(c.calls, c.group, offsets, member, c.generation))
    except IllegalGenerationError:
        yield AwaitHeartbeat(c._member.session_s)
        yield from ask(rpcs.commit(c.calls, c.group, offsets, member, c.generation))
    except UnknownMemberError:
        with c.lock:
            c._member.mark_lost(member)
        raise


def commit_positions(
    c: Consumer, offsets: dict[TopicPartition, int] | None = None
) -> Generator[Step, Any, None]:
    """Commit `offsets` ((topic, partition) -> next offset to read), or the position of
    every partition (every record delivered so far). Raises UNKNOWN_MEMBER if this
    member was removed (its partitions are someone else's now)."""
    yield from commit(c, c._pos.positions() if offsets is None else offsets)


def committed(
    c: Consumer, partitions: Sequence[TopicPartition] = ()
) -> Generator[Step, Any, dict[TopicPartition, int]]:
    """The group's committed offsets (-1: none) of `partitions` (default: this member's)."""
    wanted = list(partitions) or sorted(c._pos.partitions)
    found = yield from ask(rpcs.committed(c.calls, c.group, wanted))
    return {(o.topic, o.partition): o.offset for o in found}


def seek(c: Consumer, topic: str, partition: int, offset: int | str) -> Generator[Step, Any, None]:
    """Read `topic/partition` (one of this member's) from `offset`: an int, "earliest"
    or "latest". The next commit stores it."""
    tp = (topic, partition)
    if isinstance(target := c._pos.seek_target(tp, offset), str):
        target = yield ResetOffset(tp, target)
    yield Restart(tp, c._pos.reset(tp, target))


def records(c: Consumer, timeout_s: float) -> Generator[Step, Any, list[GroupRecord]]:
    """Records for poll or the iterator (up to about `max_poll_records`), waiting up to
    `timeout_s` for the first: held ones first, then what the fetchers queued; a
    partition out of range starts again where `auto_offset_reset` says; a rebalance
    coming stops the taking (reconciled before more of moving partitions is delivered)."""
    out = c._pos.take_held()
    if c._pos.held:
        return out  # still more held than one call returns
    deadline = c.now() + timeout_s
    while len(out) < c._pos.max_poll_records:
        item = yield Take(0.0 if out else max(0.0, deadline - c.now()))
        if item is None:
            break
        taken = c._pos.accept(*item)
        if taken is None:  # out of range
            tp = item[0]
            offset = yield ResetOffset(tp, c.auto_offset_reset)
            yield Restart(tp, c._pos.reset(tp, offset))
        else:
            out.extend(taken)
        if c._member.changed:
            break
    return c._pos.cut(out)


def leave(c: Consumer) -> Flow:
    """What `close` sends: the processed positions committed (with auto-commit), then
    LeaveGroup (best effort both: the session ends the membership anyway)."""
    member = c.member_id
    if member is None or c._member.lost:
        return
    if c.auto_commit:
        if c._poll_api:
            c._pos.processed()
        with contextlib.suppress(ReplogError):
            yield from commit(c, c._pos.consumed_offsets())
    with contextlib.suppress(ReplogError):
        yield from ask(rpcs.leave(c.calls, c.group, member, RetryPolicy(attempts_max=3)))
