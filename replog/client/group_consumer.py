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

`seek(topic, partition, offset | "earliest" | "latest")`, `pause(...)`, `resume(...)`,
`assignment()`, `position(...)`, `committed()`. Seeking by time is not supported yet (the
server has no ListOffsets by time).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from replog.client.groups import GroupCalls, TopicPartition
from replog.client.member_rules import Heartbeat, Member, Membership
from replog.client.results import FetchResult
from replog.client.retry import RetryPolicy
from replog.errors import (
    IllegalGenerationError,
    NotFoundError,
    OffsetOutOfRangeError,
    ReplogError,
    UnknownMemberError,
)
from replog.records import DecodedRecords, Header

FETCH_BYTES_MAX = 1024 * 1024
QUEUE_BATCHES_MAX = 16
Callback = Callable[[set[TopicPartition]], None]


@dataclass(frozen=True, slots=True)
class GroupRecord:
    topic: str
    partition: int
    offset: int
    value: bytes | None  # None: a null value (a tombstone, envelope topics only)
    key: bytes | None = None  # the envelope's (envelope topics; raw topics have none)
    headers: tuple[Header, ...] = ()
    timestamp_ms: int | None = None  # None: a raw topic's record


def records_of(tp: TopicPartition, result: FetchResult) -> list[GroupRecord]:
    """A Fetch's records (already decoded: an envelope topic's come with key, headers and
    timestamp)."""
    got = result.records
    topic, partition = tp
    if isinstance(got, DecodedRecords):
        return [
            GroupRecord(topic, partition, o, v, k, h, t)
            for o, v, k, h, t in zip(
                got.offsets, got.values, got.keys, got.headers, got.timestamps, strict=True
            )
        ]
    return [
        GroupRecord(topic, partition, o, v) for o, v in zip(got.offsets, got.values, strict=True)
    ]


def first_offsets(undelivered: list[GroupRecord]) -> dict[TopicPartition, int]:
    """Each partition's first record among `undelivered` (to fetch again from there)."""
    first: dict[TopicPartition, int] = {}
    for r in undelivered:
        first.setdefault((r.topic, r.partition), r.offset)
    return first


class PollBuffer:
    """Records taken from the fetchers beyond a call's `max_poll_records`, delivered by the
    next calls (a fetch of 1 MiB holds thousands of records; none is fetched twice). Each
    record is kept with its partition's fetch epoch at the time: one whose partition was
    released, sought, paused or restarted since is dropped, like a stale queued batch."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: deque[tuple[int, GroupRecord]] = deque()

    def take(
        self, count: int, epoch_of: Callable[[TopicPartition], int | None]
    ) -> list[GroupRecord]:
        """Up to `count` held records still current (`epoch_of` answers None for a partition
        that is not fetching any more)."""
        out: list[GroupRecord] = []
        while self._held and len(out) < count:
            epoch, record = self._held.popleft()
            if epoch_of((record.topic, record.partition)) == epoch:
                out.append(record)
        return out

    def cut(
        self,
        records: list[GroupRecord],
        count: int,
        epoch_of: Callable[[TopicPartition], int | None],
    ) -> list[GroupRecord]:
        """The first `count` of `records`; the rest is held (ahead of nothing: the buffer is
        empty whenever a call takes from the fetchers)."""
        for record in records[count:]:
            epoch = epoch_of((record.topic, record.partition))
            if epoch is not None:
                self._held.append((epoch, record))
        return records[:count]

    def __len__(self) -> int:
        return len(self._held)


def bounds(found: FetchResult | OffsetOutOfRangeError) -> tuple[int, int]:
    """(log start, HW) from a Fetch's answer, or from its OUT_OF_RANGE error."""
    if isinstance(found, FetchResult):
        return found.log_start_offset, found.high_watermark
    start = found.log_start_offset or 0
    return start, max(start, found.high_watermark or 0)


def reset_offset(client: GroupConsumerClient, tp: TopicPartition, where: str) -> int:
    """The partition's "earliest" or "latest" offset, from a one-byte Fetch at 0 (so that a
    member needs only `read` on its topics, not `describe` for ListOffsets)."""
    try:
        found: FetchResult | OffsetOutOfRangeError = client.fetch(tp[0], tp[1], 0, max_bytes=1)
    except OffsetOutOfRangeError as err:
        found = err
    start, hw = bounds(found)
    return start if where == "earliest" else hw


def check_reset(auto_offset_reset: str) -> None:
    if auto_offset_reset not in ("earliest", "latest"):
        raise ValueError("auto_offset_reset is 'earliest' or 'latest'")


class GroupConsumerClient(Protocol):
    """What a `GroupConsumer` needs from its client; `replog.client.Client` is one."""

    timeout_s: float
    retry: RetryPolicy

    def fetch(
        self, topic: str, partition: int, offset: int, *, max_bytes: int = 0, max_wait_ms: int = 0
    ) -> FetchResult: ...

    def offsets_for_times(self, topic: str, times: Mapping[int, int]) -> dict[int, int]: ...


@dataclass(slots=True)
class _Partition:
    position: int  # the next offset to deliver
    consumed: int  # the next offset after the records processed
    epoch: int  # bumped at each (re)start of its fetch; older batches are dropped
    paused: bool = False
    stop: threading.Event | None = None


class GroupConsumer(Member):
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
        client_id: str = "replog-python",
        max_poll_records: int = 500,
        fetch_bytes_max: int = FETCH_BYTES_MAX,
        fetch_wait_ms: int = 500,
        on_assign: Callback | None = None,
        on_revoke: Callback | None = None,
        calls: GroupCalls | None = None,
    ) -> None:
        check_reset(auto_offset_reset)
        self.client: GroupConsumerClient = client
        self.calls = calls or GroupCalls(client)
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        self.group = group
        self.auto_commit = auto_commit
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self.auto_offset_reset = auto_offset_reset
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.client_id = client_id
        if max_poll_records < 1:
            raise ValueError("max_poll_records >= 1")
        self.max_poll_records = max_poll_records
        self._held = PollBuffer()  # taken beyond max_poll_records, for the next calls
        self.fetch_bytes_max = fetch_bytes_max
        self.fetch_wait_ms = fetch_wait_ms
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        # the member's state and decisions (join, heartbeat, reconcile, auto-commit)
        self._member = Membership(auto_commit, self.auto_commit_interval_s, time.monotonic())
        self._lock = threading.Lock()
        self._partitions: dict[TopicPartition, _Partition] = {}  # being consumed
        self._heartbeat_now = threading.Event()
        self._queue: queue.Queue[tuple[TopicPartition, int, object]] = queue.Queue(
            QUEUE_BATCHES_MAX
        )
        self._closed = threading.Event()
        self._heartbeats: threading.Thread | None = None
        self._epochs = 0
        self._poll_api = False  # poll() was used: what it returned is processed at close
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
                beat = self._member.heartbeat(self._partitions)
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
        self._processed()
        self._maintain()
        out = self._records(timeout_s)
        for r in out:
            self._partitions[(r.topic, r.partition)].position = r.offset + 1
        return out

    def __iter__(self) -> Iterator[GroupRecord]:
        """Records one at a time, until `close()`; a record counts as processed when the
        caller asks for the next one."""
        while not self._closed.is_set():
            self._maintain()
            batch = self._records(1.0)
            for i, record in enumerate(batch):
                state = self._partitions.get((record.topic, record.partition))
                if state is None:
                    continue
                state.position = record.offset + 1
                yield record
                state.consumed = max(state.consumed, record.offset + 1)
                if self._member.changed and i + 1 < len(batch):
                    # Partitions are moving: hand the rest back to the fetchers.
                    self._rewind(batch[i + 1 :])
                    break

    def _epoch_of(self, tp: TopicPartition) -> int | None:
        state = self._partitions.get(tp)
        return None if state is None or state.paused else state.epoch

    def _records(self, timeout_s: float) -> list[GroupRecord]:
        out = self._held.take(self.max_poll_records, self._epoch_of)
        if self._held:
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
        return self._held.cut(out, self.max_poll_records, self._epoch_of)

    def _processed(self) -> None:
        for state in self._partitions.values():
            state.consumed = state.position

    def _rewind(self, undelivered: list[GroupRecord]) -> None:
        """Records taken from the queue but not delivered: fetch them again."""
        for tp, offset in first_offsets(undelivered).items():
            state = self._partitions.get(tp)
            if state is not None:
                state.position = min(state.position, offset)
                self._restart(tp, state)

    def _accept(self, tp: TopicPartition, epoch: int, item: object) -> list[GroupRecord]:
        state = self._partitions.get(tp)
        if state is None or state.epoch != epoch or state.paused:
            return []  # released, sought or paused since: stale
        if isinstance(item, FetchResult):
            return records_of(tp, item)
        if isinstance(item, OffsetOutOfRangeError):
            state.position = state.consumed = self._reset_position(tp)
            self._restart(tp, state)
            return []
        if isinstance(item, NotFoundError):
            return []  # the topic went: the next generation takes the partition away
        assert isinstance(item, ReplogError), item
        raise item

    def _maintain(self) -> None:
        """Join, reconcile, auto-commit: what poll does before it waits for records."""
        if self._closed.is_set():
            raise ReplogError("the consumer is closed")
        with self._lock:
            rejoin = self._member.needs_join()
        if rejoin:
            self._drop(set(self._partitions), commit=False)
            self._join()
        with self._lock:
            plan = self._member.reconcile(self._partitions)
        if plan is not None:
            self._reconcile(*plan)
        with self._lock:
            due = self._member.auto_commit_due(time.monotonic())
        if due:
            with contextlib.suppress(ReplogError):  # next time (or the next owner re-reads)
                self._commit({tp: s.consumed for tp, s in self._partitions.items()})

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
                self._commit({tp: self._partitions[tp].consumed for tp in tps})
        if self.on_revoke is not None:
            self.on_revoke(set(tps))
        with self._lock:
            for tp in tps:
                state = self._partitions.pop(tp)
                if state.stop is not None:
                    state.stop.set()

    def _add(self, tps: set[TopicPartition]) -> None:
        committed = {
            (c.topic, c.partition): c.offset for c in self.calls.committed(self.group, sorted(tps))
        }
        for tp in sorted(tps):
            offset = committed.get(tp, -1)
            if offset < 0:
                offset = self._reset_position(tp)
            state = _Partition(offset, offset, -1)
            with self._lock:
                self._partitions[tp] = state
            self._restart(tp, state)
        if self.on_assign is not None:
            self.on_assign(set(tps))

    def _reset_position(self, tp: TopicPartition) -> int:
        return reset_offset(self.client, tp, self.auto_offset_reset)

    # -- fetching ------------------------------------------------------------------------

    def _restart(self, tp: TopicPartition, state: _Partition) -> None:
        """(Re)start the partition's fetch thread at `state.position`."""
        if state.stop is not None:
            state.stop.set()
        self._epochs += 1
        state.epoch = self._epochs
        if state.paused:
            state.stop = None
            return
        stop = state.stop = threading.Event()
        thread = threading.Thread(
            target=self._fetch_loop,
            args=(tp, state.epoch, state.position, stop),
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
            offsets = {tp: s.position for tp, s in self._partitions.items()}
        self._commit(offsets)

    # -- positions -----------------------------------------------------------------------

    def assignment(self) -> set[TopicPartition]:
        return set(self._partitions)

    def position(self, topic: str, partition: int) -> int:
        return self._partitions[(topic, partition)].position

    def committed(self, partitions: Sequence[TopicPartition] = ()) -> dict[TopicPartition, int]:
        """The group's committed offsets (-1: none) of `partitions` (default: this member's)."""
        wanted = list(partitions) or sorted(self._partitions)
        found = self.calls.committed(self.group, wanted)
        return {(c.topic, c.partition): c.offset for c in found}

    def seek(self, topic: str, partition: int, offset: int | str) -> None:
        """Read `topic/partition` (one of this member's) from `offset`: an int, "earliest"
        or "latest". The next commit stores it."""
        tp = (topic, partition)
        state = self._partitions.get(tp)
        if state is None:
            raise ValueError(f"{topic}/{partition} is not assigned to this member")
        if isinstance(offset, str):
            if offset not in ("earliest", "latest"):
                raise ValueError("offset is an int, 'earliest' or 'latest'")
            offset = reset_offset(self.client, tp, offset)
        state.position = state.consumed = offset
        self._restart(tp, state)

    def seek_to_time(self, topic: str, partition: int, timestamp_ms: int) -> None:
        """Read `topic/partition` (one of this member's) from its first committed record
        whose timestamp is >= `timestamp_ms` (ListOffsets by time; the end when none is)."""
        offset = self.client.offsets_for_times(topic, {partition: timestamp_ms})[partition]
        self.seek(topic, partition, offset)

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop delivering these partitions (still this member's) until `resume`."""
        for tp in partitions:
            state = self._partitions.get(tp)
            if state is not None and not state.paused:
                state.paused = True
                self._restart(tp, state)

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            state = self._partitions.get(tp)
            if state is not None and state.paused:
                state.paused = False
                self._restart(tp, state)

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self._partitions.items() if s.paused}

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
                        self._processed()
                    with contextlib.suppress(ReplogError):
                        self._commit({tp: s.consumed for tp, s in self._partitions.items()})
                with contextlib.suppress(ReplogError):
                    self.calls.leave(self.group, member, RetryPolicy(attempts_max=3))
        finally:
            self._closed.set()
            self._heartbeat_now.set()
            for state in self._partitions.values():
                if state.stop is not None:
                    state.stop.set()
            if self._heartbeats is not None:
                self._heartbeats.join(10)

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
