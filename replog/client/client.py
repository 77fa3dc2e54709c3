"""The synchronous Python client: admin calls, appends, fetches, streams, with routing.

`Client("127.0.0.1:7070")` opens one channel per node address. Produce and consume calls go
to the partition's leader (from `GetMetadata`, cached); a `NOT_LEADER` answer updates the
cache from the error's leader hint (or refetches metadata) before the retry. Every failure
surfaces as the typed `ReplogError` the server raised (`replog.rpc_errors`). Only
retriable errors are retried, with backoff (`RetryPolicy`).

TLS: `Client(address, tls=ClientTls(ca_file))` verifies the servers against `ca_file`;
`ClientTls(ca_file, cert_file, key_file)` also presents a client certificate (mutual TLS);
`token="..."` sends `authorization: Bearer <token>` with every call (TLS only).

Note on retries of Append: without idempotent producers (planned), a retried Append whose
first attempt did land (e.g. after a timeout) writes the batch twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeVar

import grpc

from replog import frames
from replog.client.consumer import Consumer
from replog.client.producer import Producer
from replog.client.results import (
    AppendResult,
    CorruptRange,
    FetchResult,
    Offsets,
    PartitionInfo,
    RawFetch,
    ReplicaStatus,
)
from replog.client.retry import RetryPolicy, call_with_retry
from replog.errors import (
    DeadlineExceededError,
    LeaderUnknownError,
    NotLeaderError,
    ReplogError,
    TopicExistsError,
    UnavailableError,
)
from replog.rpc_errors import from_rpc_error
from replog.tls import ClientTls, channel
from replog.v1 import acl_pb2, acl_pb2_grpc, admin_pb2, admin_pb2_grpc, log_pb2, log_pb2_grpc

T = TypeVar("T")
MESSAGE_BYTES_MAX = 4 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
    ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
    # A node that stops answering (paused, hung, cut off) fails open calls with UNAVAILABLE
    # within ~15 s instead of at their deadline, so they are retried elsewhere.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
]
ACKS = {"none": log_pb2.ACKS_NONE, "leader": log_pb2.ACKS_LEADER, "all": log_pb2.ACKS_ALL}


def _acl(principal: str, operation: str, topic: str, prefix: bool, cluster: bool) -> Any:
    if cluster == bool(topic):
        raise ValueError("an ACL is for a topic (topic=...) or for the cluster (cluster=True)")
    return acl_pb2.Acl(
        principal=principal,
        resource_type="cluster" if cluster else "topic",
        resource_name=topic,
        prefix=prefix,
        operation=operation,
    )


def _timed_out(err: ReplogError) -> bool:
    """A retriable stand-in for a read's client deadline (see `Client._call`)."""
    return err.metadata.get("grpc_code") == "DEADLINE_EXCEEDED"


class _Node:
    def __init__(self, address: str, tls: ClientTls | None, token: str | None) -> None:
        self.address = address
        self.channel = channel(address, tls, CHANNEL_OPTIONS, token)
        self.acls = acl_pb2_grpc.AclsStub(self.channel)  # type: ignore[no-untyped-call]
        self.log = log_pb2_grpc.LogStub(self.channel)  # type: ignore[no-untyped-call]
        self.admin = admin_pb2_grpc.AdminStub(self.channel)  # type: ignore[no-untyped-call]


class Client:
    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        tls: ClientTls | None = None,
        token: str | None = None,
    ) -> None:
        if token is not None and tls is None:
            raise ValueError(
                "a bearer token needs TLS (tls=ClientTls(ca_file)): never in the clear"
            )
        self.tls = tls
        self.token = token
        # Several comma-separated bootstrap addresses: admin calls move to the next one when
        # the current one is unreachable.
        self.bootstraps = [a.strip() for a in address.split(",") if a.strip()]
        self.bootstrap = self.bootstraps[0]
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self._lock = threading.Lock()
        self._nodes: dict[str, _Node] = {}
        self._leaders: dict[tuple[str, int], str] = {}  # (topic, partition) -> address
        self._node(address)

    # -- plumbing ---------------------------------------------------------------------------

    def _node(self, address: str) -> _Node:
        with self._lock:
            node = self._nodes.get(address)
            if node is None:
                node = self._nodes[address] = _Node(address, self.tls, self.token)
            return node

    def _leader(self, topic: str, partition: int) -> _Node:
        address = self._leaders.get((topic, partition), self.bootstrap)
        return self._node(address)

    def _call(
        self,
        fn: Callable[[], T],
        topic: str | None = None,
        partition: int = 0,
        *,
        idempotent: bool = False,
    ) -> T:
        """`fn` with typed errors, retries and routing updates. A node that does not answer
        before the deadline (hung, paused, cut off) is dropped from routing; an `idempotent`
        call (a read) is then retried elsewhere, any other is raised: its outcome is unknown."""

        def attempt() -> T:
            try:
                return fn()
            except grpc.RpcError as exc:
                err = from_rpc_error(exc)
                if isinstance(err, DeadlineExceededError):
                    self._next_bootstrap(topic, partition)
                    if idempotent:
                        raise UnavailableError(
                            f"no answer before the deadline; trying another node ({err})",
                            grpc_code="DEADLINE_EXCEEDED",
                        ) from None
                raise err from None

        return call_with_retry(
            attempt, self.retry, lambda err: self._reroute(err, topic, partition)
        )

    def _reroute(self, err: ReplogError, topic: str | None, partition: int) -> bool:
        """Update routing after a retriable error; True when the retry goes to a newly named
        leader (worth trying at once)."""
        if isinstance(err, NotLeaderError) and topic is not None:
            return self._on_not_leader(topic, partition, err)
        if isinstance(err, LeaderUnknownError) and topic is not None:
            # This replica is between leaders; another node may already know the new one.
            self._leaders.pop((topic, partition), None)
            if len(self.bootstraps) > 1:
                self._next_bootstrap(topic, partition)
        elif isinstance(err, UnavailableError) and not _timed_out(err):
            self._next_bootstrap(topic, partition)  # (a deadline has moved on already)
        return False

    def _next_bootstrap(self, topic: str | None, partition: int) -> None:
        """The current node is unreachable: forget it as a leader, use the next bootstrap."""
        if topic is not None:
            self._leaders.pop((topic, partition), None)
        if len(self.bootstraps) < 2:
            return
        i = self.bootstraps.index(self.bootstrap) if self.bootstrap in self.bootstraps else -1
        self.bootstrap = self.bootstraps[(i + 1) % len(self.bootstraps)]

    def _on_not_leader(self, topic: str, partition: int, err: NotLeaderError) -> bool:
        """Route to the leader the error names (True: a new address, worth retrying at once)
        or refetch metadata."""
        if err.leader_address:
            before = self._leaders.get((topic, partition), self.bootstrap)
            self._leaders[(topic, partition)] = err.leader_address
            return err.leader_address != before
        self.refresh_metadata([topic])
        return False

    def refresh_metadata(self, topics: Sequence[str] = ()) -> admin_pb2.Metadata:
        """Fetch nodes and partition leaders; update the leader cache."""
        meta: admin_pb2.Metadata = self._call(
            lambda: self._node(self.bootstrap).admin.GetMetadata(
                admin_pb2.GetMetadataRequest(topics=list(topics)), timeout=self.timeout_s
            ),
            idempotent=True,
        )
        addresses = {n.id: n.address for n in meta.nodes}
        for t in meta.topics:
            for p in t.partitions:
                if p.leader_id in addresses:
                    self._leaders[(t.name, p.partition)] = addresses[p.leader_id]
                elif p.replicas and p.replicas[0] in addresses:
                    # The answering node holds no replica: a replica knows the leader.
                    self._leaders[(t.name, p.partition)] = addresses[p.replicas[0]]
        return meta

    def close(self) -> None:
        with self._lock:
            for node in self._nodes.values():
                node.channel.close()
            self._nodes.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- admin ------------------------------------------------------------------------------

    def _admin(self) -> Any:
        return self._node(self.bootstrap).admin

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 0) -> None:
        req = admin_pb2.CreateTopicRequest(
            name=name, partitions=partitions, replication_factor=replication_factor
        )
        attempts = 0

        def call() -> None:
            nonlocal attempts
            attempts += 1
            try:
                self._admin().CreateTopic(req, timeout=self.timeout_s)
            except grpc.RpcError as exc:
                err = from_rpc_error(exc)
                if attempts > 1 and isinstance(err, TopicExistsError):
                    return  # an earlier attempt whose answer was lost created it
                raise err from None

        self._call(call)

    def delete_topic(self, name: str) -> None:
        req = admin_pb2.DeleteTopicRequest(name=name)
        self._call(lambda: self._admin().DeleteTopic(req, timeout=self.timeout_s))

    # -- ACLs (replog.v1.Acls): principal x resource x operation -----------------------------

    def add_acl(
        self,
        principal: str,
        operation: str,
        *,
        topic: str = "",
        prefix: bool = False,
        cluster: bool = False,
    ) -> None:
        """Allow `principal` ("User:alice") `operation` on `topic` (a prefix with `prefix`)
        or on the cluster."""
        acl = _acl(principal, operation, topic, prefix, cluster)
        self._call(lambda: self._node(self.bootstrap).acls.AddAcl(acl, timeout=self.timeout_s))

    def remove_acl(
        self,
        principal: str,
        operation: str,
        *,
        topic: str = "",
        prefix: bool = False,
        cluster: bool = False,
    ) -> None:
        acl = _acl(principal, operation, topic, prefix, cluster)
        self._call(lambda: self._node(self.bootstrap).acls.RemoveAcl(acl, timeout=self.timeout_s))

    def list_acls(self) -> list[dict[str, object]]:
        resp = self._call(
            lambda: self._node(self.bootstrap).acls.ListAcls(
                acl_pb2.ListAclsRequest(), timeout=self.timeout_s
            ),
            idempotent=True,
        )
        return [
            {
                "principal": a.principal,
                "resource_type": a.resource_type,
                "resource_name": a.resource_name,
                "prefix": a.prefix,
                "operation": a.operation,
            }
            for a in resp.acls
        ]

    def list_topics(self) -> dict[str, int]:
        resp = self._call(
            lambda: self._admin().ListTopics(admin_pb2.ListTopicsRequest(), timeout=self.timeout_s),
            idempotent=True,
        )
        return {t.name: t.partitions for t in resp.topics}

    def describe_topic(self, name: str) -> list[PartitionInfo]:
        req = admin_pb2.DescribeTopicRequest(name=name)
        resp = self._call(
            lambda: self._admin().DescribeTopic(req, timeout=self.timeout_s), idempotent=True
        )
        return [
            PartitionInfo(
                partition=p.partition,
                leader_id=None if p.leader_id < 0 else p.leader_id,
                replicas=tuple(p.replicas),
                log_start_offset=p.log_start_offset,
                log_end_offset=p.log_end_offset,
                high_watermark=p.high_watermark,
                size_bytes=p.size_bytes,
                segment_count=p.segment_count,
                epoch=p.epoch,
                replica_status=tuple(
                    ReplicaStatus(
                        r.replica_id, r.log_end_offset, r.lag_records, r.last_fetch_ms_ago
                    )
                    for r in p.replica_status
                ),
                corrupt_ranges=tuple(
                    CorruptRange(
                        c.replica_id,
                        c.segment,
                        c.start_position,
                        c.end_position,
                        c.first_offset,
                        c.end_offset,
                        c.detail,
                    )
                    for c in p.corrupt_ranges
                ),
            )
            for p in resp.partitions
        ]

    def list_offsets(self, topic: str, partitions: Sequence[int] = ()) -> list[Offsets]:
        req = admin_pb2.ListOffsetsRequest(topic=topic, partitions=list(partitions))
        resp = self._call(
            lambda: self._admin().ListOffsets(req, timeout=self.timeout_s), idempotent=True
        )
        return [
            Offsets(p.partition, p.earliest, p.latest, p.log_end_offset) for p in resp.partitions
        ]

    def transfer_leadership(self, topic: str, partition: int, to: int = 0) -> int:
        """Hand the partition's leadership to voter `to` (0: the freshest caught-up one);
        returns the node it went to once the old leader stepped down."""
        req = admin_pb2.TransferLeadershipRequest(
            topic=topic, partition=partition, target_node_id=to
        )
        resp = self._call(
            lambda: self._admin().TransferLeadership(req, timeout=self.timeout_s),
            idempotent=False,
        )
        return int(resp.leader_id)

    def partition_count(self, topic: str) -> int:
        topics = self.list_topics()
        if topic not in topics:
            from replog.errors import TopicNotFoundError

            raise TopicNotFoundError(f"topic {topic!r} does not exist", topic=topic)
        return topics[topic]

    # -- records ----------------------------------------------------------------------------

    def append(
        self, topic: str, partition: int, values: Sequence[bytes], *, acks: str = "all"
    ) -> AppendResult:
        """Append one batch (one RPC) and return its offsets."""
        req = log_pb2.AppendRequest(
            topic=topic, partition=partition, values=values, acks=ACKS[acks]
        )

        def call() -> AppendResult:
            resp = self._leader(topic, partition).log.Append(req, timeout=self.timeout_s)
            return AppendResult(resp.base_offset, resp.last_offset, resp.high_watermark)

        return self._call(call, topic, partition)

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = 0,
        max_wait_ms: int = 0,
    ) -> FetchResult:
        """Committed records from `offset` (long poll up to `max_wait_ms` at the HW)."""
        raw = self.fetch_raw(topic, partition, offset, max_bytes=max_bytes, max_wait_ms=max_wait_ms)
        return FetchResult(
            frames.decode(raw.frames).data_records(),
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
        timeout_s = self.timeout_s + max_wait_ms / 1000

        def call() -> RawFetch:
            resp = self._leader(topic, partition).log.Fetch(req, timeout=timeout_s)
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
        attempt = 0
        rerouted = False
        while True:
            req = log_pb2.StreamFromRequest(
                topic=topic, partition=partition, offset=offset, max_bytes=max_bytes
            )
            call = self._leader(topic, partition).log.StreamFrom(req)
            try:
                for batch in call:
                    attempt = 0
                    offset = batch.next_offset
                    yield batch
                return  # the server ended the stream normally
            except grpc.RpcError as exc:
                err = from_rpc_error(exc)
                attempt += 1
                if not err.retriable or attempt >= self.retry.attempts_max:
                    raise err from None
                # at once after a redirect to a new leader, once in a row (as `_call` does)
                rerouted = self._reroute(err, topic, partition) and not rerouted
                if not rerouted:
                    time.sleep(self.retry.backoff_s(attempt))
            finally:
                call.cancel()

    def consumer(self, topic: str, partition: int = 0, offset: int | str = "earliest") -> Consumer:
        return Consumer(self, topic, partition, offset)

    def producer(self, topic: str, **options: Any) -> Producer:
        return Producer(self, topic, **options)
