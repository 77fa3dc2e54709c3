"""A partition replica as the server sees it: its log plus its ROLE in replication.

The services never touch the storage log directly for writes; they call a `Partition`, whose
role decides who may append and when the high watermark (HW, exclusive) moves:

* `SoloLeader` (this module): a cluster of one. The node leads every partition; the HW
  advances as soon as the leader's own append lands (flushed first under flush=always), since
  its own log is the majority. On open, HW = LEO for the same reason.
* Replication (issue 4) adds leader and follower roles that implement the same interface:
  a follower's `append` raises `NotLeaderError` with the leader hint; a leader's HW follows
  the majority of its voters' fetch offsets, and `wait_high_watermark` serves acks=all.

Waiting is event-driven: every HW change replaces an `asyncio.Event`, so long polls and
streams wake at once on new committed data (no polling loops). All methods run on the event
loop; blocking storage calls go to a thread.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Sequence
from dataclasses import dataclass

from replog.errors import AckTimeoutError, ShuttingDownError
from replog.storage import AppendResult, FlushPolicy, PartitionLog


class Acks(enum.IntEnum):
    """How long an Append waits (values match `replog.v1.Acks`)."""

    NONE = 1
    LEADER = 2
    ALL = 3


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
        self._inline_appends = log.config.flush is FlushPolicy.NEVER

    # -- the role interface -----------------------------------------------------------------

    @property
    def leader(self) -> LeaderInfo:
        raise NotImplementedError

    def check_leader(self) -> None:
        """Raise `NotLeaderError` (with the leader hint) unless this replica leads."""
        raise NotImplementedError

    async def append(self, values: Sequence[bytes], acks: Acks, timeout_s: float) -> AppendResult:
        raise NotImplementedError

    # -- shared -----------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def hw_changed(self) -> asyncio.Event:
        """An event set at the next HW change (or shutdown); take it BEFORE checking the HW."""
        return self._hw_changed

    def _set_high_watermark(self, hw: int) -> None:
        if hw > self.log.high_watermark:
            self.log.set_high_watermark(hw)
            self._notify()

    def _notify(self) -> None:
        event, self._hw_changed = self._hw_changed, asyncio.Event()
        event.set()

    async def wait_high_watermark(self, offset: int, timeout_s: float) -> bool:
        """Wait until HW > offset; False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.log.high_watermark <= offset:
            if self._closed:
                raise ShuttingDownError("the server is shutting down")
            event = self._hw_changed
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return self.log.high_watermark > offset
        return True

    def close(self) -> None:
        """Wake every waiter; they see `closed` and end."""
        self._closed = True
        self._notify()

    @property
    def closed(self) -> bool:
        return self._closed

    async def _append_to_log(self, values: Sequence[bytes]) -> AppendResult:
        if self._inline_appends:  # flush=never: a page-cache write, cheaper than a thread hop
            return self.log.append(values)
        return await asyncio.to_thread(self.log.append, values)


class SoloLeader(Partition):
    """The role of every partition on a single node: leader of a cluster of one."""

    def __init__(self, log: PartitionLog, node_id: int) -> None:
        super().__init__(log, node_id)
        # A cluster of one: everything in its own log is on a majority.
        self._set_high_watermark(log.log_end_offset)

    @property
    def leader(self) -> LeaderInfo:
        return LeaderInfo(self.node_id, 0, (self.node_id,))

    def check_leader(self) -> None:
        if self._closed:
            raise ShuttingDownError("the server is shutting down")

    async def append(self, values: Sequence[bytes], acks: Acks, timeout_s: float) -> AppendResult:
        self.check_leader()
        result = await self._append_to_log(values)
        # Groups are written in offset order and each is flushed (flush=always) before the
        # next one is written, so everything below last_offset + 1 has landed.
        self._set_high_watermark(result.last_offset + 1)
        if acks is Acks.ALL and not await self.wait_high_watermark(result.last_offset, timeout_s):
            raise AckTimeoutError(
                "acks=all timed out: the batch may still commit",
                base_offset=result.base_offset,
                last_offset=result.last_offset,
            )
        return result
