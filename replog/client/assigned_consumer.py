"""A consumer of partitions the caller names, without a group (Kafka's `consumer.assign`).

    with client.assigned_consumer([("orders", 0), ("orders", 2)]) as consumer:
        records = consumer.poll(1.0)           # GroupRecord(topic, partition, offset, ...)
        consumer.seek("orders", 0, 100)        # an int, "earliest" or "latest"
        consumer.pause(("orders", 2)); consumer.resume(("orders", 2))
        consumer.position("orders", 0)         # the next offset poll delivers

The group consumer's fetch machinery without its membership: one fetch thread (asyncio:
one task) per partition long-polls the leader into the same bounded queue, `poll(timeout_s)`
returns up to `max_poll_records`, `seek` / `seek_to_time` / `pause` / `resume` / `position`
/ `assignment` behave as the group member's. Each partition starts at `offsets[(topic,
partition)]` (an int, "earliest" or "latest"), else at `auto_offset_reset`. There is no
group: nothing is committed (`commit` and `committed` raise INVALID_ARGUMENT); the caller
keeps its positions where it wants them. An offset out of range (removed by retention)
restarts the partition at `auto_offset_reset`, as in the group consumer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from replog.client.aio_groups import AsyncGroupConsumer
from replog.client.group_consumer import FETCH_BYTES_MAX, GroupConsumer, reset_offset
from replog.client.groups import TopicPartition
from replog.errors import InvalidArgumentError, ReplogError

Offsets = Mapping[TopicPartition, int | str]


def check_assignment(
    partitions: Sequence[TopicPartition], offsets: Offsets | None
) -> tuple[list[TopicPartition], dict[TopicPartition, int | str]]:
    """The partitions (each once, in order) and their start offsets, checked."""
    wanted: list[TopicPartition] = []
    for tp in partitions:
        topic, partition = tp
        if not isinstance(topic, str) or not isinstance(partition, int) or partition < 0:
            raise InvalidArgumentError(f"a partition is (topic, index >= 0), not {tp!r}")
        if (topic, partition) not in wanted:
            wanted.append((topic, partition))
    if not wanted:
        raise InvalidArgumentError("assign at least one (topic, partition)")
    start = dict(offsets or {})
    for tp, offset in start.items():
        if tp not in wanted:
            raise InvalidArgumentError(f"an offset for {tp!r}, which is not assigned")
        if isinstance(offset, str) and offset not in ("earliest", "latest"):
            raise InvalidArgumentError("an offset is an int, 'earliest' or 'latest'")
        if isinstance(offset, int) and offset < 0:
            raise InvalidArgumentError(f"offset {offset} < 0")
    return wanted, start


def _no_group() -> InvalidArgumentError:
    return InvalidArgumentError(
        "an assigned consumer has no group: nothing is committed (keep position() yourself)"
    )


class _Assigned:
    """The assigned consumers' construction, sync and asyncio: the partitions and their
    start offsets checked, then a group consumer without a group (never joins, never
    commits); `_assigned(wanted)` is each driver's start."""

    _start: dict[TopicPartition, int | str]

    def __init__(
        self,
        client: Any,
        partitions: Sequence[TopicPartition],
        *,
        offsets: Offsets | None = None,
        auto_offset_reset: str = "earliest",
        max_poll_records: int = 500,
        fetch_bytes_max: int = FETCH_BYTES_MAX,
        fetch_wait_ms: int = 500,
    ) -> None:
        wanted, self._start = check_assignment(partitions, offsets)
        super().__init__(  # type: ignore[call-arg]  # ConsumerBase's, next in the MRO
            client,
            sorted({topic for topic, _ in wanted}),
            "",
            auto_commit=False,
            auto_offset_reset=auto_offset_reset,
            max_poll_records=max_poll_records,
            fetch_bytes_max=fetch_bytes_max,
            fetch_wait_ms=fetch_wait_ms,
        )
        self._assigned(wanted)

    def _assigned(self, wanted: list[TopicPartition]) -> None:
        raise NotImplementedError


class AssignedConsumer(_Assigned, GroupConsumer):
    """`poll` / `seek` / `position` / `pause` / `resume` over assigned partitions (threads;
    see the module doc). The partitions start fetching when it is made."""

    def _assigned(self, wanted: list[TopicPartition]) -> None:
        self._add(set(wanted))

    def _maintain(self) -> None:
        if self._closed.is_set():
            raise ReplogError("the consumer is closed")

    def _add(self, tps: set[TopicPartition]) -> None:
        for tp in sorted(tps):
            where = self._start.get(tp, self.auto_offset_reset)
            offset = reset_offset(self.client, tp, where) if isinstance(where, str) else where
            with self._lock:
                state = self._pos.add(tp, offset)
            self._restart(tp, state)

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        raise _no_group()

    def committed(self, partitions: Sequence[TopicPartition] = ()) -> dict[TopicPartition, int]:
        raise _no_group()

    def __enter__(self) -> AssignedConsumer:
        return self


class AsyncAssignedConsumer(_Assigned, AsyncGroupConsumer):
    """`AssignedConsumer` in asyncio: the partitions start fetching at `start()` (`async
    with`, or the first `poll`)."""

    def _assigned(self, wanted: list[TopicPartition]) -> None:
        self._wanted = wanted
        self._started = False

    async def start(self) -> None:
        """Start fetching every assigned partition (once)."""
        if not self._started:
            self._started = True
            await self._add(set(self._wanted))

    async def _maintain(self) -> None:
        if self._closed:
            raise ReplogError("the consumer is closed")
        await self.start()

    async def _add(self, tps: set[TopicPartition]) -> None:
        for tp in sorted(tps):
            where = self._start.get(tp, self.auto_offset_reset)
            offset = await self._offset_at(tp, where) if isinstance(where, str) else where
            self._restart(tp, self._pos.add(tp, offset))

    async def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        raise _no_group()

    async def committed(
        self, partitions: Sequence[TopicPartition] = ()
    ) -> dict[TopicPartition, int]:
        raise _no_group()

    async def __aenter__(self) -> AsyncAssignedConsumer:
        await self.start()
        return self
