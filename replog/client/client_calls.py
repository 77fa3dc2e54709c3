"""The client's calls and routing rules, once for `Client` and `AsyncClient` (sans-I/O).

Each call is a flow: a generator that yields the RPCs to make, as data (`NodeRpc`, or a
`group_rpcs.GroupRpc` for a group's coordinator), receives each one's result and returns
the call's result. The rules around the calls live here too: learning the cluster before
the first call (`discover`), re-routing after a retriable error (`reroute`, metadata asked
again after NOT_LEADER without a usable hint, LEADER_UNKNOWN or a node that did not
answer), a topic's format (asked once), a CreateTopic whose lost answer was a success.

`ClientCalls` is the method table both twins share (`twins.TwinCall`): the threaded
`Client` performs a flow's steps blocking (`drive_blocking`), the asyncio `AsyncClient`
awaits them (`drive`); each sends a `NodeRpc` through its own `_call` (routing, retries,
typed errors) with a `Sender`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from replog.client import formats
from replog.client import group_rpcs as rpcs
from replog.client.group_rpcs import GroupRpc
from replog.client.group_wire import CommittedOffset, GroupDescription, GroupSummary
from replog.client.results import FetchResult, Offsets, PartitionInfo, RawFetch
from replog.client.retry import Attempts, RetryPolicy, one_try_each
from replog.client.routing import Routing, needs_metadata, topic_partition_moved
from replog.client.sequences import Identity, Sequences
from replog.client.twins import TwinCall
from replog.client.wire import partition_info
from replog.errors import ConnectFailedError, ReplogError, TopicExistsError
from replog.v1 import admin_pb2, log_pb2

T = TypeVar("T")
TopicPartition = tuple[str, int]
ACKS = {"none": log_pb2.ACKS_NONE, "leader": log_pb2.ACKS_LEADER, "all": log_pb2.ACKS_ALL}


def _nothing(_reply: Any) -> None:
    return None


def _raise(_err: ReplogError) -> bool:
    return False


def _swallow(_err: ReplogError) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class NodeRpc(Generic[T]):
    """One Log or Admin call: `method` of the node's `service` stub with `request`, to the
    leader of (`topic`, `partition`) with a topic, else to the client's current node;
    `read` turns the answer into the step's result. `deadline`: the client's attempt
    deadline, its commit deadline (a call that waits for a quorum) or its whole
    `timeout_s`, plus `extra_s` (a long poll). `idempotent`: an attempt without answer may
    be sent again. `quiet(err)`: the call's error is no failure of the flow (the step's
    result is then None). `created`: TOPIC_ALREADY_EXISTS after an attempt whose answer
    was lost means that attempt created the topic (None, no error)."""

    service: Literal["admin", "log"]
    method: str
    request: Any
    read: Callable[[Any], T]
    deadline: Literal["attempt", "commit", "whole"] = "attempt"
    topic: str | None = None
    partition: int = 0
    idempotent: bool = False
    discover: bool = True
    retry: RetryPolicy | None = None
    quiet: Callable[[ReplogError], bool] = _raise
    created: bool = False
    extra_s: float = 0.0


Step = NodeRpc[Any] | GroupRpc[Any]
Flow = Generator[Step, Any, T]


def ask(step: NodeRpc[T] | GroupRpc[T]) -> Flow[T]:
    """The one step of a call: `step`'s result."""
    result: T = yield step
    return result


class ClientState(Protocol):
    """What the flows read and update of a client (either twin)."""

    routing: Routing
    retry: RetryPolicy
    timeout_s: float
    attempt_timeout_s: float
    commit_timeout_s: float
    producer_name: str
    producer_resume: bool
    _formats: dict[str, str]
    _sequences: Sequences

    @property
    def groups(self) -> rpcs.CoordinatorMap: ...


class Sender:
    """Sends a `NodeRpc` on a node (a twin's `_call` makes the attempts) and says what a
    failed call answers."""

    def __init__(self, rpc: NodeRpc[Any], client: ClientState) -> None:
        self.rpc = rpc
        self.attempts = 0
        deadlines = {"attempt": client.attempt_timeout_s, "commit": client.commit_timeout_s}
        self.timeout_s = deadlines.get(rpc.deadline, client.timeout_s) + rpc.extra_s
        self.route = (rpc.topic, rpc.partition)
        self.options: dict[str, Any] = {
            "idempotent": rpc.idempotent,
            "discover": rpc.discover,
            "retry": rpc.retry,
        }

    def __call__(self, node: Any) -> Any:
        self.attempts += 1
        stub = node.admin if self.rpc.service == "admin" else node.log
        return getattr(stub, self.rpc.method)(self.rpc.request, timeout=self.timeout_s)

    def settle(self, err: ReplogError) -> None:
        """The result of a call that failed with `err`: None, or `err` raised."""
        lost_answer = self.rpc.created and self.attempts > 1  # see `NodeRpc.created`
        if self.rpc.quiet(err) or (lost_answer and isinstance(err, TopicExistsError)):
            return None
        raise err


async def drive(flow: Generator[Any, Any, T], perform: Callable[[Any], Awaitable[Any]]) -> T:
    """Run `flow`, awaiting `perform` of each step it yields: the step's result goes back
    in, or its error (an `Exception`) is raised in the flow at its `yield`. A cancelled
    or failing flow is closed."""
    answer: Any = None
    error: Exception | None = None
    try:
        while True:
            try:
                step = flow.send(answer) if error is None else flow.throw(error)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            try:
                answer, error = await perform(step), None
            except Exception as err:  # the flow's to handle (or not)
                answer, error = None, err
    finally:
        flow.close()


def drive_blocking(flow: Generator[Any, Any, T], perform: Callable[[Any], Any]) -> T:
    """`drive` with a blocking `perform`: the coroutine never suspends (nothing in it
    awaits a future), so one `send` runs it to its end."""

    async def now(step: Any) -> Any:
        return perform(step)

    coro = drive(flow, now)
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        coro.close()
    raise AssertionError("a blocking flow suspended")


# -- routing rules ---------------------------------------------------------------------------


def metadata_request(topic: str | None) -> admin_pb2.GetMetadataRequest:
    """What a client asks to learn the cluster: the topic it is about to use (its leaders
    come with the nodes), or every topic for a call without one (`CreateTopic` names a
    topic that does not exist yet)."""
    return admin_pb2.GetMetadataRequest(topics=[topic] if topic else [])


def metadata(
    client: ClientState,
    req: admin_pb2.GetMetadataRequest,
    policy: RetryPolicy,
    quiet: Callable[[ReplogError], bool] = _raise,
) -> NodeRpc[admin_pb2.Metadata]:
    """GetMetadata on any node: its answer updates the known nodes, the leader cache and
    the topics' formats."""

    def read(meta: admin_pb2.Metadata) -> admin_pb2.Metadata:
        client.routing.learn(meta)
        formats.learn(client._formats, meta)
        return meta

    return NodeRpc(
        "admin",
        "GetMetadata",
        req,
        read,
        idempotent=True,
        discover=False,
        retry=policy,
        quiet=quiet,
    )


def _connect_failed(err: ReplogError) -> bool:
    return not isinstance(err, ConnectFailedError)


def discover(client: ClientState, topic: str | None) -> Flow[None]:
    """Before the first call: learn every node of the cluster (best effort: one try per
    bootstrap address; whatever else fails, the call itself reports, but a node that
    does not answer for a cause retrying does not change is said now)."""
    if client.routing.discovered:
        return
    policy = one_try_each(len(client.routing.bootstraps), client.retry)
    yield metadata(client, metadata_request(topic), policy, _connect_failed)


def reroute(client: ClientState, err: ReplogError, topic: str | None, partition: int) -> Flow[bool]:
    """Update routing after a retriable error; True when the retry goes to another node
    (worth trying at once). After NOT_LEADER without a usable hint, LEADER_UNKNOWN or a
    node that did not answer, the partition's leader is asked of the metadata again
    (best effort, one try per node: `routing.Routing.learn` skips a suspect leader)."""
    routing = client.routing
    rerouted = routing.reroute(err, topic, partition)
    if topic is not None and needs_metadata(err, routing.address(topic, partition)):
        policy = one_try_each(len(routing.known), client.retry)
        yield metadata(client, metadata_request(topic), policy, _swallow)  # the retry reports
        return rerouted or topic_partition_moved(routing, topic, partition)
    return rerouted


class StreamResume:
    """Where a StreamFrom resumes after a failure, and whether it may: the retry budget
    counts failures in a row (a stream that delivered since starts a fresh one)."""

    def __init__(
        self, policy: RetryPolicy, topic: str, partition: int, offset: int, max_bytes: int
    ) -> None:
        self.policy = policy
        self.attempts = Attempts(policy)
        self.topic, self.partition = topic, partition
        self.offset, self.max_bytes = offset, max_bytes
        self.progressed = False

    def request(self) -> log_pb2.StreamFromRequest:
        """The request of the next stream: from the first offset not delivered yet."""
        self.progressed = False
        return log_pb2.StreamFromRequest(
            topic=self.topic, partition=self.partition, offset=self.offset, max_bytes=self.max_bytes
        )

    def advanced(self, batch: log_pb2.StreamBatch) -> log_pb2.StreamBatch:
        self.progressed = True
        self.offset = batch.next_offset
        return batch

    def backoff_s(self, err: ReplogError) -> float | None:
        """The pause before the next stream after `err` (None: `err` is final)."""
        if self.progressed:
            self.attempts = Attempts(self.policy)
        return self.attempts.budget_left(err)

    def pause_s(self, backoff_s: float, rerouted: bool) -> float:
        return self.attempts.pause_s(backoff_s, rerouted)


def init_producer(client: ClientState) -> Flow[Identity]:
    """A new producer id and epoch (InitProducer), adopted by the client's sequences."""
    req = log_pb2.InitProducerRequest(name=client.producer_name, resume=client.producer_resume)
    resp = yield NodeRpc("log", "InitProducer", req, lambda r: r, "commit")
    identity = Identity(resp.producer_id, resp.producer_epoch)
    client._sequences.adopt(identity)
    return identity


# -- the calls both twins offer ------------------------------------------------------------


def refresh_metadata(client: ClientState, topics: Sequence[str] = ()) -> Flow[admin_pb2.Metadata]:
    """Fetch nodes and partition leaders; update the known nodes and the leader cache."""
    req = admin_pb2.GetMetadataRequest(topics=list(topics))
    meta: admin_pb2.Metadata = yield metadata(client, req, client.retry)
    return meta


def topic_format(client: ClientState, topic: str) -> Flow[str]:
    """ "raw" or "envelope" (from metadata, asked once per topic; UNKNOWN_TOPIC if none)."""
    known = client._formats.get(topic)
    if known is None:
        yield from refresh_metadata(client, [topic])
        known = client._formats.get(topic, formats.RAW)
    return known


def topic_config(client: ClientState, topic: str) -> Flow[tuple[str, str]]:
    """(format, timestamp_type) of `topic`, asked from metadata now."""
    return formats.config_in((yield from refresh_metadata(client, [topic])), topic)


def create_topic(
    client: ClientState,
    name: str,
    partitions: int = 1,
    replication_factor: int = 0,
    *,
    format: str = formats.ENVELOPE,
    timestamp_type: str = formats.CREATE_TIME,
    configs: Mapping[str, str] | None = None,
) -> Flow[None]:
    """`format`: "raw" (values are your bytes) or "envelope" (records with key,
    timestamp and headers); `timestamp_type`: "create_time" (the producer's) or
    "log_append_time" (the leader's clock); `configs`: docs/api.md, Topic configs."""
    args = (name, partitions, replication_factor, format, timestamp_type, configs)
    req = formats.create_request(*args)
    # A retry after an attempt that got no answer is safe: TOPIC_ALREADY_EXISTS then means
    # that attempt created it.
    yield NodeRpc("admin", "CreateTopic", req, _nothing, "commit", idempotent=True, created=True)


def create_partitions(client: ClientState, topic: str, partitions: int) -> Flow[int]:
    """Grow `topic` to `partitions` (never shrink); returns the new count. Keyed records
    of later sends may go to other partitions (docs/api.md): producers made after the
    call use the new count, one made before keeps the count it learned."""
    req = admin_pb2.CreatePartitionsRequest(topic=topic, partitions=partitions)
    return (
        yield from ask(
            NodeRpc("admin", "CreatePartitions", req, lambda r: int(r.partitions), "commit")
        )
    )


def list_topics(client: ClientState) -> Flow[dict[str, int]]:
    """Every topic and its partition count."""
    req = admin_pb2.ListTopicsRequest()

    def read(resp: Any) -> dict[str, int]:
        return {t.name: t.partitions for t in resp.topics}

    return (yield from ask(NodeRpc("admin", "ListTopics", req, read, idempotent=True)))


def describe_topic(client: ClientState, name: str) -> Flow[list[PartitionInfo]]:
    """Each partition's leader, replicas, in-sync replicas and offsets."""
    req = admin_pb2.DescribeTopicRequest(name=name)

    def read(resp: Any) -> list[PartitionInfo]:
        return [partition_info(p) for p in resp.partitions]

    return (yield from ask(NodeRpc("admin", "DescribeTopic", req, read, idempotent=True)))


def list_offsets(
    client: ClientState,
    topic: str,
    partitions: Sequence[int] = (),
    *,
    timestamp_ms: int | None = None,
) -> Flow[list[Offsets]]:
    """Log start, HW and LEO per partition (default: all); with `timestamp_ms`, also
    the first committed offset whose record timestamp is >= it (`offset_for_timestamp`;
    the HW when there is none)."""
    req = formats.offsets_request(topic, partitions, timestamp_ms)

    def read(resp: Any) -> list[Offsets]:
        return formats.offsets_of(resp, timestamp_ms is not None)

    # Routed like the topic's reads: to a leader of it when known, and a LEADER_UNKNOWN
    # answer (a node cut off from the others) moves the retry to the next node.
    partition = partitions[0] if partitions else 0
    return (
        yield from ask(
            NodeRpc("admin", "ListOffsets", req, read, "attempt", topic, partition, True)
        )
    )


def offsets_for_times(
    client: ClientState, topic: str, times: Mapping[int, int]
) -> Flow[dict[int, int]]:
    """{partition: timestamp_ms} -> {partition: the first committed offset whose record
    timestamp is >= it, or the partition's end (HW) when none is}. Kafka's
    offsetsForTimes, except that "none" answers the end offset, where a reader that
    starts waits for newer records. Record timestamps: docs/api.md, ListOffsets by time."""
    out: dict[int, int] = {}
    for timestamp_ms, partitions in formats.by_timestamp(times).items():
        for o in (yield from list_offsets(client, topic, partitions, timestamp_ms=timestamp_ms)):
            assert o.offset_for_timestamp is not None
            out[o.partition] = o.offset_for_timestamp
    return out


def fetch_raw(
    c: ClientState, topic: str, partition: int, offset: int, *, max_bytes: int = 0,
    max_wait_ms: int = 0,
) -> Flow[RawFetch]:  # fmt: skip
    """Like `fetch`, but the frames stay raw bytes (control records included): for
    columnar decoders such as the Spark source, which must not build an object per record."""
    req = log_pb2.FetchRequest(topic=topic, partition=partition, offset=offset)
    req.max_bytes, req.max_wait_ms = max_bytes, max_wait_ms

    def read(resp: Any) -> RawFetch:
        return RawFetch(resp.frames, resp.high_watermark, resp.log_start_offset, resp.next_offset)

    wait_s = max_wait_ms / 1000
    rpc = NodeRpc("log", "Fetch", req, read, "attempt", topic, partition, True, extra_s=wait_s)
    return (yield from ask(rpc))


def fetch(
    client: ClientState, topic: str, partition: int, offset: int, *, max_bytes: int = 0,
    max_wait_ms: int = 0,
) -> Flow[FetchResult]:  # fmt: skip
    """Committed records from `offset` (long poll up to `max_wait_ms` at the HW); on an
    envelope topic `records` are decoded envelopes (`records.DecodedRecords`)."""
    raw = yield from fetch_raw(
        client, topic, partition, offset, max_bytes=max_bytes, max_wait_ms=max_wait_ms
    )
    envelope = (yield from topic_format(client, topic)) == formats.ENVELOPE
    frames = formats.decode(raw.frames, envelope)
    return FetchResult(frames, raw.high_watermark, raw.log_start_offset, raw.next_offset)


def list_groups(client: ClientState) -> Flow[list[GroupSummary]]:
    """Every consumer group of the cluster."""
    return (yield from ask(rpcs.list_groups(client.groups)))


def describe_group(client: ClientState, group: str) -> Flow[GroupDescription]:
    """Members, their partitions, and each partition's committed offset and lag."""
    return (yield from ask(rpcs.describe(client.groups, group)))


def delete_group(client: ClientState, group: str) -> Flow[None]:
    """Drop the group's committed offsets (GROUP_NOT_EMPTY while it has members)."""
    yield rpcs.delete(client.groups, group)


def committed_offsets(
    client: ClientState, group: str, partitions: Sequence[TopicPartition] = ()
) -> Flow[list[CommittedOffset]]:
    """The group's committed offsets of `partitions` (default: all it has)."""
    return (yield from ask(rpcs.committed(client.groups, group, partitions)))


def commit_offsets(
    client: ClientState, group: str, offsets: Mapping[TopicPartition, int | tuple[int, str]]
) -> Flow[None]:
    """Commit offsets outside membership (tools, a job that assigns partitions itself):
    refused with GROUP_NOT_EMPTY while the group has members."""
    yield rpcs.commit(client.groups, group, offsets)


class ClientCalls:
    """The calls `Client` and `AsyncClient` share (each a `twins.TwinCall` of a flow)."""

    refresh_metadata = TwinCall(refresh_metadata)
    topic_format = TwinCall(topic_format)
    topic_config = TwinCall(topic_config)
    create_topic = TwinCall(create_topic)
    create_partitions = TwinCall(create_partitions)
    list_topics = TwinCall(list_topics)
    describe_topic = TwinCall(describe_topic)
    list_offsets = TwinCall(list_offsets)
    offsets_for_times = TwinCall(offsets_for_times)
    fetch = TwinCall(fetch)
    fetch_raw = TwinCall(fetch_raw)
    list_groups = TwinCall(list_groups)
    describe_group = TwinCall(describe_group)
    delete_group = TwinCall(delete_group)
    committed_offsets = TwinCall(committed_offsets)
    commit_offsets = TwinCall(commit_offsets)
