"""A member of a consumer group: consumes the partitions the coordinator gives it, commits
its progress, hands partitions over when the group changes (`client.consumer(topic,
group="g")`).

    with client.consumer("orders", group="billing") as consumer:
        for record in consumer:               # GroupRecord(topic, partition, offset, value)
            handle(record)                    # auto-commit: every auto_commit_interval_ms

Threads: a heartbeat thread keeps the membership alive and learns the member's partitions
(`replog.v1.Groups.Heartbeat`); one fetch thread per partition long-polls its leader
(`Fetch`) into a bounded queue. Everything else happens in the caller's thread, inside
`poll()` (or the iterator): joining, taking and releasing partitions, auto-commits. The
member's state and decisions (when to join again, what to revoke and add, whether a failed
heartbeat loses the membership, when an auto-commit is due) are
`member_rules.Membership`'s, the sans-I/O core it shares with the asyncio twin.

Delivery is at least once. A record counts as processed once the caller comes back for the
next one (the iterator) or calls `poll()` again; auto-commit commits processed positions
only; `commit()` commits every record delivered so far (call it after processing). When a
partition is revoked, its processed position is committed (with auto-commit; else
`on_revoke` is the place to commit) before the coordinator is told it is released, and its
new owner starts from that commit. A member that loses its membership (missed heartbeats
past its session timeout, a coordinator failover) drops its partitions without committing
(the commit would be refused) and joins again: what it processed after its last commit is
delivered again to the partitions' next owners.

`seek(topic, partition, offset | "earliest" | "latest")`, `seek_to_time(...)`,
`pause(...)`, `resume(...)`, `assignment()`, `position(...)`, `committed()`. The positions,
pauses, fetch epochs and the records held beyond `max_poll_records` are
`fetch_rules.Positions`'s (the pure core both consumers drive); `ConsumerBase` holds what
the threaded and asyncio consumers share (options, cores, the calls that only read or
change them).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar

from replog.client import member_flows as flows
from replog.client.client_calls import drive_blocking
from replog.client.fetch_rules import (
    GroupRecord,
    PartitionState,
    PollBuffer,
    Positions,
    bounds,
    check_reset,
    fetched,
    first_offsets,
    offset_at,
    records_of,
)
from replog.client.group_rpcs import GroupRpc
from replog.client.groups import GroupCalls, TopicPartition
from replog.client.member_rules import Member, Membership
from replog.client.results import FetchResult
from replog.client.retry import RetryPolicy
from replog.client.twins import TwinCall
from replog.errors import (
    OffsetOutOfRangeError,
    ReplogError,
)

T = TypeVar("T")
FETCH_BYTES_MAX = 1024 * 1024
QUEUE_BATCHES_MAX = 16
Callback = Callable[[set[TopicPartition]], None]

__all__ = [  # the consumer's records and rules, from `fetch_rules` (the pure core)
    "FETCH_BYTES_MAX",
    "ConsumerBase",
    "GroupConsumer",
    "GroupRecord",
    "PollBuffer",
    "bounds",
    "check_reset",
    "first_offsets",
    "records_of",
    "reset_offset",
]


def reset_offset(client: GroupConsumerClient, tp: TopicPartition, where: str) -> int:
    """The partition's "earliest" or "latest" offset (`fetch_rules.offset_at`)."""
    try:
        found: FetchResult | OffsetOutOfRangeError = client.fetch(tp[0], tp[1], 0, max_bytes=1)
    except OffsetOutOfRangeError as err:
        found = err
    return offset_at(found, where)


class GroupConsumerClient(Protocol):
    """What a `GroupConsumer` needs from its client; `replog.client.Client` is one."""

    timeout_s: float
    retry: RetryPolicy

    def fetch(
        self, topic: str, partition: int, offset: int, *, max_bytes: int = 0, max_wait_ms: int = 0
    ) -> FetchResult: ...

    def offsets_for_times(self, topic: str, times: Mapping[int, int]) -> dict[int, int]: ...


class ConsumerBase(Member):
    """What the threaded and the asyncio group consumers share: their options (typed
    keywords, checked once), the member core (`member_rules.Membership`) and the positions
    core (`fetch_rules.Positions`), and the calls that only read or change those."""

    CLIENT_ID = "replog-python"

    def __init__(
        self,
        client: Any,
        topics: str | Sequence[str],
        group: str,
        *,
        auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        auto_offset_reset: str = "earliest",
        session_timeout_ms: int = 0,
        rebalance_timeout_ms: int = 0,
        client_id: str | None = None,
        max_poll_records: int = 500,
        fetch_bytes_max: int = FETCH_BYTES_MAX,
        fetch_wait_ms: int = 500,
        on_assign: Callback | None = None,
        on_revoke: Callback | None = None,
        calls: Any = None,
    ) -> None:
        check_reset(auto_offset_reset)
        self.client = client
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        self.group = group
        self.auto_commit = auto_commit
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self.auto_offset_reset = auto_offset_reset
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.client_id = self.CLIENT_ID if client_id is None else client_id
        # positions, pauses, fetch epochs, records held beyond max_poll_records
        self._pos = Positions(max_poll_records)
        self.fetch_bytes_max = fetch_bytes_max
        self.fetch_wait_ms = fetch_wait_ms
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        # the member's state and decisions (join, heartbeat, reconcile, auto-commit)
        self._member = Membership(auto_commit, self.auto_commit_interval_s, time.monotonic())
        self._poll_api = False  # poll() was used: what it returned is processed at close
        self._init_driver(client, calls)

    @property
    def max_poll_records(self) -> int:
        return self._pos.max_poll_records

    def now(self) -> float:
        return time.monotonic()

    commit = TwinCall(flows.commit_positions)
    committed = TwinCall(flows.committed)
    seek = TwinCall(flows.seek)

    def _init_driver(self, client: Any, calls: Any) -> None:
        raise NotImplementedError

    def _restart(self, tp: TopicPartition, state: PartitionState) -> None:
        """(Re)start the partition's fetch at `state.position` (a new epoch; none while
        it is paused)."""
        raise NotImplementedError

    def _hand_out(self, batch: list[GroupRecord]) -> Iterator[GroupRecord]:
        """The iterators' records, one at a time: each counts as processed when the caller
        asks for the next one; when partitions are moving, the rest of `batch` goes back
        to the fetchers (reconciled before any more is delivered)."""
        for i, record in enumerate(batch):
            state = self._pos.partitions.get((record.topic, record.partition))
            if state is None:
                continue
            state.position = record.offset + 1
            yield record
            state.consumed = max(state.consumed, record.offset + 1)
            if self._member.changed and i + 1 < len(batch):
                self._rewind(batch[i + 1 :])
                break

    def _rewind(self, undelivered: list[GroupRecord]) -> None:
        """Records taken from the queue but not delivered: fetch them again."""
        for tp in self._pos.rewind(undelivered):
            self._restart(tp, self._pos.partitions[tp])

    def assignment(self) -> set[TopicPartition]:
        return set(self._pos.partitions)

    def position(self, topic: str, partition: int) -> int:
        return self._pos.position((topic, partition))

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop delivering these partitions (still this member's) until `resume`."""
        for tp in self._pos.set_paused(partitions, True):
            self._restart(tp, self._pos.partitions[tp])

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in self._pos.set_paused(partitions, False):
            self._restart(tp, self._pos.partitions[tp])

    def paused(self) -> set[TopicPartition]:
        return self._pos.paused()


class GroupConsumer(ConsumerBase):
    """A member of a consumer group, on threads (see the module doc): `poll(timeout_s)` or
    iterate it; `commit`, `seek`, `pause`, `resume`, `position`; `close()` commits (with
    auto-commit) and leaves the group."""

    blocking: Literal[True] = True

    def _init_driver(self, client: Any, calls: GroupCalls | None) -> None:
        self.client: GroupConsumerClient = client
        self.calls = calls or GroupCalls(client)
        self._lock = self.lock = threading.Lock()
        self._heartbeat_now = threading.Event()
        self._queue: queue.Queue[tuple[TopicPartition, int, object]] = queue.Queue(
            QUEUE_BATCHES_MAX
        )
        self._closed = threading.Event()
        self._heartbeats: threading.Thread | None = None
        self._answered = threading.Event()  # set at each heartbeat answer

    # -- membership ----------------------------------------------------------------------

    def run(self, flow: Generator[Any, Any, T]) -> T:
        """Perform a member flow's steps (`member_flows`), blocking."""
        return drive_blocking(flow, self._perform)

    def _perform(self, step: flows.Step) -> Any:
        if isinstance(step, GroupRpc):
            return self.calls.run(step)
        return getattr(self, step.method)(step)

    def _do_reset_offset(self, step: flows.ResetOffset) -> int:
        return reset_offset(self.client, step.tp, step.where)

    def _do_restart_fetch(self, step: flows.Restart) -> None:
        self._restart(step.tp, step.state)

    def _do_stop_fetch(self, step: flows.StopFetch) -> None:
        for state in step.states:
            _stop(state)

    def _do_start_heartbeats(self, _step: flows.StartHeartbeats) -> None:
        if self._heartbeats is None:
            self._heartbeats = threading.Thread(
                target=self._heartbeat_loop, name=f"replog-heartbeat-{self.group}", daemon=True
            )
            self._heartbeats.start()

    def _do_heartbeat_now(self, _step: flows.HeartbeatNow) -> None:
        self._heartbeat_now.set()

    def _do_await_heartbeat(self, step: flows.AwaitHeartbeat) -> None:
        self._answered.clear()
        self._heartbeat_now.set()
        self._answered.wait(step.timeout_s)

    def _heartbeat_loop(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                beat = self._member.heartbeat(self._pos.partitions)
                interval_s = self._member.heartbeat_interval_s
            if beat is not None and self.run(flows.heartbeat(self, beat)):
                self._answered.set()
            self._heartbeat_now.wait(interval_s)
            self._heartbeat_now.clear()

    # -- the caller's thread -------------------------------------------------------------

    def poll(self, timeout_s: float = 1.0) -> list[GroupRecord]:
        """Records of the member's partitions (up to about `max_poll_records`), waiting up to
        `timeout_s` for some; every record returned by the previous call counts as processed."""
        self._poll_api = True
        self._pos.processed()
        self._maintain()
        out = self._records(timeout_s)
        self._pos.delivered(out)
        return out

    def __iter__(self) -> Iterator[GroupRecord]:
        """Records one at a time, until `close()`; a record counts as processed when the
        caller asks for the next one."""
        while not self._closed.is_set():
            self._maintain()
            yield from self._hand_out(self._records(1.0))

    def _records(self, timeout_s: float) -> list[GroupRecord]:
        return self.run(flows.records(self, timeout_s))

    def _do_take(self, step: flows.Take) -> object:
        try:
            return self._queue.get(timeout=step.timeout_s)
        except queue.Empty:
            return None

    def _maintain(self) -> None:
        """Join, reconcile, auto-commit (`member_flows.maintain`): what poll does before it
        waits for records."""
        if self._closed.is_set():
            raise ReplogError("the consumer is closed")
        self.run(flows.maintain(self))

    # -- fetching ------------------------------------------------------------------------

    def _restart(self, tp: TopicPartition, state: PartitionState) -> None:
        """(Re)start the partition's fetch thread at `state.position`."""
        _stop(state)
        epoch = self._pos.restart(state)
        if state.paused:
            return
        stop = threading.Event()
        state.fetcher = stop
        thread = threading.Thread(
            target=self._fetch_loop,
            args=(tp, epoch, state.position, stop),
            name=f"replog-fetch-{tp[0]}-{tp[1]}",
            daemon=True,
        )
        thread.start()

    def _fetch_loop(
        self, tp: TopicPartition, epoch: int, offset: int, stop: threading.Event
    ) -> None:
        topic, partition = tp
        options = {"max_bytes": self.fetch_bytes_max, "max_wait_ms": self.fetch_wait_ms}
        while not stop.is_set() and not self._closed.is_set():
            item: FetchResult | ReplogError
            try:
                item = self.client.fetch(topic, partition, offset, **options)
            except ReplogError as err:
                item = err
            after = fetched(item, offset, self.fetch_wait_ms)
            offset = after.offset
            if after.pause_s:
                stop.wait(after.pause_s)
            while after.deliver and not stop.is_set():  # bounded queue: room, or the end
                try:
                    self._queue.put((tp, epoch, item), timeout=0.2)
                    break
                except queue.Full:
                    continue
            if after.last:
                return  # an error: the caller's thread decides (reset, drop, raise)

    def seek_to_time(self, topic: str, partition: int, timestamp_ms: int) -> None:
        """Read `topic/partition` (one of this member's) from its first committed record
        whose timestamp is >= `timestamp_ms` (ListOffsets by time; the end when none is)."""
        offset = self.client.offsets_for_times(topic, {partition: timestamp_ms})[partition]
        self.seek(topic, partition, offset)

    # -- end -------------------------------------------------------------------------------

    def close(self) -> None:
        """Commit what was processed (with auto-commit), leave the group, stop the threads."""
        if self._closed.is_set():
            return
        try:
            self.run(flows.leave(self))
        finally:
            self._closed.set()
            self._heartbeat_now.set()
            for state in self._pos.partitions.values():
                _stop(state)
            if self._heartbeats is not None:
                self._heartbeats.join(10)

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stop(state: PartitionState) -> None:
    """Stop the partition's fetch thread, if one runs."""
    if isinstance(state.fetcher, threading.Event):
        state.fetcher.set()
    state.fetcher = None
