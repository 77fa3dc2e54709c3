"""A consumer's positions, sans I/O: the core that `group_consumer.GroupConsumer` (threads),
`aio_groups.AsyncGroupConsumer` (asyncio) and the assigned consumers built on them drive.
No threads, no event loop, no gRPC, no clock: the drivers run the fetches (one thread or
task per partition, into a bounded queue), ask for offsets, and report what came back.

State (`Positions`): each consumed partition's `position` (the next offset to deliver),
`consumed` (the next offset after the records processed: what auto-commit stores), its
fetch `epoch` (bumped at each (re)start of its fetch: a batch of an older epoch is stale),
whether it is `paused`, and the driver's handle on its fetch (`fetcher`: a stop event, a
task); the records taken beyond a call's `max_poll_records` (`PollBuffer`).

Rules:
- `take_held` / `cut`: a call returns at most `max_poll_records`; what it took beyond them
  is held for the next calls, unless its partition was released, sought, paused or
  restarted since (dropped, like a stale queued batch).
- `accept(tp, epoch, item)`: a fetcher's item: the records of a current batch; nothing for
  a stale one or a topic that went (the next generation takes the partition away); None
  when the offset is out of range (the driver resets the position, `reset`); any other
  error is raised to the caller.
- `delivered` / `processed`: positions advance as records are handed out; what the
  previous `poll` returned counts as processed at the next call.
- `rewind(undelivered)`: records taken but not delivered (partitions are moving) are
  fetched again from the first of each partition.
- `restart(state)`: a new fetch epoch (the driver stops the old fetcher and starts a new
  one at `state.position` unless the partition is paused); `seek`, `pause`, `resume` and
  `reset` answer the partitions whose fetch must restart.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from replog.client.results import FetchResult
from replog.errors import NotFoundError, OffsetOutOfRangeError, ReplogError
from replog.records import DecodedRecords, Header

TopicPartition = tuple[str, int]
RESETS = ("earliest", "latest")


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One record a group (or assigned) consumer delivers, with where it came from."""

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


def bounds(found: FetchResult | OffsetOutOfRangeError) -> tuple[int, int]:
    """(log start, HW) from a Fetch's answer, or from its OUT_OF_RANGE error."""
    if isinstance(found, FetchResult):
        return found.log_start_offset, found.high_watermark
    start = found.log_start_offset or 0
    return start, max(start, found.high_watermark or 0)


def offset_at(found: FetchResult | OffsetOutOfRangeError, where: str) -> int:
    """The partition's "earliest" or "latest" offset from a one-byte Fetch at 0 (so that a
    member needs only `read` on its topics, not `describe` for ListOffsets)."""
    start, hw = bounds(found)
    return start if where == "earliest" else hw


@dataclass(frozen=True, slots=True)
class Fetched:
    """What a partition's fetch loop does after one Fetch (`fetched`)."""

    offset: int  # the next fetch's offset
    pause_s: float  # wait this long, then fetch again (a retriable error)
    deliver: bool  # hand the item to the caller (records, or an error that ends the loop)
    last: bool  # the loop ends (an error: the caller decides: reset, drop, raise)


def fetched(item: FetchResult | ReplogError, offset: int, fetch_wait_ms: int) -> Fetched:
    """The fetch loops' rule, threads or asyncio: records go to the caller and the next
    fetch starts after them; an empty answer is fetched again at once; a retriable error
    (the client retried already) a while later; any other ends the loop, with the caller."""
    if isinstance(item, FetchResult):
        return Fetched(item.next_offset, 0.0, bool(len(item.records)), False)
    if item.retriable:
        return Fetched(offset, fetch_wait_ms / 1000, False, False)
    return Fetched(offset, 0.0, True, True)


def check_reset(auto_offset_reset: str) -> None:
    if auto_offset_reset not in RESETS:
        raise ValueError("auto_offset_reset is 'earliest' or 'latest'")


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


@dataclass(slots=True)
class PartitionState:
    position: int  # the next offset to deliver
    consumed: int  # the next offset after the records processed
    epoch: int  # bumped at each (re)start of its fetch; older batches are dropped
    paused: bool = False
    fetcher: object = None  # the driver's handle on the running fetch (None: none runs)


class Positions:
    """Every consumed partition's state and the records held between calls (module doc)."""

    def __init__(self, max_poll_records: int) -> None:
        if max_poll_records < 1:
            raise ValueError("max_poll_records >= 1")
        self.max_poll_records = max_poll_records
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.held = PollBuffer()
        self._epochs = 0

    # -- records -----------------------------------------------------------------------------

    def epoch_of(self, tp: TopicPartition) -> int | None:
        state = self.partitions.get(tp)
        return None if state is None or state.paused else state.epoch

    def take_held(self) -> list[GroupRecord]:
        """Held records for this call; the call returns them alone while more are held."""
        return self.held.take(self.max_poll_records, self.epoch_of)

    def cut(self, records: list[GroupRecord]) -> list[GroupRecord]:
        return self.held.cut(records, self.max_poll_records, self.epoch_of)

    def accept(self, tp: TopicPartition, epoch: int, item: object) -> list[GroupRecord] | None:
        """A fetcher's item: its records (none if stale); None: the position is out of
        range (the driver finds the reset offset, then `reset`). Raises other errors."""
        state = self.partitions.get(tp)
        if state is None or state.epoch != epoch or state.paused:
            return []  # released, sought or paused since: stale
        if isinstance(item, FetchResult):
            return records_of(tp, item)
        if isinstance(item, OffsetOutOfRangeError):
            return None
        if isinstance(item, NotFoundError):
            return []  # the topic went: the next generation takes the partition away
        assert isinstance(item, ReplogError), item
        raise item

    def delivered(self, records: Iterable[GroupRecord]) -> None:
        for r in records:
            self.partitions[(r.topic, r.partition)].position = r.offset + 1

    def processed(self) -> None:
        """What was delivered so far counts as processed."""
        for state in self.partitions.values():
            state.consumed = state.position

    def rewind(self, undelivered: list[GroupRecord]) -> list[TopicPartition]:
        """Records taken but not delivered: the partitions to fetch again from them."""
        again = []
        for tp, offset in first_offsets(undelivered).items():
            state = self.partitions.get(tp)
            if state is not None:
                state.position = min(state.position, offset)
                again.append(tp)
        return again

    # -- partitions --------------------------------------------------------------------------

    def add(self, tp: TopicPartition, offset: int) -> PartitionState:
        state = self.partitions[tp] = PartitionState(offset, offset, -1)
        return state

    def drop(self, tps: Iterable[TopicPartition]) -> list[PartitionState]:
        return [self.partitions.pop(tp) for tp in tps]

    def restart(self, state: PartitionState) -> int:
        """A new fetch epoch for `state` (the driver stops its old fetcher first)."""
        self._epochs += 1
        state.epoch = self._epochs
        return state.epoch

    def reset(self, tp: TopicPartition, offset: int) -> PartitionState:
        """Deliver and count as processed from `offset` (a seek, an out-of-range reset)."""
        state = self.partitions[tp]
        state.position = state.consumed = int(offset)
        return state

    def seek_target(self, tp: TopicPartition, offset: int | str) -> int | str:
        """`seek`'s checks: `tp` is consumed here, `offset` an int, "earliest" or "latest"."""
        if tp not in self.partitions:
            raise ValueError(f"{tp[0]}/{tp[1]} is not assigned to this member")
        if isinstance(offset, str) and offset not in RESETS:
            raise ValueError("offset is an int, 'earliest' or 'latest'")
        return offset

    def set_paused(self, tps: Sequence[TopicPartition], paused: bool) -> list[TopicPartition]:
        """Pause (or resume) `tps`; those that changed (their fetch restarts)."""
        changed = []
        for tp in tps:
            state = self.partitions.get(tp)
            if state is not None and state.paused != paused:
                state.paused = paused
                changed.append(tp)
        return changed

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self.partitions.items() if s.paused}

    def position(self, tp: TopicPartition) -> int:
        return self.partitions[tp].position

    def consumed_offsets(
        self, tps: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """What auto-commit stores: the processed positions (of `tps`, else of all)."""
        wanted = self.partitions if tps is None else tps
        return {tp: self.partitions[tp].consumed for tp in wanted}

    def positions(self) -> dict[TopicPartition, int]:
        """What `commit()` stores: every record delivered so far."""
        return {tp: s.position for tp, s in self.partitions.items()}
