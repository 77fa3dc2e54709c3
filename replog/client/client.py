"""The synchronous Python client: admin calls, appends, fetches, streams, with routing.

`Client("127.0.0.1:7070")` opens one channel per node address it uses. One address is
enough: before its first call the client asks that node for the cluster's metadata and
from then on knows every node (`routing.Routing`: the bootstrap addresses plus the nodes
the latest metadata named). A node that does not answer (connection refused or reset, no
answer before the deadline) is passed over: admin and metadata calls move to the next
known node, calls to a partition leader go to another node, which names the new leader
once it knows it. Produce and consume calls go to the partition's leader (from
`GetMetadata`, cached); a `NOT_LEADER` answer updates the cache from the error's leader
hint (or refetches metadata) before the retry. Every failure surfaces as the typed
`ReplogError` the server raised (`replog.rpc_errors`). Only retriable errors are retried,
with backoff, within the call's `RetryPolicy` (attempts and total time).

TLS: `Client(address, tls=ClientTls(ca_file))` verifies the servers against `ca_file`;
`ClientTls(ca_file, cert_file, key_file)` also presents a client certificate (mutual TLS);
`token="..."` sends `authorization: Bearer <token>` with every call (TLS only). Every node
is reached with the same TLS settings and token.

Appends are idempotent by default (`idempotent=True`): the client gets a producer id from
the cluster (`InitProducer`) and numbers each partition's records
(`sequences.Sequences`), so retrying an Append after a timeout, a lost connection or a
leader change never writes the batch twice: the leader answers a retry with the batch's
original offsets. Only an Append that raised in the end has an unknown outcome (as with
Kafka's producer after its delivery timeout); the next Append then starts a new producer
id. `producer_name="..."` makes the id stable: each client created with the same name gets
the next epoch, and appends from older instances fail with PRODUCER_FENCED; with
`producer_resume=True` it gets the name's current epoch instead, for a writer retried as a
whole that resends the same batches (each then answered as a duplicate, or
DUPLICATE_SEQUENCE for one older than the last 5: already written). With
`idempotent=False` (or acks="none") a retried Append whose first attempt did land writes
the batch twice, and a timed-out Append is not retried (DEADLINE_EXCEEDED).

Idempotent appends travel over AppendStream, one long-lived stream per node shared by the
client's threads and producers (`append_stream`): concurrent appends, and a `Producer`'s
batches, are pipelined, several per partition in flight, in order by their sequence
numbers. `streaming=False` sends one unary Append per batch instead (as do non-idempotent
and acks="none" appends), and so does a node that does not know AppendStream
(UNIMPLEMENTED: an older server), from its first such answer on. `close()` waits for the
appends still in flight at most `timeout_s`: those left then fail with SHUTTING_DOWN
(outcome unknown), so a client whose node went away closes in bounded time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from functools import cached_property
from typing import Any, Literal, TypeVar, Unpack, overload

import grpc

from replog.client import client_calls as calls
from replog.client import connect, formats
from replog.client.acl_calls import AclCalls
from replog.client.append_stream import AppendStreams, Pipeline
from replog.client.channels import (
    ATTEMPT_TIMEOUT_S,
    CHANNEL_OPTIONS,
    MESSAGE_BYTES_MAX,
)
from replog.client.client_base import ClientBase, Node
from replog.client.client_calls import ACKS as ACKS  # re-exported
from replog.client.client_calls import metadata_request as metadata_request  # re-exported
from replog.client.consumer import Consumer
from replog.client.factories import Factories, GroupOptions
from replog.client.group_consumer import GroupConsumer
from replog.client.group_rpcs import GroupRpc
from replog.client.groups import GroupCalls
from replog.client.results import AppendResult, TopicConfig
from replog.client.retry import RetryPolicy, call_with_retry
from replog.client.sequences import Identity
from replog.client.wire import partition_info
from replog.errors import (
    DuplicateSequenceError,
    NotLeaderError,
    ReplogError,
    TopicNotFoundError,
)
from replog.rpc_errors import from_rpc_error
from replog.tls import channel
from replog.v1 import admin_pb2, log_pb2

T = TypeVar("T")
__all__ = [
    "ACKS",
    "ATTEMPT_TIMEOUT_S",
    "CHANNEL_OPTIONS",
    "MESSAGE_BYTES_MAX",
    "Client",
    "Node",
    "partition_info",
]


class Client(ClientBase, Factories, AclCalls):
    """The synchronous client of a replog cluster (see the module doc): admin calls
    (`create_topic`, `describe_topic`, `list_offsets`, ...), record calls (`append`,
    `fetch`, `stream`), and the factories of producers (`producer`), consumers
    (`consumer(topic, partition)` or `consumer(topic, group=...)`) and assigned consumers
    (`assigned_consumer`). Thread-safe; `close()` (or `with`) ends its channels. Its
    options: `client_base.ClientBase`; the calls it shares with `AsyncClient`:
    `client_calls.ClientCalls`."""

    blocking: Literal[True] = True

    def _init_driver(self) -> None:
        self._identity_lock = threading.Lock()
        self._partition_locks: dict[tuple[str, int], threading.Lock] = {}
        self._lock = threading.Lock()
        self._discovering = threading.Lock()
        # Idempotent appends go over AppendStream (append_stream.py) unless streaming=False.
        self._streams: AppendStreams | None = None
        self._pipeline: Pipeline | None = None

    # -- plumbing ---------------------------------------------------------------------------

    _open_channel = staticmethod(channel)

    def _node(self, address: str) -> Node:
        with self._lock:
            return super()._node(address)

    def _leader(self, topic: str, partition: int) -> Node:
        return self._node(self.routing.address(topic, partition))

    def run(self, flow: calls.Flow[T]) -> T:
        """Perform `flow`'s steps in turn, blocking (`client_calls.drive_blocking`)."""
        return calls.drive_blocking(flow, self._perform)

    def _perform(self, step: calls.Step) -> Any:
        if isinstance(step, GroupRpc):
            return self.groups.run(step)
        send = calls.Sender(step, self)
        try:
            reply = self._call(send, *send.route, **send.options)
        except ReplogError as err:
            return send.settle(err)
        return step.read(reply)

    def _call(
        self, fn: Callable[[Node], T], topic: str | None = None, partition: int = 0, *,
        idempotent: bool = False, discover: bool = True, retry: RetryPolicy | None = None,
    ) -> T:  # fmt: skip
        """`fn(node)` with typed errors, retries and routing: to the partition's leader with
        a `topic`, else to the current node. A node that does not answer is passed over
        (`Routing.failed`); an `idempotent` call (a read) that timed out is retried
        elsewhere, any other is raised: its outcome is unknown."""
        if discover:
            self._discover(topic)

        def attempt() -> T:
            address = self.routing.address(topic, partition)
            try:
                out = fn(self._node(address))
            except grpc.RpcError as exc:
                raise self._failed(exc, address, idempotent=idempotent) from None
            self.routing.answered(address)
            return out

        return call_with_retry(
            attempt, retry or self.retry, lambda err: self._reroute(err, topic, partition)
        )

    def _failed(self, exc: grpc.RpcError, address: str, *, idempotent: bool) -> ReplogError:
        """The typed error of a failed attempt at `address` (`connect.check`,
        `Routing.failed`)."""
        err = connect.check(from_rpc_error(exc), address, self.tls is not None, self.routing)
        return self.routing.failed(err, address, idempotent=idempotent)

    def _discover(self, topic: str | None) -> None:
        """Before the first call: learn every node of the cluster (`client_calls.discover`;
        one thread asks, the others go on)."""
        if self.routing.discovered or not self._discovering.acquire(blocking=False):
            return
        try:
            self.run(calls.discover(self, topic))
        finally:
            self._discovering.release()

    def _reroute(self, err: ReplogError, topic: str | None, partition: int) -> bool:
        """Update routing after a retriable error (`client_calls.reroute`); True when the
        retry goes to another node (worth trying at once)."""
        return self.run(calls.reroute(self, err, topic, partition))

    def _on_not_leader(self, topic: str, partition: int, err: NotLeaderError) -> bool:
        """Route to the leader the error names (True: a new address, worth retrying at once)
        or refetch metadata."""
        return self._reroute(err, topic, partition)

    def close(self) -> None:
        """Close the channels, after the appends in flight (at most `timeout_s`: see the
        module doc)."""
        with self._lock:
            pipeline, self._pipeline = self._pipeline, None
        if pipeline is not None:
            pipeline.close(self.timeout_s)
        with self._lock:
            if self._streams is not None:
                self._streams.close()
                self._streams = None
            for node in self._nodes.values():
                node.channel.close()
            self._nodes.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- admin ------------------------------------------------------------------------------

    def delete_topic(self, name: str) -> None:
        req = admin_pb2.DeleteTopicRequest(name=name)
        self._call(lambda node: node.admin.DeleteTopic(req, timeout=self.commit_timeout_s))

    def describe_configs(self, topic: str) -> dict[str, TopicConfig]:
        """Every config of `topic`: name -> its value and source ("topic" or "default")."""
        req = admin_pb2.DescribeConfigsRequest(topic=topic)
        call = lambda node: node.admin.DescribeConfigs(req, timeout=self.attempt_timeout_s)  # noqa: E731
        return formats.configs_of(self._call(call, idempotent=True))

    def alter_configs(
        self, topic: str, *, set: Mapping[str, str] | None = None, delete: Sequence[str] = ()
    ) -> None:
        """Set `topic`'s configs `set` and reset those named in `delete` to their defaults."""
        req = admin_pb2.AlterConfigsRequest(topic=topic, set=set or {}, delete=delete)
        call = lambda node: node.admin.AlterConfigs(req, timeout=self.commit_timeout_s)  # noqa: E731
        self._call(call, idempotent=True)  # (the same change twice: the same configs)

    def transfer_leadership(self, topic: str, partition: int, to: int = 0) -> int:
        """Hand the partition's leadership to voter `to` (0: the freshest caught-up one);
        returns the node it went to once the old leader stepped down."""
        req = admin_pb2.TransferLeadershipRequest(
            topic=topic, partition=partition, target_node_id=to
        )
        resp = self._call(
            lambda node: node.admin.TransferLeadership(req, timeout=self.timeout_s),
            idempotent=False,
        )
        return int(resp.leader_id)

    def reassign_partition(
        self, topic: str, partition: int, replicas: Sequence[int]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Move the partition's replicas to `replicas` (preferred leader first; its current
        replicas cancel a move in progress). Returns (replicas, target) once the target is
        recorded; the move itself goes on in the cluster (`describe_topic` shows it)."""
        req = admin_pb2.ReassignPartitionRequest(
            topic=topic, partition=partition, replicas=list(replicas)
        )
        resp = self._call(
            lambda node: node.admin.ReassignPartition(req, timeout=self.commit_timeout_s),
            idempotent=True,  # the same target again is accepted and changes nothing
        )
        return tuple(resp.replicas), tuple(resp.target_replicas)

    def add_node(self, node_id: int, address: str, peer_address: str = "") -> list[tuple[int, str]]:
        """Make node `node_id` (reached at `address`; `peer_address`: its peer listener, if
        it has one) a member of the cluster, without restarting the others. Returns the
        members (id, address) once recorded; it then joins the metadata quorum on its own
        (`refresh_metadata().metadata_voters`). The same address again changes nothing."""
        req = admin_pb2.AddNodeRequest(node_id=node_id, address=address, peer_address=peer_address)
        resp = self._call(
            lambda node: node.admin.AddNode(req, timeout=self.commit_timeout_s), idempotent=True
        )
        return [(n.id, n.address) for n in resp.nodes]

    def remove_node(self, node_id: int) -> list[tuple[int, str]]:
        """End node `node_id`'s membership (it must host no replica: decommission it first).
        Returns the members once recorded; it leaves the metadata quorum right after."""
        req = admin_pb2.RemoveNodeRequest(node_id=node_id)
        resp = self._call(lambda node: node.admin.RemoveNode(req, timeout=self.commit_timeout_s))
        return [(n.id, n.address) for n in resp.nodes]

    def partition_count(self, topic: str) -> int:
        topics = self.list_topics()
        if topic not in topics:
            from replog.errors import TopicNotFoundError

            raise TopicNotFoundError(f"topic {topic!r} does not exist", topic=topic)
        return topics[topic]

    # -- records ----------------------------------------------------------------------------

    def append(
        self, topic: str, partition: int, values: formats.Values, *, acks: str = "all"
    ) -> AppendResult:
        """Append one batch (one RPC, retried as needed) and return its offsets. Idempotent
        (see the module doc) unless the client was made with `idempotent=False` or
        `acks="none"`. `values`: bytes, or `replog.Record`s (key, headers, timestamp) for
        an envelope topic, where bytes become records without key (`formats.to_values`)."""
        try:
            envelope = self.topic_format(topic) == formats.ENVELOPE
            return self._append(topic, partition, formats.to_values(topic, values, envelope), acks)
        except TopicNotFoundError:
            self._formats.pop(topic, None)  # created again later, maybe with another format
            raise

    def _append(
        self, topic: str, partition: int, values: Sequence[bytes], acks: str
    ) -> AppendResult:
        req = log_pb2.AppendRequest(
            topic=topic, partition=partition, values=values, acks=calls.ACKS[acks]
        )

        plain = not self.idempotent or acks == "none" or not values
        # A plain append that timed out is not retried (its outcome is unknown): it gets the
        # longer deadline; an idempotent one is retried safely after one attempt deadline.
        deadline_s = self.commit_timeout_s if plain else self.attempt_timeout_s

        def call(node: Node) -> AppendResult:
            resp = node.log.Append(req, timeout=deadline_s)
            return AppendResult(resp.base_offset, resp.last_offset, resp.high_watermark)

        if plain:
            return self._call(call, topic, partition)
        if self.streaming:
            self._discover(topic)
            return self._shared_pipeline().submit(topic, partition, list(values), req.acks).result()
        self._discover(topic)
        # Sequence numbers are taken and the first attempt is sent under the partition's
        # lock, so that concurrent appends of this client reach the leader in sequence
        # order; their answers are awaited outside it (several batches in flight).
        with self._partition_lock(topic, partition):
            while True:
                identity = self.producer_identity()
                seq = self._sequences.reserve(identity, topic, partition, len(values))
                if seq is not None:
                    break
            identity.stamp(req, seq)
            node = self._node(self.routing.address(topic, partition))
            sent = [node.log.Append.future(req, timeout=self.attempt_timeout_s)]

        def attempt(node: Node) -> AppendResult:
            if not sent:  # a retry: the same request, sequence numbers included
                return call(node)
            resp = sent.pop().result()
            return AppendResult(resp.base_offset, resp.last_offset, resp.high_watermark)

        try:
            return self._call(attempt, topic, partition, idempotent=True)
        except DuplicateSequenceError:
            raise  # written before (a resumed writer's resend): the numbering holds
        except ReplogError:
            self._sequences.abandon(identity)
            raise

    def _partition_lock(self, topic: str, partition: int) -> threading.Lock:
        with self._lock:
            lock = self._partition_locks.get((topic, partition))
            if lock is None:
                lock = self._partition_locks[(topic, partition)] = threading.Lock()
            return lock

    def producer_identity(self) -> Identity:
        """This client's producer id and epoch (InitProducer on first use, and again after
        an append failed for good)."""
        with self._identity_lock:
            return self._sequences.identity or self.run(calls.init_producer(self))

    def stream(
        self, topic: str, partition: int, offset: int, *, max_bytes: int = 0
    ) -> Generator[log_pb2.StreamBatch, None, None]:
        """Raw `StreamBatch`es from `offset`, following the HW; reconnects on retriable errors.

        Closing the iterator cancels the stream.
        """
        self._discover(topic)
        resume = calls.StreamResume(self.retry, topic, partition, offset, max_bytes)
        while True:
            address = self.routing.address(topic, partition)
            call = self._node(address).log.StreamFrom(resume.request())
            try:
                for batch in call:
                    yield resume.advanced(batch)
                return  # the server ended the stream normally
            except grpc.RpcError as exc:
                err = self._failed(exc, address, idempotent=True)
                backoff_s = resume.backoff_s(err)
                if backoff_s is None:
                    raise err from None
                time.sleep(resume.pause_s(backoff_s, self._reroute(err, topic, partition)))
            finally:
                call.cancel()

    @overload
    def consumer(
        self,
        topic: str,
        partition: int = 0,
        offset: int | str = "earliest",
        *,
        from_time_ms: int | None = None,
    ) -> Consumer: ...

    @overload
    def consumer(
        self, topic: str | Sequence[str], *, group: str, **options: Unpack[GroupOptions]
    ) -> GroupConsumer: ...

    def consumer(
        self,
        topic: str | Sequence[str],
        partition: int = 0,
        offset: int | str = "earliest",
        *,
        group: str | None = None,
        from_time_ms: int | None = None,
        **options: Unpack[GroupOptions],
    ) -> Consumer | GroupConsumer:
        """One partition from `offset` (or from the first record at or after `from_time_ms`);
        or, with `group`, a member of that consumer group,
        which consumes the partitions of `topic` (or of several topics) the group gives it,
        from the group's committed offsets (`group_consumer.GroupConsumer`, whose keyword
        arguments `options` are)."""
        if group is not None:
            if partition or offset != "earliest" or from_time_ms is not None:
                raise ValueError("a group member's partitions and offsets come from its group")
            return GroupConsumer(self, topic, group, calls=self.groups, **options)
        if not isinstance(topic, str) or options:
            raise ValueError("one topic, without options, unless a group is given")
        return Consumer(self, topic, partition, offset, from_time_ms=from_time_ms)

    def pipeline(
        self, acks: str, *, partition_in_flight_max: int = 5, in_flight_bytes_max: int = 64 << 20
    ) -> Pipeline | None:
        """A new pipeline of idempotent batches over AppendStream (`append_stream.Pipeline`,
        several batches in flight per partition), or None where appends must not be
        pipelined: `streaming=False`, `idempotent=False` (a retry could reorder batches),
        or acks="none" (no answers to order by). Close it when done."""
        if not self.streaming or not self.idempotent or acks == "none":
            return None
        return Pipeline(
            self._append_streams(),
            self.routing,
            self._sequences,
            self.producer_identity,
            self._reroute,
            self.retry,
            partition_in_flight_max=partition_in_flight_max,
            in_flight_bytes_max=in_flight_bytes_max,
        )

    def _append_streams(self) -> AppendStreams:
        with self._lock:
            if self._streams is None:
                self._streams = AppendStreams(
                    lambda address: self._node(address).log, self.routing, self.attempt_timeout_s
                )
            return self._streams

    def _shared_pipeline(self) -> Pipeline:
        """The pipeline of `append` (one per client, shared by its threads)."""
        pipeline = self._pipeline
        if pipeline is None:
            made = self.pipeline("all", in_flight_bytes_max=self.in_flight_bytes_max)
            assert made is not None
            with self._lock:
                if self._pipeline is None:
                    self._pipeline, made = made, None
                pipeline = self._pipeline
            if made is not None:
                made.close()
        return pipeline

    # -- consumer groups (replog.v1.Groups) ----------------------------------------------

    @cached_property
    def groups(self) -> GroupCalls:
        """The Groups calls, routed to each group's coordinator (`groups.GroupCalls`)."""
        return GroupCalls(self)
