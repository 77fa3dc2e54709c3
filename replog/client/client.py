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

import contextlib
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from functools import cached_property
from typing import Any, TypeVar, Unpack, overload

import grpc

from replog.client import connect, environment, formats
from replog.client.acl_calls import AclCalls
from replog.client.append_stream import AppendStreams, Pipeline
from replog.client.channels import (
    ATTEMPT_TIMEOUT_S,
    CHANNEL_OPTIONS,
    COMMIT_TIMEOUT_S,
    MESSAGE_BYTES_MAX,
    channel_options,
)
from replog.client.consumer import Consumer
from replog.client.factories import Factories, GroupOptions
from replog.client.group_consumer import GroupConsumer
from replog.client.groups import CommittedOffset, GroupCalls, GroupDescription, GroupSummary
from replog.client.results import (
    AppendResult,
    FetchResult,
    Offsets,
    PartitionInfo,
    RawFetch,
    TopicConfig,
)
from replog.client.retry import Attempts, RetryPolicy, call_with_retry, one_try_each
from replog.client.routing import (
    Routing,
    needs_metadata,
    split_addresses,
    topic_partition_moved,
)
from replog.client.sequences import Identity, Sequences
from replog.client.wire import partition_info
from replog.errors import (
    ConnectFailedError,
    DuplicateSequenceError,
    NotLeaderError,
    ReplogError,
    TopicExistsError,
    TopicNotFoundError,
)
from replog.rpc_errors import from_rpc_error
from replog.tls import ClientTls, channel
from replog.v1 import acl_pb2_grpc, admin_pb2, admin_pb2_grpc, log_pb2, log_pb2_grpc

T = TypeVar("T")
__all__ = [
    "ATTEMPT_TIMEOUT_S",
    "CHANNEL_OPTIONS",
    "MESSAGE_BYTES_MAX",
    "Client",
    "Node",
    "partition_info",
]
ACKS = {"none": log_pb2.ACKS_NONE, "leader": log_pb2.ACKS_LEADER, "all": log_pb2.ACKS_ALL}


def metadata_request(topic: str | None) -> admin_pb2.GetMetadataRequest:
    """What a client asks to learn the cluster: the topic it is about to use (its leaders
    come with the nodes), or every topic for a call without one (`CreateTopic` names a
    topic that does not exist yet)."""
    return admin_pb2.GetMetadataRequest(topics=[topic] if topic else [])


class Node:
    """One node's channel and stubs (on an asyncio channel, the stubs' calls are awaited)."""

    def __init__(self, address: str, channel: Any) -> None:
        self.address = address
        self.channel = channel
        self.acls = acl_pb2_grpc.AclsStub(channel)  # type: ignore[no-untyped-call]
        self.log = log_pb2_grpc.LogStub(channel)  # type: ignore[no-untyped-call]
        self.admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]


class Client(Factories, AclCalls):
    """The synchronous client of a replog cluster (see the module doc): admin calls
    (`create_topic`, `describe_topic`, `list_offsets`, ...), record calls (`append`,
    `fetch`, `stream`), and the factories of producers (`producer`), consumers
    (`consumer(topic, partition)` or `consumer(topic, group=...)`) and assigned consumers
    (`assigned_consumer`). Thread-safe; `close()` (or `with`) ends its channels."""

    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = 30.0,
        attempt_timeout_s: float = ATTEMPT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        tls: ClientTls | None = None,
        token: str | None = None,
        idempotent: bool = True,
        producer_name: str = "",
        producer_resume: bool = False,
        streaming: bool = True,
    ) -> None:
        if token is not None and tls is None:
            raise ValueError(
                "a bearer token needs TLS (tls=ClientTls(ca_file)): never in the clear"
            )
        self.tls = tls
        self.token = token
        # One or several comma-separated bootstrap addresses; more nodes come from metadata.
        self.routing = Routing(split_addresses(address))
        if attempt_timeout_s <= 0 or timeout_s <= 0:
            raise ValueError("timeout_s and attempt_timeout_s must be > 0")
        self.timeout_s = timeout_s
        self.attempt_timeout_s = min(attempt_timeout_s, timeout_s)
        self.commit_timeout_s = max(self.attempt_timeout_s, min(timeout_s, COMMIT_TIMEOUT_S))
        self.retry = retry or RetryPolicy()
        self.idempotent = idempotent
        self.producer_name = producer_name
        self.producer_resume = producer_resume
        self._sequences = Sequences()
        self._identity_lock = threading.Lock()
        self._partition_locks: dict[tuple[str, int], threading.Lock] = {}
        self._lock = threading.Lock()
        self._discovering = threading.Lock()
        self._nodes: dict[str, Node] = {}
        self._formats: dict[str, str] = {}  # topic -> "raw" | "envelope" (formats.py)
        # Idempotent appends go over AppendStream (append_stream.py) unless streaming=False.
        self.streaming = streaming
        self._streams: AppendStreams | None = None
        self._pipeline: Pipeline | None = None
        self._node(self.routing.current)  # bad TLS files fail here, not at the first call

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **options: Any) -> Client:
        """A client configured as the `replog` CLI is: `REPLOG_ADDRESS` (default
        127.0.0.1:7070), `REPLOG_TLS_CA`/`_CERT`/`_KEY`/`_SERVER_NAME`, `REPLOG_TOKEN`,
        `REPLOG_ATTEMPT_TIMEOUT` (`environment.from_env`; `replog dev-cluster --env-file`
        writes them). `options` are the constructor's keywords and win over the env."""
        conn = environment.from_env(env)
        given: dict[str, Any] = {"tls": conn.tls, "token": conn.token}
        given["attempt_timeout_s"] = conn.attempt_timeout_s
        return cls(conn.address, **{**given, **options})

    # -- plumbing ---------------------------------------------------------------------------

    def _node(self, address: str) -> Node:
        with self._lock:
            node = self._nodes.get(address)
            if node is None:
                options = channel_options(self.attempt_timeout_s)
                made = channel(address, self.tls, options, self.token)
                node = self._nodes[address] = Node(address, made)
            return node

    def _leader(self, topic: str, partition: int) -> Node:
        return self._node(self.routing.address(topic, partition))

    def _call(
        self,
        fn: Callable[[Node], T],
        topic: str | None = None,
        partition: int = 0,
        *,
        idempotent: bool = False,
        discover: bool = True,
        retry: RetryPolicy | None = None,
    ) -> T:
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
                err = connect.check(
                    from_rpc_error(exc), address, self.tls is not None, self.routing
                )
                raise self.routing.failed(err, address, idempotent=idempotent) from None
            self.routing.answered(address)
            return out

        return call_with_retry(
            attempt, retry or self.retry, lambda err: self._reroute(err, topic, partition)
        )

    def _discover(self, topic: str | None) -> None:
        """Before the first call: learn every node of the cluster (best effort: one try per
        bootstrap address; whatever else fails, the call itself reports)."""
        if self.routing.discovered or not self._discovering.acquire(blocking=False):
            return
        try:
            policy = one_try_each(len(self.routing.bootstraps), self.retry)
            self._refresh(metadata_request(topic), policy)
        except ConnectFailedError:
            raise  # no node answers, for a cause retrying does not change: say so now
        except ReplogError:
            pass
        finally:
            self._discovering.release()

    def _reroute(self, err: ReplogError, topic: str | None, partition: int) -> bool:
        """Update routing after a retriable error; True when the retry goes to another node
        (worth trying at once). After NOT_LEADER without a usable hint, LEADER_UNKNOWN or a
        node that did not answer, the partition's leader is asked of the metadata again
        (best effort, one try per node: `routing.Routing.learn` skips a suspect leader)."""
        rerouted = self.routing.reroute(err, topic, partition)
        if topic is not None and needs_metadata(err, self.routing.address(topic, partition)):
            policy = one_try_each(len(self.routing.known), self.retry)
            with contextlib.suppress(ReplogError):  # the retry itself reports
                self._refresh(metadata_request(topic), policy)
            return rerouted or topic_partition_moved(self.routing, topic, partition)
        return rerouted

    def _on_not_leader(self, topic: str, partition: int, err: NotLeaderError) -> bool:
        """Route to the leader the error names (True: a new address, worth retrying at once)
        or refetch metadata."""
        return self._reroute(err, topic, partition)

    @property
    def known_nodes(self) -> tuple[str, ...]:
        """Every address this client may call: the bootstraps and the nodes metadata named."""
        return self.routing.known

    def refresh_metadata(self, topics: Sequence[str] = ()) -> admin_pb2.Metadata:
        """Fetch nodes and partition leaders; update the known nodes and the leader cache."""
        return self._refresh(admin_pb2.GetMetadataRequest(topics=list(topics)), self.retry)

    def _refresh(self, req: admin_pb2.GetMetadataRequest, retry: RetryPolicy) -> admin_pb2.Metadata:
        meta: admin_pb2.Metadata = self._call(
            lambda node: node.admin.GetMetadata(req, timeout=self.attempt_timeout_s),
            idempotent=True,
            discover=False,
            retry=retry,
        )
        self.routing.learn(meta)
        formats.learn(self._formats, meta)
        return meta

    def topic_format(self, topic: str) -> str:
        """ "raw" or "envelope" (from metadata, asked once per topic; UNKNOWN_TOPIC if none)."""
        known = self._formats.get(topic)
        if known is None:
            self.refresh_metadata([topic])
            known = self._formats.get(topic, formats.RAW)
        return known

    def topic_config(self, topic: str) -> tuple[str, str]:
        """(format, timestamp_type) of `topic`, asked from metadata now."""
        return formats.config_in(self.refresh_metadata([topic]), topic)

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

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 0,
        *,
        format: str = formats.ENVELOPE,
        timestamp_type: str = formats.CREATE_TIME,
        configs: Mapping[str, str] | None = None,
    ) -> None:
        """`format`: "raw" (values are your bytes) or "envelope" (records with key,
        timestamp and headers); `timestamp_type`: "create_time" (the producer's) or
        "log_append_time" (the leader's clock); `configs`: docs/api.md, Topic configs."""
        args = (name, partitions, replication_factor, format, timestamp_type, configs)
        req, attempts = formats.create_request(*args), 0

        def call(node: Node) -> None:
            nonlocal attempts
            attempts += 1
            node.admin.CreateTopic(req, timeout=self.commit_timeout_s)

        try:
            # A retry after an attempt that got no answer is safe: TOPIC_ALREADY_EXISTS then
            # means that attempt created it.
            self._call(call, idempotent=True)
        except TopicExistsError:
            if attempts > 1:
                return  # an earlier attempt whose answer was lost created it
            raise

    def delete_topic(self, name: str) -> None:
        req = admin_pb2.DeleteTopicRequest(name=name)
        self._call(lambda node: node.admin.DeleteTopic(req, timeout=self.commit_timeout_s))

    def create_partitions(self, topic: str, partitions: int) -> int:
        """Grow `topic` to `partitions` (never shrink); returns the new count. Keyed records
        of later sends may go to other partitions (docs/api.md): producers made after the
        call use the new count, one made before keeps the count it learned."""
        req = admin_pb2.CreatePartitionsRequest(topic=topic, partitions=partitions)
        timeout = self.commit_timeout_s
        return int(self._call(lambda n: n.admin.CreatePartitions(req, timeout=timeout)).partitions)

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

    def list_topics(self) -> dict[str, int]:
        resp = self._call(
            lambda node: node.admin.ListTopics(
                admin_pb2.ListTopicsRequest(), timeout=self.attempt_timeout_s
            ),
            idempotent=True,
        )
        return {t.name: t.partitions for t in resp.topics}

    def describe_topic(self, name: str) -> list[PartitionInfo]:
        req = admin_pb2.DescribeTopicRequest(name=name)
        resp = self._call(
            lambda node: node.admin.DescribeTopic(req, timeout=self.attempt_timeout_s),
            idempotent=True,
        )
        return [partition_info(p) for p in resp.partitions]

    def list_offsets(
        self, topic: str, partitions: Sequence[int] = (), *, timestamp_ms: int | None = None
    ) -> list[Offsets]:
        """Log start, HW and LEO per partition (default: all); with `timestamp_ms`, also
        the first committed offset whose record timestamp is >= it (`offset_for_timestamp`;
        the HW when there is none)."""
        req = formats.offsets_request(topic, partitions, timestamp_ms)
        # Routed like the topic's reads: to a leader of it when known, and a LEADER_UNKNOWN
        # answer (a node cut off from the others) moves the retry to the next node.
        resp = self._call(
            lambda node: node.admin.ListOffsets(req, timeout=self.attempt_timeout_s),
            topic,
            partitions[0] if partitions else 0,
            idempotent=True,
        )
        return formats.offsets_of(resp, timestamp_ms is not None)

    def offsets_for_times(self, topic: str, times: Mapping[int, int]) -> dict[int, int]:
        """{partition: timestamp_ms} -> {partition: the first committed offset whose record
        timestamp is >= it, or the partition's end (HW) when none is}. Kafka's
        offsetsForTimes, except that "none" answers the end offset, where a reader that
        starts waits for newer records. Record timestamps: docs/api.md, ListOffsets by time."""
        out: dict[int, int] = {}
        for timestamp_ms, partitions in formats.by_timestamp(times).items():
            for o in self.list_offsets(topic, partitions, timestamp_ms=timestamp_ms):
                assert o.offset_for_timestamp is not None
                out[o.partition] = o.offset_for_timestamp
        return out

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
            topic=topic, partition=partition, values=values, acks=ACKS[acks]
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
            identity = self._sequences.identity
            if identity is None:
                req = log_pb2.InitProducerRequest(
                    name=self.producer_name, resume=self.producer_resume
                )
                resp = self._call(
                    lambda node: node.log.InitProducer(req, timeout=self.commit_timeout_s)
                )
                identity = Identity(resp.producer_id, resp.producer_epoch)
                self._sequences.adopt(identity)
            return identity

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = 0,
        max_wait_ms: int = 0,
    ) -> FetchResult:
        """Committed records from `offset` (long poll up to `max_wait_ms` at the HW); on an
        envelope topic `records` are decoded envelopes (`records.DecodedRecords`)."""
        raw = self.fetch_raw(topic, partition, offset, max_bytes=max_bytes, max_wait_ms=max_wait_ms)
        return FetchResult(
            formats.decode(raw.frames, self.topic_format(topic) == formats.ENVELOPE),
            raw.high_watermark,
            raw.log_start_offset,
            raw.next_offset,
        )

    def fetch_raw(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = 0,
        max_wait_ms: int = 0,
    ) -> RawFetch:
        """Like `fetch`, but the frames stay raw bytes (control records included): for
        columnar decoders such as the Spark source, which must not build an object per record."""
        req = log_pb2.FetchRequest(
            topic=topic,
            partition=partition,
            offset=offset,
            max_bytes=max_bytes,
            max_wait_ms=max_wait_ms,
        )
        timeout_s = self.attempt_timeout_s + max_wait_ms / 1000

        def call(node: Node) -> RawFetch:
            resp = node.log.Fetch(req, timeout=timeout_s)
            return RawFetch(
                resp.frames, resp.high_watermark, resp.log_start_offset, resp.next_offset
            )

        return self._call(call, topic, partition, idempotent=True)

    def stream(
        self, topic: str, partition: int, offset: int, *, max_bytes: int = 0
    ) -> Generator[log_pb2.StreamBatch, None, None]:
        """Raw `StreamBatch`es from `offset`, following the HW; reconnects on retriable errors.

        Closing the iterator cancels the stream.
        """
        self._discover(topic)
        attempts = Attempts(self.retry)
        while True:
            req = log_pb2.StreamFromRequest(
                topic=topic, partition=partition, offset=offset, max_bytes=max_bytes
            )
            address = self.routing.address(topic, partition)
            call = self._node(address).log.StreamFrom(req)
            progressed = False
            try:
                for batch in call:
                    progressed = True
                    offset = batch.next_offset
                    yield batch
                return  # the server ended the stream normally
            except grpc.RpcError as exc:
                err = connect.check(
                    from_rpc_error(exc), address, self.tls is not None, self.routing
                )
                err = self.routing.failed(err, address, idempotent=True)
                if progressed:  # the budget counts failures in a row
                    attempts = Attempts(self.retry)
                backoff_s = attempts.budget_left(err)
                if backoff_s is None:
                    raise err from None
                pause_s = attempts.pause_s(backoff_s, self._reroute(err, topic, partition))
                if pause_s:
                    time.sleep(pause_s)
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
            made = self.pipeline("all")
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

    def list_groups(self) -> list[GroupSummary]:
        return self.groups.list()

    def describe_group(self, group: str) -> GroupDescription:
        """Members, their partitions, and each partition's committed offset and lag."""
        return self.groups.describe(group)

    def delete_group(self, group: str) -> None:
        """Drop the group's committed offsets (GROUP_NOT_EMPTY while it has members)."""
        self.groups.delete(group)

    def committed_offsets(
        self, group: str, partitions: Sequence[tuple[str, int]] = ()
    ) -> list[CommittedOffset]:
        """The group's committed offsets of `partitions` (default: all it has)."""
        return self.groups.committed(group, partitions)

    def commit_offsets(
        self, group: str, offsets: Mapping[tuple[str, int], int | tuple[int, str]]
    ) -> None:
        """Commit offsets outside membership (tools, a job that assigns partitions itself):
        refused with GROUP_NOT_EMPTY while the group has members."""
        self.groups.commit(group, offsets)
