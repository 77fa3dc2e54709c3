"""A partition replica as the services see it: its log, its leader, its HW notifications.

The services never write the storage log; they call a `Partition`. Its one implementation is
`ReplicatedPartition` (`replicated`): a single node is a cluster of one, whose replicas have
one voter, so every node serves every partition through the same role. The replication
driver is the only writer of the high watermark (HW, exclusive); this base class reads it
and tells waiters when it moves.

Waiting is event-driven: every HW change replaces an `asyncio.Event`, so long polls and
streams wake at once on new committed data (no polling loops).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from replog.errors import ReplogError, ShuttingDownError, TopicNotFoundError
from replog.storage import PartitionLog


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    leader_id: int | None  # None: unknown
    epoch: int
    replicas: tuple[int, ...]


class Partition:
    """Base of the role implementations: log access, HW change notification, shutdown."""

    def __init__(self, log: PartitionLog, node_id: int) -> None:
        self.log = log
        self.node_id = node_id
        self.topic = log.topic
        self.partition = log.partition
        self._hw_changed = asyncio.Event()
        self._closed = False
        self._deleted = False

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def hw_changed(self) -> asyncio.Event:
        """An event set at the next HW change (or shutdown); take it BEFORE checking the HW."""
        return self._hw_changed

    def _notify(self) -> None:
        event, self._hw_changed = self._hw_changed, asyncio.Event()
        event.set()

    async def wait_high_watermark(self, offset: int, timeout_s: float) -> bool:
        """Wait until HW > offset; False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.log.high_watermark <= offset:
            if self._closed:
                raise self.closed_error()
            event = self._hw_changed
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return self.log.high_watermark > offset
        return True

    def close(self, *, deleted: bool = False) -> None:
        """Wake every waiter; they see `closed` and end (with UNKNOWN_TOPIC if `deleted`:
        the topic was deleted, perhaps created again, and this replica is never used again)."""
        self._deleted = self._deleted or deleted
        self._closed = True
        self._notify()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def deleted(self) -> bool:
        return self._deleted

    def closed_error(self) -> ReplogError:
        """What a request on this replica gets once it is closed: UNKNOWN_TOPIC (NOT_FOUND) if
        its topic was deleted, SHUTTING_DOWN (retriable) if the node is stopping."""
        if self._deleted:
            return TopicNotFoundError(f"topic {self.topic!r} was deleted", topic=self.topic)
        return ShuttingDownError("the server is shutting down")
