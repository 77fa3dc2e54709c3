"""Leadership news between nodes: how every node's leader directory (`leader_directory.py`)
learns the leaders of partitions it hosts no replica of.

What is sent (`Replication.ShareLeaders`, unary, on the peer listener): batches of
`LeaderEntry` (topic, topic_id, partition, epoch, leader_id), at most `PAGE_ENTRIES_MAX`
entries and about `PAGE_BYTES_MAX` bytes a message, with the sender's incarnation (random,
drawn at start); the answer carries the receiver's.

When: a replica that starts to lead (its epoch committed: `led`, from the replica's
`on_serving`) tells every peer, so a leadership change costs one entry per peer, batched
with the other changes queued for that peer (O(changes), nothing while nothing changes: no
timer). A peer whose incarnation this node has not seen (one that started, restarted or
joined; learned from its first request here or from its answer) gets this node's whole
directory once, paged. Each peer has one sender task and a pending map (one entry per
partition, the newest: bounded by the partitions); a message that fails is put back and
sent again after a backoff (cut short when the peer is heard from), so news is not lost
while a peer is down. A peer that does not know `ShareLeaders` (UNIMPLEMENTED: an older
version) is not sent to again until it is heard from (it may have been upgraded).

Trust: the sender is the authenticated peer (the certificate's member with TLS; else the
`replog-node-id` header, believed, as the replication streams do), never a field of the
message; every entry is range-checked (`check_entry`), an impossible one refuses the whole
message with INVALID_ARGUMENT. Received entries are hints (`leader_directory`'s merge
rules); they are not passed on (the leader tells every peer itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Iterable
from typing import Any

import grpc

from replog.errors import InvalidArgumentError
from replog.server.peering.leader_directory import Entry, LeaderDirectory, check_entry
from replog.server.peering.replication_transport import NODE_ID_HEADER
from replog.v1 import replication_pb2 as pb
from replog.v1 import replication_pb2_grpc

_log = logging.getLogger("replog.replication")

PAGE_ENTRIES_MAX = 1024  # entries one message carries (a receiver refuses past RECEIVED_...)
PAGE_BYTES_MAX = 32 * 1024  # about, framing included: well under any node's message limit
RECEIVED_ENTRIES_MAX = 4096
ENTRY_FRAMING_BYTES = 3  # an entry's tag and length inside `LeaderNews` (at most)
CALL_TIMEOUT_S = 5.0
BACKOFF_S = (0.05, 2.0)

Key = tuple[str, int]
Channel = Callable[[int], grpc.aio.Channel]
Spawn = Callable[[Any, str], "asyncio.Task[None]"]


def to_wire(entry: Entry) -> pb.LeaderEntry:
    return pb.LeaderEntry(
        topic=entry.topic,
        topic_id=entry.topic_id,
        partition=entry.partition,
        epoch=entry.epoch,
        leader_id=entry.leader_id,
    )


def from_wire(request: pb.LeaderNews) -> list[Entry]:
    """The request's entries, range-checked (`InvalidArgumentError`)."""
    if len(request.entries) > RECEIVED_ENTRIES_MAX:
        raise InvalidArgumentError(
            f"{len(request.entries)} leader entries in one message (at most {RECEIVED_ENTRIES_MAX})"
        )
    entries = []
    for e in request.entries:
        entry = Entry(e.topic, e.topic_id, e.partition, e.epoch, e.leader_id)
        check_entry(entry)
        entries.append(entry)
    return entries


class _Peer:
    def __init__(self, peer: int) -> None:
        self.peer = peer
        self.incarnation = 0  # the peer's, as last seen (0: none yet)
        self.pending: dict[Key, Entry] = {}
        self.full: list[Entry] = []  # the rest of a whole-directory copy to send
        self.probe = True  # say hello (and learn its incarnation) even with nothing to say
        self.unsupported = False  # it answered UNIMPLEMENTED: quiet until heard from
        self.wake = asyncio.Event()
        self.heard = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def has_work(self) -> bool:
        return not self.unsupported and bool(self.probe or self.pending or self.full)

    def take(self) -> tuple[list[Entry], int]:
        """A page: the whole-directory copy first, then changes; (entries, how many of
        them came from the copy)."""
        page: list[Entry] = []
        size = 0
        for entry in self.full:
            size += len(entry.topic) + 24 + ENTRY_FRAMING_BYTES
            if len(page) >= PAGE_ENTRIES_MAX or (page and size > PAGE_BYTES_MAX):
                return page, len(page)
            page.append(entry)
        from_full = len(page)
        for key in list(self.pending):
            entry = self.pending[key]
            size += len(entry.topic) + 24 + ENTRY_FRAMING_BYTES
            if len(page) >= PAGE_ENTRIES_MAX or (page and size > PAGE_BYTES_MAX):
                break
            page.append(entry)
            del self.pending[key]
        return page, from_full

    def put_back(self, page: list[Entry], from_full: int) -> None:
        """A page that was not delivered: its changes wait again (unless newer ones came)."""
        for entry in page[from_full:]:
            key = (entry.topic, entry.partition)
            now = self.pending.get(key)
            if now is None or (now.topic_id, now.epoch) < (entry.topic_id, entry.epoch):
                self.pending[key] = entry


class LeaderNews:
    """The senders (one task per peer) and the receiving side of `ShareLeaders`."""

    def __init__(
        self,
        node_id: int,
        directory: LeaderDirectory,
        channel: Channel,
        incarnation: int | None = None,
    ) -> None:
        self.node_id = node_id
        self.directory = directory
        self._channel = channel  # the channel to a peer (its peer address; mutual TLS)
        self.incarnation = incarnation or random.getrandbits(63) or 1
        self._peers: dict[int, _Peer] = {}
        self._spawn: Spawn | None = None
        self._closed = False
        # what went out and came in (tests, bench/leader_news.py)
        self.messages_sent = 0
        self.entries_sent = 0
        self.bytes_sent = 0
        self.messages_received = 0

    # -- who the peers are ------------------------------------------------------------------

    def start(self, spawn: Spawn, peers: Iterable[int]) -> None:
        self._spawn = spawn
        for peer in peers:
            self.add(peer)

    def add(self, peer: int) -> None:
        if peer == self.node_id or peer in self._peers or self._closed:
            return
        state = self._peers[peer] = _Peer(peer)
        if self._spawn is not None:
            state.task = self._spawn(self._run(state), f"leader-news-{peer}")
            state.wake.set()

    def remove(self, peer: int) -> None:
        state = self._peers.pop(peer, None)
        if state is not None and state.task is not None:
            state.task.cancel()

    def follow(self, change: Any) -> None:
        """A roster subscriber (`RosterKeeper.subscribe`): peers reached and dropped."""
        for peer in change.reach:
            self.add(peer)
        for peer in change.drop:
            self.remove(peer)

    def heard_from(self, peer: int) -> None:
        """`peer` is up (it opened a stream here): a sender backing off tries now."""
        state = self._peers.get(peer)
        if state is None:
            return
        if state.unsupported:
            state.unsupported, state.probe = False, True
        state.heard.set()
        state.wake.set()

    # -- news -------------------------------------------------------------------------------

    def led(self, topic: str, topic_id: int, partition: int, epoch: int) -> None:
        """A replica here started to lead `partition` in `epoch`: tell every peer."""
        entry = Entry(topic, topic_id, partition, epoch, self.node_id)
        if not self.directory.merge([entry]):
            return  # not news
        for state in self._peers.values():
            if not state.unsupported:
                state.pending[(topic, partition)] = entry
                state.wake.set()

    def receive(self, peer: int, request: pb.LeaderNews) -> pb.LeaderNewsAck:
        """A peer's `ShareLeaders` (`peer`: authenticated by the caller)."""
        entries = from_wire(request)
        self.messages_received += 1
        changed = self.directory.merge(entries)
        state = self._peers.get(peer)
        if state is not None and request.incarnation:
            self._saw(state, request.incarnation)
        return pb.LeaderNewsAck(accepted=len(changed), incarnation=self.incarnation)

    def _saw(self, state: _Peer, incarnation: int) -> None:
        """The peer's incarnation: one not seen before gets the whole directory."""
        if incarnation and incarnation != state.incarnation:
            state.incarnation = incarnation
            state.full = list(self.directory.entries())
            state.wake.set()

    # -- sending ----------------------------------------------------------------------------

    async def _run(self, state: _Peer) -> None:
        backoff = BACKOFF_S[0]
        metadata = ((NODE_ID_HEADER, str(self.node_id)),)
        while not self._closed:
            if not state.has_work():
                await state.wake.wait()
                state.wake.clear()
                continue
            full, (page, from_full) = state.full, state.take()
            probe, state.probe = state.probe, False
            request = pb.LeaderNews(
                entries=[to_wire(e) for e in page], incarnation=self.incarnation
            )
            try:
                stub = replication_pb2_grpc.ReplicationStub(self._channel(state.peer))  # type: ignore[no-untyped-call]
                ack = await stub.ShareLeaders(request, timeout=CALL_TIMEOUT_S, metadata=metadata)
            except (grpc.aio.AioRpcError, KeyError) as exc:
                state.put_back(page, from_full)
                state.probe = state.probe or probe
                if isinstance(exc, grpc.aio.AioRpcError):
                    if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                        state.unsupported = True  # an older node: quiet until heard from
                        state.pending.clear()
                        state.full = []
                        continue
                    _log.debug("leader news to %s failed: %s", state.peer, exc.code())
                state.heard.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(state.heard.wait(), backoff)
                backoff = BACKOFF_S[0] if state.heard.is_set() else min(backoff * 2, BACKOFF_S[1])
                continue
            backoff = BACKOFF_S[0]
            if state.full is full:  # (not a new copy for a new incarnation meanwhile)
                del full[:from_full]
            self.messages_sent += 1
            self.entries_sent += len(page)
            self.bytes_sent += request.ByteSize()
            self._saw(state, ack.incarnation)

    async def close(self) -> None:
        self._closed = True
        tasks = [s.task for s in self._peers.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
