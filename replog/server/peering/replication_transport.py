"""The gRPC transport of replication: one outgoing stream per peer, and the
`Replication` service that routes incoming envelopes to partition replicas.

Outgoing (`PeerLinks`): `send(peer, envelope)` never blocks; each peer has a bounded queue
drained by a task that keeps one client stream open (`ExchangeBatches`), reconnecting with
backoff when it breaks. Each message of the stream carries every envelope queued at the
moment it is sent (up to `BATCH_BYTES_MAX`; a larger envelope goes alone): the fetches,
answers and votes of all the partitions two nodes share travel together, so that a node's
cost per idle partition is not one gRPC message each way (a peer that does not know
`ExchangeBatches`, an older version, is sent one envelope per message on `Exchange`).
Messages queued while the peer is unreachable are dropped once the queue is full (best
effort: the protocol's timers retry what matters).

The metadata log (`__cluster`) has a lane of its own to each peer: its own bounded queue
and its own stream, on a channel of its own (`PRIORITY_CHANNEL_OPTIONS`: not the data
stream's connection, whose HTTP/2 flow-control window a slow receiver can fill). Data
partitions' traffic can fill, block or drop on its lane without touching the metadata
log's. Before, they shared one queue: in a storm of elections and leader transfers (5,000
partitions on 3 nodes, the soak of docs/benchmarks.md) every outgoing queue was full, the
metadata log's votes were dropped with the rest (144-253 k envelopes per link), it lost
its leader for good and topic creation stopped. The receiving side needs nothing new: a
lane is one more `ExchangeBatches` stream (the metadata log's envelopes all travel on the
one lane, so each replica still gets its messages in order). A peer that opens a stream to this node
is up: `heard_from(peer)` ends the backoff of the link to it, which reconnects at once.
Without that, a node that restarted got no answers (fetch responses, votes) from peers
whose backoff had grown while it was down, for up to the longest backoff (1 s): measured,
writers waited that long when such a node was needed for a quorum right after a leader's
hand-over.

Incoming (`ReplicationService`): envelopes of one stream are delivered in order to the
replica of `(topic, partition)` found by the router; envelopes for replicas this node does
not host (yet) are dropped. The envelopes of one batch are handed to their replicas
together (in order: each replica's inbox keeps it), and the next batch is read while the
stream's deliveries not handled yet stay within `PENDING_DELIVERIES_MAX` and
`PENDING_BYTES_MAX` (backpressure, `_Window`). Before, the next batch waited until every
delivery of the last one was handled: one replica slow to handle its message (a vote
waiting for its quorum state's fsync behind hundreds of others) held the messages of every
partition the two nodes share, heartbeats included; at ~1,200 partitions on 3 nodes a
burst of leader transfers turned that into elections timing out everywhere, the metadata
log's too, for good (measured: bench/scale.py stopped at 470 partitions, a profiling run
at 1,210). The node that opens a stream is reported to
`on_peer` (the node passes `PeerLinks.heard_from`) as soon as the stream opens: the member
its certificate names with TLS, else the id in the `replog-node-id` header every link sends
(believed, as envelopes' senders are without TLS), else the sender of the stream's first
envelope (a node of an older version).

Liveness (quiescence: `replication/liveness.py`, `replication/roles/quiet.py`). An idle
`ExchangeBatches` stream carries an empty batch every `HEARTBEAT_S`, and every stream says
its node's incarnation (`INCARNATION_HEADER`, drawn at process start). The receiving side
reports each batch to the node's `NodeLiveness` (`PeerLinks.liveness`) and each new stream
as a reconnection (with the incarnation: a new one is a restart); `PeerLinks` checks for
silent peers every `HEARTBEAT_S`. The replicas of quiet partitions are woken by it.

Trust. With TLS (`authenticate` given) the stream arrives on the peer listener, which
requires a client certificate signed by the cluster's CA; the certificate must name a
member (`security.peer_node_id`), and every envelope's `from_id` must be that member, or
the stream ends with PERMISSION_DENIED before the envelope reaches any replica. The
certificate is checked again at the first batch `REAUTHENTICATE_INTERVAL_S` after the
last check, so the stream of a node that has left the cluster since it opened it (out of
the members and of the metadata quorum: `Node.sync_members`) ends with PERMISSION_DENIED
too, rather than delivering for as long as keepalives hold it open. Without TLS (a
laptop) the sender is believed. Either way every envelope is range-checked by the
codec (`ImpossibleMessage`): an impossible one is dropped and logged (at most one line per
sender every `DROP_LOG_INTERVAL_S`), never delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol

import grpc

from replog.errors import InvalidArgumentError, ReplogError, ShuttingDownError
from replog.replication.liveness import NodeLiveness
from replog.replication.messages import Message
from replog.server.edge import status
from replog.server.edge.security import describe_peer
from replog.server.logs import log
from replog.server.meta.metadata import METADATA_TOPIC
from replog.server.peering.replication_codec import ImpossibleMessage, from_envelope, to_envelope
from replog.v1 import replication_pb2 as pb
from replog.v1 import replication_pb2_grpc

_log = logging.getLogger("replog.replication")

QUEUE_ENVELOPES_MAX = 10_000
# One batch of envelopes: at most this many bytes, framing included (an envelope larger
# than that, a fetch answer with records, goes alone, as on `Exchange`), well under the
# smallest message limit a node accepts (`message_bytes_max` >= 64 KiB); a few hundred
# idle partitions' fetches or answers fit in one.
BATCH_BYTES_MAX = 32 * 1024
BATCH_ENVELOPES_MAX = 4096
ENVELOPE_FRAMING_BYTES = 8  # an envelope's tag and length inside `Envelopes` (at most)
RECONNECT_BACKOFF_S = (0.05, 1.0)
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 8 * 1024 * 1024),
    ("grpc.max_send_message_length", 8 * 1024 * 1024),
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
]
# The metadata log's lane: a channel that does not share the data lane's connection (gRPC
# shares one connection between channels of the same target and options).
PRIORITY_CHANNEL_OPTIONS = [*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]

DROP_LOG_INTERVAL_S = 10.0
REAUTHENTICATE_INTERVAL_S = 1.0  # a stream's certificate is checked again this often
NODE_ID_HEADER = "replog-node-id"  # the sending node's id, on every outgoing stream
INCARNATION_HEADER = "replog-incarnation"  # the sending process's id, drawn at its start
HEARTBEAT_S = 0.25  # an idle link sends an empty batch this often; silence is checked too
# A stream's deliveries started and not handled yet (by count and by envelope bytes): the
# next batch is read while both are below these (`_Window`).
PENDING_DELIVERIES_MAX = 4096
PENDING_BYTES_MAX = 32 * 1024 * 1024


def _now_ms() -> int:
    return int(time.monotonic() * 1000)  # the replicas' clock (`ReplicaDriver`)


# (topic, partition, topic_id) -> the replica's delivery, None when not hosted here
Router = Callable[[str, int, int], Callable[[Message], Awaitable[None]] | None]
# One message for its replica: the replica's deliver call, the message, its size in bytes.
_Delivery = tuple[Callable[[Message], Awaitable[None]], Message, int]


def same_incarnation(sent_topic_id: int, local_topic_id: int) -> bool:
    """A message is for this replica unless both sides know the topic's incarnation and
    they differ (the message was sent for a deleted topic of the same name). 0: unknown
    (a sender or a replica directory that predates topic ids)."""
    return not sent_topic_id or not local_topic_id or sent_topic_id == local_topic_id


Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]
# The member a call's channel authenticated (None: not a member); see security.py.
Authenticate = Callable[[Any], int | None]
Dial = Callable[[str], grpc.aio.Channel]


def insecure_dial(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


def insecure_priority_dial(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address, options=PRIORITY_CHANNEL_OPTIONS)


def is_priority(envelope: pb.Envelope) -> bool:
    """Whether `envelope` travels on the metadata log's lane."""
    return envelope.topic == METADATA_TOPIC


class NewsReceiver(Protocol):
    """The receiving side of `ShareLeaders` (leader_news.LeaderNews)."""

    def receive(self, peer: int, request: pb.LeaderNews) -> pb.LeaderNewsAck: ...


# Put in an idle lane's queue by its heartbeat timer (`_batches`): send an empty batch.
_HEARTBEAT = pb.Envelope()


def _heartbeat_if_idle(queue: asyncio.Queue[pb.Envelope]) -> None:
    """The lane's stream has waited `HEARTBEAT_S` for an envelope: wake it to send a
    heartbeat (the queue is empty, so this never meets a full queue)."""
    if queue.empty():
        queue.put_nowait(_HEARTBEAT)


class _Link:
    """One lane to one peer: a bounded queue and the task that streams it."""

    def __init__(self, peer: int, address: str, priority: bool = False) -> None:
        self.peer = peer
        self.address = address
        self.priority = priority  # the metadata log's lane (dialled with `priority_dial`)
        self.queue: asyncio.Queue[pb.Envelope] = asyncio.Queue(QUEUE_ENVELOPES_MAX)
        self.task: asyncio.Task[None] | None = None
        self.dropped = 0
        self.heard = asyncio.Event()  # the peer opened a stream here: it is up again
        self.batched = True  # the next stream is `ExchangeBatches` (False: `Exchange`, once)
        self.carry: pb.Envelope | None = None  # taken off the queue, for the next batch
        self.batches = 0  # messages sent on `ExchangeBatches` (for tests and metrics)
        self.heartbeats = 0  # empty batches sent on an idle stream


class PeerLinks:
    """Outgoing streams to every peer (`peers`: node id -> host:port)."""

    def __init__(
        self,
        node_id: int,
        peers: dict[int, str],
        dial: Dial = insecure_dial,
        *,
        silence_ms: int = 1000,
        priority_dial: Dial | None = None,
    ) -> None:
        """`silence_ms`: a peer not heard for this long is silent (its quiet partitions
        wake: `NodeLiveness`); the election timeout's lower bound. `priority_dial`: the
        channels of the metadata log's lanes, which must not share the data lanes'
        connections (`PRIORITY_CHANNEL_OPTIONS`; default: `dial`, for tests)."""
        self.node_id = node_id
        self.liveness = NodeLiveness(silence_ms)
        self.incarnation = random.SystemRandom().getrandbits(62) + 1
        self._links = {p: _Link(p, a) for p, a in peers.items() if p != node_id}
        self._priority = {p: _Link(p, a, True) for p, a in peers.items() if p != node_id}
        self._closed = False
        self._dial = dial  # a channel to a peer address (mutual TLS with TLS on)
        self._priority_dial = priority_dial or dial
        self._spawn: Spawn | None = None
        self._started = False
        self._liveness_task: asyncio.Task[None] | None = None

    def start(self, spawn: Spawn | None = None) -> None:
        """Start one sender task per peer through `spawn` (the node's supervisor; tests of
        the transport alone may leave it out)."""
        self._spawn, self._started = spawn, True
        for link in self._lanes():
            self._start_link(link)
        coro, name = self._check_liveness(), "peer-liveness"
        self._liveness_task = spawn(coro, name) if spawn else asyncio.create_task(coro, name=name)

    async def _check_liveness(self) -> None:
        while not self._closed:
            await asyncio.sleep(HEARTBEAT_S)
            self.liveness.check(_now_ms())

    def _lanes(self) -> list[_Link]:
        return [*self._priority.values(), *self._links.values()]

    def _start_link(self, link: _Link) -> None:
        coro, name = self._run(link), f"peer-{link.peer}{'-meta' if link.priority else ''}"
        spawn = self._spawn
        link.task = spawn(coro, name) if spawn else asyncio.create_task(coro, name=name)

    def addresses(self) -> dict[int, str]:
        """peer id -> the address its link dials."""
        return {p: link.address for p, link in self._links.items()}

    def add(self, peer: int, address: str) -> None:
        """Reach `peer` at `address` from now on (a node added to the cluster, or one whose
        address changed): its link starts at once when the links run."""
        link = self._links.get(peer)
        if peer == self.node_id or self._closed or (link and link.address == address):
            return
        if link is not None:
            self.remove(peer)
        link = self._links[peer] = _Link(peer, address)
        priority = self._priority[peer] = _Link(peer, address, True)
        if self._started:
            self._start_link(priority)
            self._start_link(link)

    def remove(self, peer: int) -> None:
        """Stop reaching `peer` (a node that left the cluster): its queued messages drop."""
        for lanes in (self._priority, self._links):
            link = lanes.pop(peer, None)
            if link is not None and link.task is not None:
                link.task.cancel()

    def transport(self, topic: str, partition: int, topic_id: int = 0) -> PartitionTransport:
        return PartitionTransport(self, topic, partition, topic_id)

    def heard_from(self, peer: int) -> None:
        """`peer` is up (it sent on a stream of its own): a link to it waiting out its
        reconnect backoff reconnects now."""
        for lanes in (self._priority, self._links):
            link = lanes.get(peer)
            if link is not None:
                link.heard.set()

    def send(self, peer: int, envelope: pb.Envelope) -> None:
        """Queue `envelope` for `peer` on its lane (never blocks; dropped when the lane's
        queue is full)."""
        link = (self._priority if is_priority(envelope) else self._links).get(peer)
        if link is None or self._closed:
            return
        try:
            link.queue.put_nowait(envelope)
        except asyncio.QueueFull:
            link.dropped += 1

    async def _run(self, link: _Link) -> None:
        backoff = RECONNECT_BACKOFF_S[0]
        while not self._closed:
            opened_at = time.monotonic()
            link.heard.clear()  # only news after this attempt started cuts its backoff short
            channel = (self._priority_dial if link.priority else self._dial)(link.address)
            stub = replication_pb2_grpc.ReplicationStub(channel)  # type: ignore[no-untyped-call]
            readers: list[asyncio.Task[Any]] = []
            metadata = (
                (NODE_ID_HEADER, str(self.node_id)),
                (INCARNATION_HEADER, str(self.incarnation)),
            )
            batched, link.batched = link.batched, True
            try:
                if batched:
                    await stub.ExchangeBatches(self._batches(link, readers), metadata=metadata)
                else:
                    await stub.Exchange(self._drain(link, readers), metadata=metadata)
            except grpc.aio.AioRpcError as exc:
                if exc.code() is grpc.StatusCode.UNIMPLEMENTED and batched:
                    # An older peer (or one still registering its services): one envelope
                    # per message on this stream; the next stream tries batches again.
                    link.batched = False
                _log.debug("replication stream to %s broke: %s", link.address, exc.code())
            except asyncio.CancelledError:
                await channel.close(None)
                raise
            finally:
                # grpc's task that reads `_drain` outlives a call that failed: left alone, it
                # would take the next envelope off the queue and lose it on the dead call
                # (the first message after every break, a BeginEpoch or a fetch answer)
                for reader in readers:
                    reader.cancel()
                with contextlib.suppress(Exception):
                    await channel.close(None)
            if time.monotonic() - opened_at >= RECONNECT_BACKOFF_S[1]:
                # The stream was up for a while: a fresh break (a peer restarting) reconnects
                # at once again, not after the longest backoff earlier breaks reached.
                backoff = RECONNECT_BACKOFF_S[0]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(link.heard.wait(), backoff)
            if link.heard.is_set():  # the peer is back: connect now, from the shortest backoff
                backoff = RECONNECT_BACKOFF_S[0]
            else:
                backoff = min(backoff * 2, RECONNECT_BACKOFF_S[1])

    async def _drain(
        self, link: _Link, readers: list[asyncio.Task[Any]]
    ) -> AsyncIterator[pb.Envelope]:
        """The link's queue as one stream's requests; `readers` gets the task reading them
        (to be cancelled when the stream ends: `Queue.get` gives up without taking)."""
        reader = asyncio.current_task()
        if reader is not None:
            readers.append(reader)
        while True:
            envelope = await link.queue.get()
            if envelope is not _HEARTBEAT:  # (left by a batched stream that ended)
                yield envelope

    async def _batches(
        self, link: _Link, readers: list[asyncio.Task[Any]]
    ) -> AsyncIterator[pb.Envelopes]:
        """The link's queue as one stream's requests, each carrying every envelope queued
        when it is sent, within `BATCH_BYTES_MAX` / `BATCH_ENVELOPES_MAX` (`readers`: as in
        `_drain`)."""
        reader = asyncio.current_task()
        if reader is not None:
            readers.append(reader)
        queue = link.queue
        loop = asyncio.get_running_loop()
        while True:
            first = link.carry
            link.carry = None
            if first is None:
                if queue.empty():
                    # An idle lane's timer puts `_HEARTBEAT` in its queue: a plain get, not
                    # `wait_for` (which made a task for every batch sent).
                    timer = loop.call_later(HEARTBEAT_S, _heartbeat_if_idle, queue)
                    try:
                        first = await queue.get()
                    finally:
                        timer.cancel()
                else:
                    first = queue.get_nowait()
                if first is _HEARTBEAT:
                    link.heartbeats += 1
                    yield pb.Envelopes()  # a heartbeat: the link is idle, the node alive
                    continue
            batch = [first]
            size = first.ByteSize()
            while not queue.empty() and len(batch) < BATCH_ENVELOPES_MAX:
                envelope = queue.get_nowait()
                if envelope is _HEARTBEAT:  # (its timer fired as the envelope came)
                    continue
                size += envelope.ByteSize() + ENVELOPE_FRAMING_BYTES
                if size > BATCH_BYTES_MAX:
                    link.carry = envelope
                    break
                batch.append(envelope)
            link.batches += 1
            yield pb.Envelopes(envelopes=batch)

    async def close(self) -> None:
        self._closed = True
        tasks = [link.task for link in self._lanes() if link.task is not None]
        if self._liveness_task is not None:
            tasks.append(self._liveness_task)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class PartitionTransport:
    """The `Transport` one partition's driver sees."""

    def __init__(self, links: PeerLinks, topic: str, partition: int, topic_id: int = 0) -> None:
        self.links = links
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id

    @property
    def liveness(self) -> NodeLiveness:
        """The node's view of its peers (`ReplicaDriver` wakes quiet replicas by it)."""
        return self.links.liveness

    def send(self, to: int, message: Message) -> None:
        self.links.send(
            to,
            to_envelope(self.topic, self.partition, self.links.node_id, message, self.topic_id),
        )


class ReplicationService(replication_pb2_grpc.ReplicationServicer):
    def __init__(
        self,
        router: Router,
        authenticate: Authenticate | None = None,
        on_peer: Callable[[int], None] | None = None,
        news: NewsReceiver | None = None,
        liveness: NodeLiveness | None = None,
    ) -> None:
        self.router = router
        self.liveness = liveness  # told of every stream and batch from a peer
        self.news = news  # ShareLeaders (None: UNIMPLEMENTED)
        self.authenticate = authenticate  # None: plaintext, the envelope's sender is believed
        self.on_peer = on_peer  # told the sender of each stream's first envelope
        self.dropped = 0  # impossible envelopes (range checks), for tests and metrics
        self.refused = 0  # streams ended with PERMISSION_DENIED
        self._logged_at: dict[int, float] = {}
        self._closed = False

    def close(self) -> None:
        """Refuse new streams (a stopping node): `UNAVAILABLE SHUTTING_DOWN`. Open ones end
        at their next read, with the same status, through the node's `draining.Draining`
        (cancelling their tasks would not do: grpc sends no status for a cancelled
        handler, and the call would hold `server.stop` for the whole grace). A handler
        stops waiting only; the replica's owner handles the message it took."""
        self._closed = True

    async def Exchange(
        self,
        request_iterator: AsyncIterator[pb.Envelope],
        context: grpc.aio.ServicerContext[pb.Envelope, pb.ExchangeSummary],
    ) -> pb.ExchangeSummary:
        """One envelope per message (the stream of nodes of older versions)."""

        async def batches() -> AsyncIterator[Sequence[pb.Envelope]]:
            async for envelope in request_iterator:
                yield (envelope,)

        return await self._serve(batches(), context)

    async def ExchangeBatches(
        self,
        request_iterator: AsyncIterator[pb.Envelopes],
        context: grpc.aio.ServicerContext[pb.Envelopes, pb.ExchangeSummary],
    ) -> pb.ExchangeSummary:
        async def batches() -> AsyncIterator[Sequence[pb.Envelope]]:
            async for batch in request_iterator:
                yield batch.envelopes

        return await self._serve(batches(), context)

    async def ShareLeaders(
        self, request: pb.LeaderNews, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.LeaderNewsAck:
        """A peer's leadership news (leader_news.py), from the authenticated peer."""
        if self.news is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no leader directory here")
            raise AssertionError("abort returned")
        try:
            if self._closed:
                raise ShuttingDownError("the node is shutting down")
            if self.authenticate is not None:
                peer = self.authenticate(context)
                if peer is None:
                    await self._refuse(context, "the client certificate names no member")
            else:
                peer = _announced_node(context)
            if peer is None:
                raise InvalidArgumentError(f"ShareLeaders without a {NODE_ID_HEADER} header")
            return self.news.receive(peer, request)
        except ReplogError as err:
            await status.abort(context, err)
            raise AssertionError("abort returned") from err

    async def _serve(
        self, batches: AsyncIterator[Sequence[pb.Envelope]], context: Any
    ) -> pb.ExchangeSummary:
        try:
            if self._closed:
                raise ShuttingDownError("the node is shutting down")
            return await self._exchange(batches, context)
        except ReplogError as err:  # the node stops: SHUTTING_DOWN, with its ErrorInfo
            await status.abort(context, err)
            raise AssertionError("abort returned") from err

    async def _exchange(
        self, batches: AsyncIterator[Sequence[pb.Envelope]], context: Any
    ) -> pb.ExchangeSummary:
        peer: int | None = None
        authenticate = self.authenticate
        if authenticate is not None:
            peer = authenticate(context)
            if peer is None:
                await self._refuse(context, "the client certificate names no member")
        announced = peer if peer is not None else _announced_node(context)
        if announced is not None and self.on_peer is not None:
            self.on_peer(announced)  # it is up: before its first envelope, which may be late
        if announced is not None and self.liveness is not None:
            self.liveness.connected(announced, _now_ms(), _announced_incarnation(context))
        window = _Window()
        try:
            count = await self._read(batches, context, peer, announced, window)
            await window.drain()
        finally:
            window.cancel()  # (the waits only: each replica handles what it was given)
        return pb.ExchangeSummary(envelopes=count)

    async def _read(
        self,
        batches: AsyncIterator[Sequence[pb.Envelope]],
        context: Any,
        peer: int | None,
        announced: int | None,
        window: _Window,
    ) -> int:
        """Read the stream's batches and start their deliveries; returns the envelopes
        read."""
        authenticate = self.authenticate
        checked_at = time.monotonic()
        count = 0
        async for batch in batches:
            if announced is not None and self.liveness is not None:
                self.liveness.heard(announced, _now_ms())
            if authenticate is not None:
                now = time.monotonic()
                if now - checked_at >= REAUTHENTICATE_INTERVAL_S:
                    checked_at = now
                    if authenticate(context) != peer:
                        await self._refuse(context, f"node {peer} is no longer a member")
            deliveries: list[_Delivery] = []
            for envelope in batch:  # (none of a refused batch is delivered: all checked first)
                count += 1
                if peer is not None and envelope.from_id != peer:
                    await self._refuse(
                        context, f"node {peer} sent an envelope as node {envelope.from_id}"
                    )
                if count == 1 and announced is None and self.on_peer is not None:
                    self.on_peer(envelope.from_id)
                delivery = self._delivery(envelope)
                if delivery is not None:
                    deliveries.append(delivery)
            window.start(deliveries)
            await window.room()
        return count

    def _delivery(self, envelope: pb.Envelope) -> _Delivery | None:
        """The delivery of `envelope` to its replica, not started yet (None: not hosted
        here, or impossible); `_Window.start` starts a batch's deliveries."""
        deliver = self.router(envelope.topic, envelope.partition, envelope.topic_id)
        if deliver is None:
            return None
        try:
            message = from_envelope(envelope)
        except ImpossibleMessage as exc:
            self._dropped(envelope, str(exc))
            return None
        return deliver, message, envelope.ByteSize()

    async def _refuse(self, context: Any, reason: str) -> None:
        self.refused += 1
        log(_log, "replication.refused", logging.WARNING, peer=describe_peer(context), why=reason)
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"replication refused: {reason}")

    def _dropped(self, envelope: pb.Envelope, reason: str) -> None:
        self.dropped += 1
        now = time.monotonic()
        sender = envelope.from_id
        if now - self._logged_at.get(sender, -DROP_LOG_INTERVAL_S) >= DROP_LOG_INTERVAL_S:
            if len(self._logged_at) > 1000:
                self._logged_at.clear()
            self._logged_at[sender] = now
            log(
                _log,
                "replication.dropped",
                logging.WARNING,
                sender=sender,
                topic=envelope.topic[:100],
                partition=envelope.partition,
                why=reason[:200],
                dropped=self.dropped,
            )


class _Window:
    """The deliveries one incoming stream has started and its replicas have not handled
    yet. Each delivery puts its message in its replica's inbox in its task's first step
    (tasks start in the order they were made, so each replica gets its messages in the
    stream's order); the stream reads on while the window has room, so a replica slow to
    handle one message delays only its own. A delivery that failed ends the stream."""

    def __init__(self) -> None:
        self.pending: dict[asyncio.Future[None], int] = {}
        self.bytes = 0
        self.failed: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def start(self, deliveries: list[_Delivery]) -> None:
        """Hand each message to its replica, in order. A replica's `post` is a future (no
        task per message); a target that is a coroutine function gets a task."""
        for deliver, message, size in deliveries:
            task = asyncio.ensure_future(deliver(message))
            self.pending[task] = size
            self.bytes += size
            task.add_done_callback(self._done)

    def _full(self) -> bool:
        return len(self.pending) >= PENDING_DELIVERIES_MAX or self.bytes >= PENDING_BYTES_MAX

    def _done(self, task: asyncio.Future[None]) -> None:
        self.bytes -= self.pending.pop(task)
        if not task.cancelled() and task.exception() is not None and self.failed is None:
            self.failed = task.exception()
        waiter = self._waiter
        if waiter is not None and not waiter.done() and (self.failed or not self._full()):
            waiter.set_result(None)

    async def room(self) -> None:
        """Return once the window has room for the next batch."""
        while self._full() and self.failed is None:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        if self.failed is not None:
            raise self.failed

    async def drain(self) -> None:
        """Wait until every delivery started has been handled (the stream ended)."""
        if self.pending:
            await asyncio.wait(list(self.pending))
        if self.failed is not None:
            raise self.failed

    def cancel(self) -> None:
        for task in list(self.pending):
            task.cancel()


def _announced_incarnation(context: Any) -> int | None:
    """The sending process's incarnation (`INCARNATION_HEADER`; None: none, a node of an
    older version)."""
    for key, value in context.invocation_metadata() or ():
        if key == INCARNATION_HEADER and isinstance(value, str) and value.isdigit():
            return int(value) if len(value) < 20 else None
    return None


def _announced_node(context: Any) -> int | None:
    """The node id a stream's `replog-node-id` header gives (None: none, or not a number)."""
    for key, value in context.invocation_metadata() or ():
        if key == NODE_ID_HEADER and isinstance(value, str) and value.isdigit() and len(value) < 10:
            return int(value)
    return None
