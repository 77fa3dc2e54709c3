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

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from replog.client.fetch_rules import (
    GroupRecord,
    PartitionState,
    PollBuffer,
    Positions,
    bounds,
    check_reset,
    first_offsets,
    offset_at,
    records_of,
)
from replog.client.groups import GroupCalls, TopicPartition
from replog.client.member_rules import Heartbeat, Member, Membership
from replog.client.results import FetchResult
from replog.client.retry import RetryPolicy
from replog.errors import (
    IllegalGenerationError,
    OffsetOutOfRangeError,
    ReplogError,
    UnknownMemberError,
)

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

    def _init_driver(self, client: Any, calls: GroupCalls | None) -> None:
        self.client: GroupConsumerClient = client
        self.calls = calls or GroupCalls(client)
        self._lock = threading.Lock()
        self._heartbeat_now = threading.Event()
        self._queue: queue.Queue[tuple[TopicPartition, int, object]] = queue.Queue(
            QUEUE_BATCHES_MAX
        )
        self._closed = threading.Event()
        self._heartbeats: threading.Thread | None = None
        self._answered = threading.Event()  # set at each heartbeat answer

    # -- membership ----------------------------------------------------------------------

    def _join(self) -> None:
        answer, session_ms = self.calls.join(
            self.group,
            self.topics,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            client_id=self.client_id,
        )
        with self._lock:
            self._member.joined(answer, session_ms, time.monotonic())
        if self._heartbeats is None:
            self._heartbeats = threading.Thread(
                target=self._heartbeat_loop, name=f"replog-heartbeat-{self.group}", daemon=True
            )
            self._heartbeats.start()

    def _heartbeat_loop(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                beat = self._member.heartbeat(self._pos.partitions)
                interval_s = self._member.heartbeat_interval_s
            if beat is not None:
                self._heartbeat(beat)
            self._heartbeat_now.wait(interval_s)
            self._heartbeat_now.clear()

    def _heartbeat(self, beat: Heartbeat) -> None:
        policy = RetryPolicy(attempts_max=1000, deadline_ms=beat.deadline_ms)
        try:
            answer = self.calls.heartbeat(
                self.group, beat.member_id, beat.generation, beat.owned, policy, beat.timeout_s
            )
        except ReplogError as err:
            with self._lock:
                unknown = isinstance(err, UnknownMemberError)
                self._member.heartbeat_failed(beat, unknown, time.monotonic())
        else:
            with self._lock:
                self._member.heartbeat_answered(beat, answer, time.monotonic())
            self._answered.set()

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
        out = self._pos.take_held()
        if self._pos.held:
            return out  # still more held than one call returns
        deadline = time.monotonic() + timeout_s
        while len(out) < self.max_poll_records:
            try:
                if out:
                    item = self._queue.get_nowait()
                else:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            out.extend(self._accept(*item))
            if self._member.changed:
                break  # reconcile before delivering more of partitions that may be moving
        return self._pos.cut(out)

    def _accept(self, tp: TopicPartition, epoch: int, item: object) -> list[GroupRecord]:
        records = self._pos.accept(tp, epoch, item)
        if records is None:  # out of range: start again where auto_offset_reset says
            self._restart(tp, self._pos.reset(tp, self._reset_position(tp)))
            return []
        return records

    def _maintain(self) -> None:
        """Join, reconcile, auto-commit: what poll does before it waits for records."""
        if self._closed.is_set():
            raise ReplogError("the consumer is closed")
        with self._lock:
            rejoin = self._member.needs_join()
        if rejoin:
            self._drop(set(self._pos.partitions), commit=False)
            self._join()
        with self._lock:
            plan = self._member.reconcile(self._pos.partitions)
        if plan is not None:
            self._reconcile(*plan)
        with self._lock:
            due = self._member.auto_commit_due(time.monotonic())
        if due:
            with contextlib.suppress(ReplogError):  # next time (or the next owner re-reads)
                self._commit(self._pos.consumed_offsets())

    def _reconcile(self, revoked: set[TopicPartition], added: set[TopicPartition]) -> None:
        """Release `revoked` (committed, then `on_revoke`), then take `added`."""
        if revoked:
            self._drop(revoked, commit=True)
        if added:
            self._add(added)
        if revoked or added:
            with self._lock:
                self._member.rebalanced()
            self._heartbeat_now.set()  # tell the coordinator at once

    def _drop(self, tps: set[TopicPartition], *, commit: bool) -> None:
        if not tps:
            return
        if commit and self.auto_commit:
            with contextlib.suppress(ReplogError):  # refused: its new owner re-reads them
                self._commit(self._pos.consumed_offsets(tps))
        if self.on_revoke is not None:
            self.on_revoke(set(tps))
        with self._lock:
            for state in self._pos.drop(tps):
                _stop(state)

    def _add(self, tps: set[TopicPartition]) -> None:
        committed = {
            (c.topic, c.partition): c.offset for c in self.calls.committed(self.group, sorted(tps))
        }
        for tp in sorted(tps):
            offset = committed.get(tp, -1)
            if offset < 0:
                offset = self._reset_position(tp)
            with self._lock:
                state = self._pos.add(tp, offset)
            self._restart(tp, state)
        if self.on_assign is not None:
            self.on_assign(set(tps))

    def _reset_position(self, tp: TopicPartition) -> int:
        return reset_offset(self.client, tp, self.auto_offset_reset)

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
        while not stop.is_set() and not self._closed.is_set():
            item: object
            try:
                item = self.client.fetch(
                    topic,
                    partition,
                    offset,
                    max_bytes=self.fetch_bytes_max,
                    max_wait_ms=self.fetch_wait_ms,
                )
            except ReplogError as err:
                if err.retriable:  # (the client retried already): a while, then again
                    stop.wait(self.fetch_wait_ms / 1000)
                    continue
                item = err
            if isinstance(item, FetchResult):
                offset = item.next_offset
                if not len(item.records):
                    continue
            while not stop.is_set():  # bounded queue: wait for room, or for the end
                try:
                    self._queue.put((tp, epoch, item), timeout=0.2)
                    break
                except queue.Full:
                    continue
            if not isinstance(item, FetchResult):
                return  # an error: the caller's thread decides (reset, drop, raise)

    # -- commits -------------------------------------------------------------------------

    def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        member = self.member_id
        if member is None or not offsets:
            return
        try:
            self.calls.commit(self.group, offsets, member, self.generation)
        except IllegalGenerationError:
            # A heartbeat answer crossed this commit: learn the new generation, once.
            self._answered.clear()
            self._heartbeat_now.set()
            self._answered.wait(self._member.session_s)
            self.calls.commit(self.group, offsets, member, self.generation)
        except UnknownMemberError:
            with self._lock:
                self._member.mark_lost(member)
            raise

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit `offsets` ((topic, partition) -> next offset to read), or the position of
        every partition (every record delivered so far). Raises UNKNOWN_MEMBER if this
        member was removed (its partitions are someone else's now)."""
        if offsets is None:
            offsets = self._pos.positions()
        self._commit(offsets)

    # -- positions -----------------------------------------------------------------------

    def committed(self, partitions: Sequence[TopicPartition] = ()) -> dict[TopicPartition, int]:
        """The group's committed offsets (-1: none) of `partitions` (default: this member's)."""
        wanted = list(partitions) or sorted(self._pos.partitions)
        found = self.calls.committed(self.group, wanted)
        return {(c.topic, c.partition): c.offset for c in found}

    def seek(self, topic: str, partition: int, offset: int | str) -> None:
        """Read `topic/partition` (one of this member's) from `offset`: an int, "earliest"
        or "latest". The next commit stores it."""
        tp = (topic, partition)
        if isinstance(offset := self._pos.seek_target(tp, offset), str):
            offset = reset_offset(self.client, tp, offset)
        self._restart(tp, self._pos.reset(tp, offset))

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
        member = self.member_id
        try:
            if member is not None and not self._member.lost:
                if self.auto_commit:
                    if self._poll_api:
                        self._pos.processed()
                    with contextlib.suppress(ReplogError):
                        self._commit(self._pos.consumed_offsets())
                with contextlib.suppress(ReplogError):
                    self.calls.leave(self.group, member, RetryPolicy(attempts_max=3))
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
