"""The asyncio twin of `Client`: the same calls, awaited, over `grpc.aio` channels.

Routing and retries as in `Client` (`routing.Routing`, `retry.acall_with_retry`): one
bootstrap address is enough (the client learns every node from metadata before its first
call), a node that does not answer is passed over, data calls go to the partition's
leader (NOT_LEADER hints followed), and retriable errors are retried within the
`RetryPolicy`. No producer batching here. Errors come back as the same typed
`ReplogError`s (`replog.rpc_errors`).

Idempotent appends (the default) travel over AppendStream, one stream per node shared by
the client's tasks (`aio_append_stream`): concurrent appends to a partition are pipelined,
up to 5 in flight, in order by their sequence numbers. `streaming=False` sends one unary
Append per batch instead (as do non-idempotent and acks="none" appends), and so does a
node that does not know AppendStream (UNIMPLEMENTED: an older server).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from functools import cached_property
from typing import Any, TypeVar, Unpack

import grpc

from replog.client import connect, environment, formats
from replog.client.aio_append_stream import AsyncAppendStreams
from replog.client.aio_groups import AsyncGroupCalls, AsyncGroupConsumer
from replog.client.aio_pipeline import Answered, AsyncPipeline
from replog.client.aio_producer import AsyncProducer
from replog.client.assigned_consumer import AsyncAssignedConsumer
from replog.client.channels import ATTEMPT_TIMEOUT_S, COMMIT_TIMEOUT_S, channel_options
from replog.client.client import ACKS, Node, metadata_request
from replog.client.consumer import STREAM_REPLY_BYTES
from replog.client.factories import AssignedOptions, GroupOptions
from replog.client.groups import CommittedOffset, GroupDescription, GroupSummary
from replog.client.pipeline_rules import unimplemented
from replog.client.produce_rules import AsyncProducerOptions
from replog.client.results import AppendResult, FetchResult, Offsets, PartitionInfo
from replog.client.retry import Attempts, RetryPolicy, acall_with_retry, one_try_each
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
    InvalidArgumentError,
    ReplogError,
    TopicExistsError,
    TopicNotFoundError,
)
from replog.rpc_errors import from_rpc_error
from replog.tls import ClientTls, aio_channel
from replog.v1 import admin_pb2, log_pb2

T = TypeVar("T")


class AsyncClient:
    """The asyncio twin of `Client` (see the module doc): the same calls, awaited; its
    producers are `AsyncProducer`s (`producer`), its group consumers `AsyncGroupConsumer`s
    (`consumer(topic, group=...)`), its assigned consumers `AsyncAssignedConsumer`s.
    `await close()` (or `async with`) ends its channels."""

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
        in_flight_bytes_max: int = 64 * 1024 * 1024,
    ) -> None:
        """`in_flight_bytes_max`: the bytes of appends sent and not answered yet, over all
        partitions (an append waits while another would pass it; one alone always goes).
        `timeout_s`, `attempt_timeout_s`: as `Client`'s."""
        if in_flight_bytes_max < 1:
            raise InvalidArgumentError("in_flight_bytes_max >= 1")
        if attempt_timeout_s <= 0 or timeout_s <= 0:
            raise ValueError("timeout_s and attempt_timeout_s must be > 0")
        self.attempt_timeout_s = min(attempt_timeout_s, timeout_s)
        self.commit_timeout_s = max(self.attempt_timeout_s, min(timeout_s, COMMIT_TIMEOUT_S))
        self.address = address
        self.streaming = streaming
        self.idempotent = idempotent
        self.producer_name = producer_name
        self.producer_resume = producer_resume
        self._sequences = Sequences()
        self._identity_lock = asyncio.Lock()
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.tls = tls
        self.token = token
        self.routing = Routing(split_addresses(address))
        self._discovering = False
        self._nodes: dict[str, Node] = {}
        self._formats: dict[str, str] = {}  # topic -> "raw" | "envelope" (formats.py)
        self._streams = AsyncAppendStreams(self.routing, self.attempt_timeout_s)
        self._pipeline = AsyncPipeline(
            self._send,
            self._reroute,
            self.producer_identity,
            self._sequences,
            self.retry,
            in_flight_bytes_max=in_flight_bytes_max,
        )
        self._node(self.routing.current)  # bad TLS files fail here, not at the first call

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **options: Any) -> AsyncClient:
        """As `Client.from_env`: `REPLOG_ADDRESS`, `REPLOG_TLS_*`, `REPLOG_TOKEN`,
        `REPLOG_ATTEMPT_TIMEOUT`; `options` (the constructor's keywords) win over the env."""
        conn = environment.from_env(env)
        given: dict[str, Any] = {"tls": conn.tls, "token": conn.token}
        given["attempt_timeout_s"] = conn.attempt_timeout_s
        return cls(conn.address, **{**given, **options})

    # -- plumbing ---------------------------------------------------------------------------

    def _node(self, address: str) -> Node:
        node = self._nodes.get(address)
        if node is None:
            options = channel_options(self.attempt_timeout_s)
            made = aio_channel(address, self.tls, options, self.token)
            node = self._nodes[address] = Node(address, made)
        return node

    async def _call(
        self,
        fn: Callable[[Node], Awaitable[T]],
        topic: str | None = None,
        partition: int = 0,
        *,
        idempotent: bool = False,
        discover: bool = True,
        retry: RetryPolicy | None = None,
    ) -> T:
        """`fn(node)` with typed errors, retries and routing (see `Client._call`)."""
        if discover:
            await self._discover(topic)

        async def attempt() -> T:
            address = self.routing.address(topic, partition)
            try:
                out = await fn(self._node(address))
            except grpc.RpcError as exc:
                err = await self._checked(exc, address)
                raise self.routing.failed(err, address, idempotent=idempotent) from None
            self.routing.answered(address)
            return out

        async def reroute(err: ReplogError) -> bool:
            return await self._reroute(err, topic, partition)

        return await acall_with_retry(attempt, retry or self.retry, reroute)

    async def _checked(self, exc: grpc.RpcError, address: str) -> ReplogError:
        """The typed error of a failed attempt (`connect.check`; its probes block, so they
        run in a thread, and only before the first contact with the cluster)."""
        err = from_rpc_error(exc)
        if not connect.transport_failure(err):
            self.routing.answered(address)
            return err
        tls = self.tls is not None
        if self.routing.reached:
            return connect.check(err, address, tls, self.routing)
        return await asyncio.to_thread(connect.check, err, address, tls, self.routing)

    async def _discover(self, topic: str | None) -> None:
        """Before the first call: learn every node of the cluster (see `Client._discover`)."""
        if self.routing.discovered or self._discovering:
            return
        self._discovering = True
        try:
            policy = one_try_each(len(self.routing.bootstraps), self.retry)
            await self._refresh(metadata_request(topic), policy)
        except ConnectFailedError:
            raise  # no node answers, for a cause retrying does not change: say so now
        except ReplogError:
            pass
        finally:
            self._discovering = False

    async def _reroute(self, err: ReplogError, topic: str | None, partition: int) -> bool:
        """See `Client._reroute`: the partition's leader is asked of the metadata again after
        NOT_LEADER without a usable hint, LEADER_UNKNOWN or a node that did not answer."""
        rerouted = self.routing.reroute(err, topic, partition)
        if topic is not None and needs_metadata(err, self.routing.address(topic, partition)):
            policy = one_try_each(len(self.routing.known), self.retry)
            with contextlib.suppress(ReplogError):  # the retry itself reports
                await self._refresh(metadata_request(topic), policy)
            return rerouted or topic_partition_moved(self.routing, topic, partition)
        return rerouted

    @property
    def known_nodes(self) -> tuple[str, ...]:
        """Every address this client may call: the bootstraps and the nodes metadata named."""
        return self.routing.known

    async def refresh_metadata(self, topics: Sequence[str] = ()) -> admin_pb2.Metadata:
        """Fetch nodes and partition leaders; update the known nodes and the leader cache."""
        return await self._refresh(admin_pb2.GetMetadataRequest(topics=list(topics)), self.retry)

    async def _refresh(
        self, req: admin_pb2.GetMetadataRequest, retry: RetryPolicy
    ) -> admin_pb2.Metadata:
        meta: admin_pb2.Metadata = await self._call(
            lambda node: node.admin.GetMetadata(req, timeout=self.attempt_timeout_s),
            idempotent=True,
            discover=False,
            retry=retry,
        )
        self.routing.learn(meta)
        formats.learn(self._formats, meta)
        return meta

    async def topic_format(self, topic: str) -> str:
        """ "raw" or "envelope" (see `Client.topic_format`)."""
        known = self._formats.get(topic)
        if known is None:
            await self.refresh_metadata([topic])
            known = self._formats.get(topic, formats.RAW)
        return known

    async def topic_config(self, topic: str) -> tuple[str, str]:
        """(format, timestamp_type) of `topic`, asked from metadata now."""
        return formats.config_in(await self.refresh_metadata([topic]), topic)

    async def close(self) -> None:
        await self._pipeline.close()  # appends still waiting fail (outcome unknown)
        await self._streams.close()
        nodes = list(self._nodes.values())
        self._nodes.clear()
        for node in nodes:
            await node.channel.close(None)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- admin ------------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 0,
        *,
        format: str = formats.ENVELOPE,
        timestamp_type: str = formats.CREATE_TIME,
        configs: Mapping[str, str] | None = None,
    ) -> None:
        """See `Client.create_topic`."""
        req = formats.create_request(
            name, partitions, replication_factor, format, timestamp_type, configs
        )
        attempts = 0

        async def call(node: Node) -> None:
            nonlocal attempts
            attempts += 1
            await node.admin.CreateTopic(req, timeout=self.commit_timeout_s)

        try:
            await self._call(call, idempotent=True)  # see `Client.create_topic`
        except TopicExistsError:
            if attempts > 1:
                return  # an earlier attempt whose answer was lost created it
            raise

    async def create_partitions(self, topic: str, partitions: int) -> int:
        """See `Client.create_partitions`."""
        req = admin_pb2.CreatePartitionsRequest(topic=topic, partitions=partitions)
        timeout = self.commit_timeout_s
        resp = await self._call(lambda n: n.admin.CreatePartitions(req, timeout=timeout))
        return int(resp.partitions)

    async def list_topics(self) -> dict[str, int]:
        req = admin_pb2.ListTopicsRequest()
        resp = await self._call(
            lambda node: node.admin.ListTopics(req, timeout=self.attempt_timeout_s), idempotent=True
        )
        return {t.name: t.partitions for t in resp.topics}

    async def describe_topic(self, name: str) -> list[PartitionInfo]:
        req = admin_pb2.DescribeTopicRequest(name=name)
        resp = await self._call(
            lambda node: node.admin.DescribeTopic(req, timeout=self.attempt_timeout_s),
            idempotent=True,
        )
        return [partition_info(p) for p in resp.partitions]

    async def list_offsets(
        self, topic: str, partitions: Sequence[int] = (), *, timestamp_ms: int | None = None
    ) -> list[Offsets]:
        """See `Client.list_offsets`."""
        req = formats.offsets_request(topic, partitions, timestamp_ms)
        resp = await self._call(
            lambda node: node.admin.ListOffsets(req, timeout=self.attempt_timeout_s),
            idempotent=True,
        )
        return formats.offsets_of(resp, timestamp_ms is not None)

    async def offsets_for_times(self, topic: str, times: Mapping[int, int]) -> dict[int, int]:
        """See `Client.offsets_for_times`."""
        out: dict[int, int] = {}
        for timestamp_ms, partitions in formats.by_timestamp(times).items():
            for o in await self.list_offsets(topic, partitions, timestamp_ms=timestamp_ms):
                assert o.offset_for_timestamp is not None
                out[o.partition] = o.offset_for_timestamp
        return out

    # -- records ----------------------------------------------------------------------------

    async def append(
        self, topic: str, partition: int, values: formats.Values, *, acks: str = "all"
    ) -> AppendResult:
        """Append one batch; idempotent, and records as in `Client.append`."""
        try:
            envelope = await self.topic_format(topic) == formats.ENVELOPE
            encoded = formats.to_values(topic, values, envelope)
            return await self._append(topic, partition, encoded, acks)
        except TopicNotFoundError:
            self._formats.pop(topic, None)
            raise

    async def _append(
        self, topic: str, partition: int, values: Sequence[bytes], acks: str
    ) -> AppendResult:
        req = log_pb2.AppendRequest(
            topic=topic, partition=partition, values=values, acks=ACKS[acks]
        )

        async def call(node: Node) -> AppendResult:  # not retried after a timeout: see Client
            resp = await node.log.Append(req, timeout=self.commit_timeout_s)
            return AppendResult(resp.base_offset, resp.last_offset, resp.high_watermark)

        if not self.idempotent or acks == "none" or not values:
            return await self._call(call, topic, partition)
        await self._discover(topic)
        return await self._pipeline.append(req)

    async def _enqueue(self, req: log_pb2.AppendRequest) -> asyncio.Future[AppendResult]:
        """Queue an idempotent batch on the pipeline (`AsyncPipeline.enqueue`): batches of a
        partition enqueued in turn are appended in that order, several in flight."""
        await self._discover(req.topic)
        return await self._pipeline.enqueue(req)

    async def _send(self, req: log_pb2.AppendRequest) -> Answered:
        """Write `req` to its partition's leader now (over its AppendStream, or as a unary
        Append with `streaming=False` or to a node without AppendStream, noted when it
        answers UNIMPLEMENTED); returns how to await its answer (`aio_pipeline`)."""
        address = self.routing.address(req.topic, req.partition)
        node = self._node(address)
        if not self.streaming or address in self._streams.unary_only:
            task = asyncio.ensure_future(self._unary(req, node))
            return lambda: task
        stream = self._streams.get(address, node.log)
        fut = await stream.send(req)

        async def answered() -> AppendResult:
            try:
                resp = await stream.answer(fut)
            except ReplogError as err:
                if unimplemented(err):  # an older server: nothing appended
                    self._streams.unary_only.add(address)
                raise
            return AppendResult(resp.base_offset, resp.last_offset, resp.high_watermark)

        return answered

    async def _unary(self, req: log_pb2.AppendRequest, node: Node) -> AppendResult:
        try:
            resp = await node.log.Append(req, timeout=self.attempt_timeout_s)
        except grpc.RpcError as exc:
            err = await self._checked(exc, node.address)
            raise self.routing.failed(err, node.address, idempotent=True) from None
        return AppendResult(resp.base_offset, resp.last_offset, resp.high_watermark)

    async def producer_identity(self) -> Identity:
        """This client's producer id and epoch (see `Client.producer_identity`)."""
        async with self._identity_lock:
            identity = self._sequences.identity
            if identity is None:
                req = log_pb2.InitProducerRequest(
                    name=self.producer_name, resume=self.producer_resume
                )

                async def init(node: Node) -> log_pb2.InitProducerResponse:
                    resp: log_pb2.InitProducerResponse = await node.log.InitProducer(
                        req, timeout=self.commit_timeout_s
                    )
                    return resp

                resp = await self._call(init)
                identity = Identity(resp.producer_id, resp.producer_epoch)
                self._sequences.adopt(identity)
            return identity

    async def fetch(
        self, topic: str, partition: int, offset: int, *, max_bytes: int = 0, max_wait_ms: int = 0
    ) -> FetchResult:
        req = log_pb2.FetchRequest(
            topic=topic,
            partition=partition,
            offset=offset,
            max_bytes=max_bytes,
            max_wait_ms=max_wait_ms,
        )
        timeout_s = self.attempt_timeout_s + max_wait_ms / 1000
        envelope = await self.topic_format(topic) == formats.ENVELOPE

        async def call(node: Node) -> FetchResult:
            resp = await node.log.Fetch(req, timeout=timeout_s)
            return FetchResult(
                formats.decode(resp.frames, envelope),
                resp.high_watermark,
                resp.log_start_offset,
                resp.next_offset,
            )

        return await self._call(call, topic, partition, idempotent=True)

    async def batches(
        self, topic: str, partition: int, offset: int
    ) -> AsyncIterator[formats.Decoded]:
        """Data records from `offset` via StreamFrom, following the tail until cancelled;
        reconnects (to the partition's leader, wherever it is now) on retriable errors.
        On an envelope topic the records are decoded envelopes (`records.DecodedRecords`)."""
        await self._discover(topic)
        envelope = await self.topic_format(topic) == formats.ENVELOPE
        attempts = Attempts(self.retry)
        while True:
            req = log_pb2.StreamFromRequest(
                topic=topic, partition=partition, offset=offset, max_bytes=STREAM_REPLY_BYTES
            )
            address = self.routing.address(topic, partition)
            call = self._node(address).log.StreamFrom(req)
            progressed = False
            try:
                async for batch in call:
                    progressed = True
                    offset = batch.next_offset
                    decoded = formats.decode(batch.frames, envelope)
                    if len(decoded):
                        yield decoded
                return  # the server ended the stream normally
            except grpc.RpcError as exc:
                err = self.routing.failed(
                    await self._checked(exc, address), address, idempotent=True
                )
                if progressed:  # the budget counts failures in a row
                    attempts = Attempts(self.retry)
                backoff_s = attempts.budget_left(err)
                if backoff_s is None:
                    raise err from None
                pause_s = attempts.pause_s(backoff_s, await self._reroute(err, topic, partition))
                if pause_s:
                    await asyncio.sleep(pause_s)
            finally:
                call.cancel()

    def producer(self, topic: str, **options: Unpack[AsyncProducerOptions]) -> AsyncProducer:
        """A batching producer of `topic` on this loop (`aio_producer.AsyncProducer`; use
        `async with`): `await send(value, key=, on_delivery=)` returns a future of the
        record's `RecordMetadata`. Batches leave per partition when `batch_bytes_max` /
        `batch_records_max` is reached or `linger_ms` after their first record, pipelined
        through this client's idempotent pipeline (its `in_flight_bytes_max`, 5 batches per
        partition)."""
        return AsyncProducer(self, topic, **options)

    def assigned_consumer(
        self, partitions: Sequence[tuple[str, int]], **options: Unpack[AssignedOptions]
    ) -> AsyncAssignedConsumer:
        """`Client.assigned_consumer` on this loop (`async with`, or the first `poll`,
        starts its fetch tasks)."""
        return AsyncAssignedConsumer(self, partitions, **options)

    # -- consumer groups (replog.v1.Groups) ----------------------------------------------

    def consumer(
        self, topic: str | Sequence[str], *, group: str, **options: Unpack[GroupOptions]
    ) -> AsyncGroupConsumer:
        """A member of consumer group `group` (`aio_groups.AsyncGroupConsumer`, whose keyword
        arguments `options` are); `batches()` reads one partition without a group."""
        return AsyncGroupConsumer(self, topic, group, calls=self.groups, **options)

    @cached_property
    def groups(self) -> AsyncGroupCalls:
        return AsyncGroupCalls(self)

    async def list_groups(self) -> list[GroupSummary]:
        return await self.groups.list()

    async def describe_group(self, group: str) -> GroupDescription:
        return await self.groups.describe(group)

    async def delete_group(self, group: str) -> None:
        await self.groups.delete(group)

    async def committed_offsets(
        self, group: str, partitions: Sequence[tuple[str, int]] = ()
    ) -> list[CommittedOffset]:
        return await self.groups.committed(group, partitions)

    async def commit_offsets(
        self, group: str, offsets: Mapping[tuple[str, int], int | tuple[int, str]]
    ) -> None:
        """Commit outside membership (GROUP_NOT_EMPTY while the group has members)."""
        await self.groups.commit(group, offsets)
