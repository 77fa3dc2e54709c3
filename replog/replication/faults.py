"""Faults of the environment for a replica's driver: a log operation that failed (a full
disk, no descriptor left, an I/O error) and how the owner comes back from it.

A `ReplogError` from a log operation means the core's view of the log may be ahead of the
disk: the remaining outputs are dropped, every waiting append fails with that error, and
the core is rebuilt from what is on disk (`quorum-state`, `epoch-history`, the log's LEO
and HW), retried with a delay that doubles while failures go on (`RETRY_S_MIN` ..
`RETRY_S_MAX`). A full disk refuses writes up front until it has room, no descriptor left
for the retry delay; any other I/O error takes the replica offline (`_go_offline`).
`FaultHandling` is a base of `ReplicaDriver` (its state is the driver's).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

from replog.errors import (
    PartitionOfflineError,
    ReplogError,
    ShuttingDownError,
    StorageError,
    StorageFullError,
    TooManyOpenFilesError,
)
from replog.replication.config import ReplicaConfig
from replog.replication.durable import (
    load_epoch_history,
    load_membership_history,
    load_quorum_state,
)
from replog.replication.inbox import Deliver, Input
from replog.replication.membership import Membership
from replog.replication.messages import TimeoutNow
from replog.replication.producer_state import ProducerSnapshots
from replog.replication.replica import Replica, Role
from replog.storage.segment_log import storage_error

if TYPE_CHECKING:  # (performing.py imports this module's neighbours; the type only)
    from replog.replication.performing import Transport

_log = logging.getLogger("replog.replication")

# After a failed log operation (a full disk, no descriptor left): the first retry waits
# this long, each next one twice as long, up to the maximum (reset by a write that works).
RETRY_S_MIN = 0.1
RETRY_S_MAX = 5.0


class FaultHandling(ProducerSnapshots):
    """Rebuilds the core from the log after a failed log operation; the offline state."""

    rebuilds: int
    refused_writes: int
    _inbox: deque[Input]
    _wakeup: asyncio.Future[None] | None
    _sweep_timer: asyncio.TimerHandle | None
    _tick_due: bool
    _failed: ReplogError | None
    _offline: ReplogError | None
    _retry_at: float
    _files_short_until: float
    _membership_seen: Membership
    config: ReplicaConfig
    transport: Transport

    def _fail_waiting(self, exc: Exception) -> None:
        for item in self._inbox:
            if item.done is not None and not item.done.done():
                if isinstance(item, Deliver):  # a peer's message: lost, as on a dead node
                    item.done.set_result(None)
                else:
                    item.done.set_exception(exc)
        self._inbox.clear()
        for waiting in self._acks.values():
            if not waiting.fut.done():
                waiting.fut.set_exception(exc)
        self._acks.clear()
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None

    def _check_in_step(self) -> None:
        """After every performed batch the core's view is exactly the log's."""
        core, log = self.replica, self.log
        assert core.log_end_offset == log.log_end_offset, (
            "core LEO ahead of or behind the log",
            core.log_end_offset,
            log.log_end_offset,
        )
        assert core.high_watermark == log.high_watermark, (
            "core HW differs from the log's",
            core.high_watermark,
            log.high_watermark,
        )

    def _report_membership(self) -> None:
        membership = self.replica.membership
        if membership != self._membership_seen:
            self._membership_seen = membership
            if self._on_membership is not None:
                self._on_membership(membership)

    def _new_replica(self) -> Replica:
        directory = self.log.directory
        return Replica(
            self.config,
            self._rng,
            self._now_ms(),
            state=load_quorum_state(directory),
            history=load_epoch_history(directory),
            memberships=load_membership_history(directory),
            log_end_offset=self.log.log_end_offset,
            high_watermark=self.log.high_watermark,
            log_start_offset=self.log.log_start_offset,
            liveness=getattr(self, "_liveness", None),
        )

    def _check_writable(self, nbytes: int) -> None:
        """Refuse a write up front while it cannot be made (a full disk; no descriptor left,
        or the log's files cannot be opened): the core never sees it, so no leader loses
        its leadership to a rebuild over a write that was bound to fail."""
        where = f"{self.log.topic}/{self.log.partition}"
        if not self.essential and not self.space.room_for(nbytes):
            self.refused_writes += 1
            raise StorageFullError(
                f"{where}: the disk of {self.space.data_dir} is full; retry once space is freed",
                data_dir=self.space.data_dir,
            )
        if self._clock() < self._files_short_until:
            self.refused_writes += 1
            raise TooManyOpenFilesError(
                f"{where}: the node ran out of file descriptors; retry later", limit="open_files"
            )
        if self.log.parked:
            try:
                self.log.reopen()
            except TooManyOpenFilesError:
                self.refused_writes += 1
                raise

    def _offline_error(self) -> PartitionOfflineError:
        return PartitionOfflineError(
            f"the replica of {self.log.topic}/{self.log.partition} on this node is offline: "
            f"{self._offline}",
            topic=self.log.topic,
            partition=self.log.partition,
        )

    @property
    def offline(self) -> ReplogError | None:
        """The I/O error that took this replica offline (None: online)."""
        return self._offline

    def _note_failure(self, exc: ReplogError) -> None:
        """What a failed log operation says about the environment. A full disk: the data
        directory is full (`DiskSpace`), writes are refused up front until it has room.
        No descriptor left: writes are refused up front for the retry delay. Another I/O
        error (EIO, ...): the replica goes offline. Each one is retried later, with a
        delay that doubles while they go on."""
        if isinstance(exc, StorageFullError):
            self.space.mark_full()
            # While the disk is full only the writes that keep replication safe are tried
            # (appends are refused up front): they get the reserve (`storage.space`).
            self.space.release_reserve()
        elif type(exc) is StorageError or self.log.io_error is not None:
            self._go_offline(exc)
            return
        self._retry_s = min(RETRY_S_MAX, max(RETRY_S_MIN, self._retry_s * 2))
        self._retry_at = self._hold_until = self._clock() + self._retry_s
        if isinstance(exc, TooManyOpenFilesError):
            self._files_short_until = self._retry_at

    def _go_offline(self, exc: ReplogError) -> None:
        """An I/O error on this replica's files: it stops (the node and its other partitions
        go on), every caller gets PARTITION_OFFLINE; the other replicas elect a leader."""
        if self._offline is not None:
            return
        self._offline = exc
        self._stopped_because = f"offline: {exc}"
        _log.error(
            "replica %s/%s is offline: an I/O error on its files: %s",
            self.log.topic,
            self.log.partition,
            exc,
        )
        self._fail_waiting(self._offline_error())
        self._hand_over_offline()
        self._wake()

    def _hand_over_offline(self) -> None:
        """A leader taken offline answers nothing more: the most caught-up voter among its
        followers is told to campaign at once (Raft's `TimeoutNow`), so that followers who
        went quiet (`roles/quiet.py`: they still hear this node, which is alive) get a new
        leader within an election rather than after the quiet wait. Liveness only: the
        votes decide, as for any candidate; a lost message leaves the quiet wait's bound."""
        replica = self.replica
        if replica.role is not Role.LEADER:
            return
        me = self.config.replica_id
        voters = set(replica.membership.voters) - {me}
        match = {r: m for r, (m, _) in replica.followers().items() if r in voters}
        if match:
            target = max(sorted(match), key=match.__getitem__)
            self.transport.send(target, TimeoutNow(replica.epoch, me))

    async def _recover(self, exc: ReplogError) -> None:
        self._note_failure(exc)
        if self._offline is None:
            await self._retry_rebuild(exc)

    async def _retry_rebuild(self, exc: ReplogError) -> None:
        """Rebuild the core from the log; if the disk refuses that too (the start-up repairs
        write), the owner tries again after the retry delay (`_failed`)."""
        try:
            await self._rebuild(exc)
        except ReplogError as again:
            _log.warning(
                "replica %s/%s: rebuilding its state failed (%s); retrying in %.1fs",
                self.log.topic,
                self.log.partition,
                again,
                self._retry_s,
            )
            self._note_failure(again)
            self._failed = again

    def _fail_acks(self, exc: ReplogError) -> None:
        _log.error(
            "replica %s/%s: a log operation failed: %s", self.log.topic, self.log.partition, exc
        )
        for waiting in self._acks.values():
            if not waiting.fut.done():
                waiting.fut.set_exception(exc)

    async def _rebuild(self, exc: ReplogError) -> None:
        """After a failed log operation (`_fail_acks` already ran): a new core from the log."""
        _log.warning(
            "replica %s/%s: rebuilding its state from the log (%s)",
            self.log.topic,
            self.log.partition,
            exc,
        )
        self.rebuilds += 1
        if self.log.flushed_offset < self.log.log_end_offset:
            # A new core takes the whole log for flushed (what recovery found is on disk):
            # make it so first (writes waiting for the group flusher's fsync).
            await self._io(self.log.flush)
        try:
            self.replica = self._new_replica()
        except OSError as err:  # reading the durable files (EMFILE, EIO)
            raise storage_error(err, f"read {self.log.directory}") from err
        await self._load_producers()
        # No campaign here even in a replica set of one: its election timer starts one
        # later. Should the start-up repairs fail too, `_retry_rebuild` tries again later.
        await self._perform_all(self.replica.start())
        self._check_in_step()
        self._report_membership()

    def _wait_out_failure(self) -> None:
        """While the core cannot be rebuilt (a failed log operation, retried later), inputs
        are not given to it: messages are lost (as on a dead node), requests fail with the
        error, ticks only keep the retry going."""
        exc = self._failed if self._offline is None else self._offline_error()
        for item in self._inbox:
            if item.done is not None and not item.done.done():
                if isinstance(item, Deliver):
                    item.done.set_result(None)
                else:
                    item.done.set_exception(exc or ShuttingDownError("the replica stopped"))
        self._inbox.clear()
        self._tick_due = False
