"""The Kafka APIs the listener serves, each translated into the node's own request path.

    Produce         -> LogService.prepare_append / complete_append (the gRPC Append's code)
    Fetch           -> LogService.fetch (the gRPC Fetch's code), long poll on the replicas' HW
    ListOffsets     -> Router.leader_replica, the log's start / HW / offset_for_time
    Metadata        -> the metadata image (topics, assignment), the local replicas (leaders)
    InitProducerId  -> ProducerIds.init (the gRPC InitProducer's code)
    CreateTopics    -> Topics.create (envelope topics), DeleteTopics -> Topics.delete
    CreatePartitions, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, DeleteGroups,
    DescribeCluster -> admin.py (Topics, GroupsService)
    FindCoordinator, OffsetCommit, OffsetFetch -> GroupsService (group_offsets.py)
    JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups, DescribeGroups
                    -> the classic group coordinator (classic_groups.py, rules: classic.py)
    ApiVersions     -> `SUPPORTED`, exactly what the handlers below serve

Errors of replog's tree become Kafka codes through one table (`kafka_edge.errors`), per
partition or per topic as Kafka's responses carry them. Records are translated by
`kafka_edge.convert`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from replog.errors import (
    InvalidArgumentError,
    InvalidRecordError,
    ReplogError,
    TopicExistsError,
)
from replog.kafka.errors import ErrorCode
from replog.kafka.protocol import ApiKey, RequestHeader
from replog.kafka.records import decode_batches
from replog.server.control.producer_ids import ProducerIds
from replog.server.control.routing import Router
from replog.server.control.topics import Topics
from replog.server.kafka_edge.acls import KafkaAcls
from replog.server.kafka_edge.admin import CLUSTER_ID, KafkaAdmin, controller_id, once_elected
from replog.server.kafka_edge.classic_groups import ClassicCoordinator
from replog.server.kafka_edge.convert import batch_of_frames, values_of
from replog.server.kafka_edge.errors import code_of
from replog.server.kafka_edge.group_offsets import GroupOffsets
from replog.server.kafka_edge.pipeline import PRODUCE_TURN, settle
from replog.server.meta import topic_configs
from replog.server.meta.metadata import ENVELOPE
from replog.server.partitions.replicated import ReplicatedPartition
from replog.server.services.log_service import LogService, PreparedAppend
from replog.v1 import log_pb2

# What this listener serves (ApiVersions answers exactly this; anything else is refused).
SUPPORTED: Final[Mapping[int, tuple[int, int]]] = {
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.METADATA: (0, 12),
    ApiKey.PRODUCE: (3, 9),
    ApiKey.FETCH: (4, 12),  # 13+ names topics by id only
    ApiKey.LIST_OFFSETS: (1, 6),  # 7 adds max-timestamp lookups
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 5),  # 6 names topics by id
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.OFFSET_COMMIT: (2, 8),  # 9+: KIP-848 member epochs
    ApiKey.OFFSET_FETCH: (1, 7),  # 8+: several groups per request
    # the classic group protocol (classic_groups.py); versions checked against what
    # librdkafka 2.x, kafka-python and aiokafka send (tests/unit/test_kafka_classic.py)
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    # admin APIs (admin.py): every version of the specs in replog/kafka/specs (so whatever
    # librdkafka 2.x, kafka-python or the Java client sends), DescribeCluster but 2
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),  # 2 lists fenced brokers
    # the ACL APIs (acls.py) over replog's ACLs: every version of the specs (1-3)
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.SASL_HANDSHAKE: (1, 1),  # 0: raw SASL frames (before SaslAuthenticate existed)
    ApiKey.SASL_AUTHENTICATE: (0, 2),
}
# Answered by the connection's security session (security.py), never reaching `Apis`.
SESSION_APIS: Final = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
KAFKA_ACKS: Final[dict[int, log_pb2.Acks]] = {
    0: log_pb2.ACKS_NONE,
    1: log_pb2.ACKS_LEADER,
    -1: log_pb2.ACKS_ALL,
}
EARLIEST, LATEST = -2, -1
NO_LEADER = -1
DECOMPRESSED_BYTES_MAX = 8 * 1024 * 1024
# Records in one Fetch response, whatever the client asks (Kafka's fetch.max.bytes: 55 MiB):
# a response is built whole before it is sent.
FETCH_RESPONSE_BYTES_MAX = 16 * 1024 * 1024

Body = dict[str, Any]


async def _done(answer: Body) -> Body:
    return answer


def topic_uuid(topic_id: int) -> uuid.UUID:
    return uuid.UUID(int=topic_id)


@dataclass
class Node:
    """What the APIs need of the node (built by the listener from the node's parts)."""

    node_id: int
    router: Router
    log_service: LogService
    producer_ids: ProducerIds
    topics: Topics
    brokers: Callable[[], Awaitable[dict[int, tuple[str, int]]]]  # Kafka id -> advertised
    fetch_wait_ms_max: int


class Apis:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.router = node.router
        self.handlers: dict[int, Callable[[RequestHeader, Body], Awaitable[Body | None]]] = {
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.METADATA: self.metadata,
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.JOIN_GROUP: self.join_group,
            ApiKey.SYNC_GROUP: self.sync_group,
            ApiKey.HEARTBEAT: self.heartbeat,
            ApiKey.LEAVE_GROUP: self.leave_group,
            ApiKey.LIST_GROUPS: self.list_groups,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.CREATE_PARTITIONS: self.create_partitions,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.ALTER_CONFIGS: self.alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            ApiKey.DELETE_GROUPS: self.delete_groups,
            ApiKey.DESCRIBE_CLUSTER: self.describe_cluster,
            ApiKey.DESCRIBE_ACLS: self.describe_acls,
            ApiKey.CREATE_ACLS: self.create_acls,
            ApiKey.DELETE_ACLS: self.delete_acls,
        }
        self.admin = KafkaAdmin(node.node_id, node.router, node.topics, node.brokers)
        self.group_offsets: GroupOffsets | None = None  # set before the listener starts
        self.classic: ClassicCoordinator | None = None  # likewise
        self.acls: KafkaAcls | None = None  # likewise
        assert set(self.handlers) | SESSION_APIS == set(SUPPORTED)

    async def answer(self, header: RequestHeader, body: Body) -> Body | None:
        """The response body (None: no response, for acks=0 produces)."""
        return await self.handlers[header.api_key](header, body)

    # -- ApiVersions, Metadata --------------------------------------------------------------

    async def api_versions(self, header: RequestHeader, body: Body) -> Body:
        keys = [
            {"api_key": int(k), "min_version": lo, "max_version": hi}
            for k, (lo, hi) in sorted(SUPPORTED.items())
        ]
        return {"error_code": 0, "api_keys": keys}

    async def metadata(self, header: RequestHeader, body: Body) -> Body:
        brokers = await self.node.brokers()
        image = self.router.metadata.image
        asked = body["topics"]
        if asked is None or (header.api_version == 0 and not asked):
            names = sorted(n for n in image.topics if not n.startswith("__"))
        else:
            names = [t["name"] for t in asked if t["name"] is not None]
        topics = [await self._topic_metadata(name, brokers) for name in names]
        return {
            "brokers": [
                {"node_id": i, "host": host, "port": port, "rack": None}
                for i, (host, port) in sorted(brokers.items())
            ],
            "cluster_id": CLUSTER_ID,
            "controller_id": controller_id(self.router, self.node.node_id, brokers),
            "topics": topics,
        }

    async def _topic_metadata(self, name: str, brokers: Mapping[int, Any]) -> Body:
        try:
            meta = await self.router.topic(name)
        except ReplogError as exc:
            return {"error_code": code_of(exc), "name": name, "partitions": []}
        partitions = []
        for p in range(meta.partitions):
            replicas = list(meta.hosts(p))
            entry: Body = {"partition_index": p, "replica_nodes": replicas}
            entry |= {"isr_nodes": replicas, "leader_id": NO_LEADER, "leader_epoch": -1}
            part = self.router.replicas.replica(meta, p)
            if part is None or part.closed:
                # No replica here: the leader as heard of (leader directory, a hint; a
                # client told NOT_LEADER_OR_FOLLOWER by it refreshes its metadata).
                heard = self.router.leaders.leader(meta, p)
                if heard is None or heard[1] not in brokers or heard[1] not in replicas:
                    entry["error_code"] = ErrorCode.LEADER_NOT_AVAILABLE
                else:
                    entry |= {"leader_epoch": heard[0], "leader_id": heard[1], "error_code": 0}
            else:
                leader = part.leader
                entry["replica_nodes"] = list(leader.replicas)
                entry["leader_epoch"] = leader.epoch
                if leader.leader_id is None or leader.leader_id not in brokers:
                    entry["error_code"] = ErrorCode.LEADER_NOT_AVAILABLE
                else:
                    entry["leader_id"] = leader.leader_id
                    entry["isr_nodes"] = _in_sync(part, list(leader.replicas))
            partitions.append(entry)
        return {
            "error_code": 0,
            "name": name,
            "topic_id": topic_uuid(meta.topic_id),
            "partitions": partitions,
        }

    # -- Produce ----------------------------------------------------------------------------

    async def produce(self, header: RequestHeader, body: Body) -> Body | None:
        """Each partition's batch prepared in turn (decoded, checked, its leader found);
        then, once a pipelined connection's previous Produce has started its appends
        (`pipeline.PRODUCE_TURN`), every partition's append started, and awaited."""
        acks = KAFKA_ACKS.get(body["acks"])
        slots: list[tuple[str, Body, PreparedAppend | None]] = []
        for topic in body["topic_data"]:
            for p in topic["partition_data"]:
                out, prepared = await self._prepare_partition(topic["name"], p, acks)
                slots.append((topic["name"], out, prepared))
        turn = PRODUCE_TURN.get()
        if turn is not None:
            await turn[0]  # the previous Produce's appends reached their partitions
        loop = asyncio.get_running_loop()
        tasks = [
            None if prepared is None else loop.create_task(self._complete(out, prepared))
            for _, out, prepared in slots
        ]  # each reaches its partition before its first suspension: in this order
        if turn is not None:
            settle(turn[1])
        answers = await asyncio.gather(
            *(
                t if t is not None else _done(out)
                for t, (_, out, _p) in zip(tasks, slots, strict=True)
            )
        )
        responses: list[Body] = []
        for (name, _, _), answer in zip(slots, answers, strict=True):
            if not responses or responses[-1]["name"] != name:
                responses.append({"name": name, "partition_responses": []})
            responses[-1]["partition_responses"].append(answer)
        if acks == log_pb2.ACKS_NONE:
            return None  # Kafka sends no response to acks=0
        return {"responses": responses}

    async def _prepare_partition(
        self, topic: str, p: Body, acks: log_pb2.Acks | None
    ) -> tuple[Body, PreparedAppend | None]:
        """(the partition's answer so far, its prepared append; None: answered already)."""
        index = p["index"]
        out: Body = {"index": index, "base_offset": -1, "log_append_time_ms": -1}
        if acks is None:
            return out | {"error_code": ErrorCode.INVALID_REQUIRED_ACKS}, None
        try:
            records = p["records"] or b""
            batches = decode_batches(records, DECOMPRESSED_BYTES_MAX, columnar=True)
            if len(batches) != 1:
                raise InvalidRecordError(
                    f"a produce carries one batch per partition, not {len(batches)}"
                )
            batch = batches[0]
            if batch.transactional or batch.control:
                raise InvalidRecordError("transactional and control batches are not served")
            meta = await self.router.topic(topic)
            values = values_of(batch, meta.format == ENVELOPE)  # (not copied into `request`)
            request = log_pb2.AppendRequest(topic=topic, partition=index, acks=acks)
            if batch.producer_id >= 0:
                if batch.producer_epoch < 0 or batch.base_sequence < 0:
                    raise InvalidArgumentError("an idempotent batch needs an epoch and a sequence")
                request.producer_id = batch.producer_id
                request.producer_epoch = batch.producer_epoch
                request.base_sequence = batch.base_sequence
            return out, await self.node.log_service.prepare_append(request, values)
        except ReplogError as exc:
            return out | {"error_code": code_of(exc), "error_message": str(exc)[:200]}, None

    async def _complete(self, out: Body, prepared: PreparedAppend) -> Body:
        try:
            base, _last, _hw = await self.node.log_service.complete_append(prepared)
        except ReplogError as exc:
            return out | {"error_code": code_of(exc), "error_message": str(exc)[:200]}
        # (from the replica that appended: asking the router again could answer
        # NOT_LEADER for an append that was acknowledged, and a client would retry it)
        start = prepared.part.log.log_start_offset
        return out | {"error_code": 0, "base_offset": base, "log_start_offset": start}

    # -- Fetch ------------------------------------------------------------------------------

    async def fetch(self, header: RequestHeader, body: Body) -> Body:
        wanted = [(t["topic"], p) for t in body["topics"] for p in t["partitions"]]
        answers: dict[tuple[str, int], Body] = {}
        max_bytes = min(max(body["max_bytes"], 1), FETCH_RESPONSE_BYTES_MAX)
        total = await self._fetch_pass(wanted, max_bytes, answers)
        wait_ms = min(max(body["max_wait_ms"], 0), self.node.fetch_wait_ms_max)
        if total < max(body["min_bytes"], 1) and wait_ms > 0:
            await self._wait_any(wanted, answers, wait_ms / 1000)
            total = await self._fetch_pass(wanted, max_bytes, answers)
        responses: list[Body] = []
        for topic, p in wanted:
            if not responses or responses[-1]["topic"] != topic:
                responses.append({"topic": topic, "partitions": []})
            responses[-1]["partitions"].append(answers[(topic, p["partition"])])
        return {"error_code": 0, "session_id": 0, "responses": responses}

    async def _fetch_pass(
        self, wanted: list[tuple[str, Body]], max_bytes: int, answers: dict[tuple[str, int], Body]
    ) -> int:
        """Reads what each partition has committed (those without records yet); returns the
        bytes of records answered in all."""
        total = 0
        for topic, p in wanted:
            key = (topic, p["partition"])
            done = answers.get(key)
            if done is not None and (done["error_code"] or done["records"]):
                total += len(done["records"] or b"")
                continue
            # The first partition with records answers at least one batch (as Kafka does);
            # the others only within what is left of `max_bytes`.
            room = min(p["partition_max_bytes"], max_bytes - total)
            answers[key] = await self._fetch_partition(topic, p, room if total else max(room, 1))
            total += len(answers[key]["records"] or b"")
        return total

    async def _fetch_partition(self, topic: str, p: Body, max_bytes: int) -> Body:
        index = p["partition"]
        out: Body = {"partition_index": index, "high_watermark": -1, "last_stable_offset": -1}
        out |= {"log_start_offset": -1, "records": b"", "aborted_transactions": None}
        try:
            meta = await self.router.topic(topic)
            if max_bytes <= 0:  # no room left in the response: its offsets only
                part = await self.router.leader_replica(topic, index)
                hw, start = part.high_watermark, part.log.log_start_offset
                out |= {"high_watermark": hw, "last_stable_offset": hw, "log_start_offset": start}
                return out | {"error_code": 0}
            request = log_pb2.FetchRequest(
                topic=topic, partition=index, offset=p["fetch_offset"], max_bytes=max_bytes
            )
            reply = await self.node.log_service.fetch(request)
            records = batch_of_frames(reply.frames, meta.format == ENVELOPE)
            return out | {
                "error_code": 0,
                "high_watermark": reply.high_watermark,
                "last_stable_offset": reply.high_watermark,
                "log_start_offset": reply.log_start_offset,
                "records": records,
            }
        except ReplogError as exc:
            return out | {"error_code": code_of(exc)}

    async def _wait_any(
        self, wanted: list[tuple[str, Body]], answers: Mapping[tuple[str, int], Body], wait_s: float
    ) -> None:
        """Until one of the partitions that answered nothing commits past its fetch offset
        (or `wait_s`): Kafka's long poll, on the replicas' own HW waits."""
        waits = []
        for topic, p in wanted:
            if answers[(topic, p["partition"])]["error_code"]:
                continue
            try:
                part = await self.router.leader_replica(topic, p["partition"])
            except ReplogError:
                continue
            waits.append(asyncio.ensure_future(part.wait_high_watermark(p["fetch_offset"], wait_s)))
        if not waits:
            return
        try:
            await asyncio.wait(waits, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            results = await asyncio.gather(*waits, return_exceptions=True)
            for r in results:  # a bug in a wait is a bug here too
                if isinstance(r, Exception) and not isinstance(r, ReplogError):
                    raise r

    # -- ListOffsets ------------------------------------------------------------------------

    async def list_offsets(self, header: RequestHeader, body: Body) -> Body:
        topics = []
        for t in body["topics"]:
            parts = [await self._list_offset(t["name"], p) for p in t["partitions"]]
            topics.append({"name": t["name"], "partitions": parts})
        return {"topics": topics}

    async def _list_offset(self, topic: str, p: Body) -> Body:
        index, ts = p["partition_index"], p["timestamp"]
        out: Body = {"partition_index": index, "timestamp": -1, "offset": -1, "leader_epoch": -1}
        try:
            part = await self.router.leader_replica(topic, index)
            plog = part.log
            out["leader_epoch"] = part.leader.epoch
            if ts == EARLIEST:
                return out | {"error_code": 0, "offset": plog.log_start_offset}
            if ts == LATEST:
                return out | {"error_code": 0, "offset": part.high_watermark}
            if ts < 0:
                raise InvalidArgumentError(f"timestamp {ts} is not a time, -1 or -2")
            found = await asyncio.to_thread(plog.offset_for_time, ts)
            if found is None:  # no record at or after the time: Kafka answers -1, -1
                return out | {"error_code": 0}
            return out | {"error_code": 0, "offset": found[0], "timestamp": found[1]}
        except ReplogError as exc:
            return out | {"error_code": code_of(exc)}

    # -- InitProducerId ---------------------------------------------------------------------

    async def init_producer_id(self, header: RequestHeader, body: Body) -> Body:
        out: Body = {"producer_id": -1, "producer_epoch": -1}
        if body["transactional_id"] is not None:
            return out | {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
        try:
            pid, epoch = await self.node.producer_ids.init("")
        except ReplogError as exc:
            return out | {"error_code": code_of(exc)}
        if epoch > 0x7FFF:  # Kafka's epochs are int16; replog's new producers start at 0
            return out | {"error_code": ErrorCode.INVALID_PRODUCER_EPOCH}
        return {"error_code": 0, "producer_id": pid, "producer_epoch": epoch}

    # -- FindCoordinator, OffsetCommit, OffsetFetch (group_offsets.py) ----------------------

    async def find_coordinator(self, header: RequestHeader, body: Body) -> Body:
        assert self.group_offsets is not None, "the groups are wired before the listener starts"
        return await self.group_offsets.find_coordinator(header.api_version, body)

    async def offset_commit(self, header: RequestHeader, body: Body) -> Body:
        assert self.group_offsets is not None, "the groups are wired before the listener starts"
        return await self.group_offsets.offset_commit(body)

    async def offset_fetch(self, header: RequestHeader, body: Body) -> Body:
        assert self.group_offsets is not None, "the groups are wired before the listener starts"
        return await self.group_offsets.offset_fetch(body)

    # -- the classic group protocol (classic_groups.py) -------------------------------------

    def _classic(self) -> ClassicCoordinator:
        assert self.classic is not None, "the groups are wired before the listener starts"
        return self.classic

    async def join_group(self, header: RequestHeader, body: Body) -> Body:
        return await self._classic().join_group(header.api_version, header.client_id, body)

    async def sync_group(self, header: RequestHeader, body: Body) -> Body:
        return await self._classic().sync_group(header.api_version, body)

    async def heartbeat(self, header: RequestHeader, body: Body) -> Body:
        return await self._classic().heartbeat(body)

    async def leave_group(self, header: RequestHeader, body: Body) -> Body:
        return await self._classic().leave_group(header.api_version, body)

    async def list_groups(self, header: RequestHeader, body: Body) -> Body:
        return self._classic().list_groups(header.api_version, body)

    async def describe_groups(self, header: RequestHeader, body: Body) -> Body:
        return await self._classic().describe_groups(header.api_version, body)

    # -- the admin APIs (admin.py) ----------------------------------------------------------

    async def create_partitions(self, header: RequestHeader, body: Body) -> Body:
        return await self.admin.create_partitions(body)

    async def describe_configs(self, header: RequestHeader, body: Body) -> Body:
        return await self.admin.describe_configs(header.api_version, body)

    async def alter_configs(self, header: RequestHeader, body: Body) -> Body:
        return await self.admin.alter_configs(body)

    async def incremental_alter_configs(self, header: RequestHeader, body: Body) -> Body:
        return await self.admin.incremental_alter_configs(body)

    async def delete_groups(self, header: RequestHeader, body: Body) -> Body:
        return await self.admin.delete_groups(body)

    async def describe_cluster(self, header: RequestHeader, body: Body) -> Body:
        return await self.admin.describe_cluster(body)

    async def describe_acls(self, header: RequestHeader, body: Body) -> Body:
        assert self.acls is not None, "the listener serves ACLs before it starts"
        return await self.acls.describe_acls(header.api_version, body)

    async def create_acls(self, header: RequestHeader, body: Body) -> Body:
        assert self.acls is not None, "the listener serves ACLs before it starts"
        return await self.acls.create_acls(header.api_version, body)

    async def delete_acls(self, header: RequestHeader, body: Body) -> Body:
        assert self.acls is not None, "the listener serves ACLs before it starts"
        return await self.acls.delete_acls(header.api_version, body)

    # -- CreateTopics, DeleteTopics ---------------------------------------------------------

    async def create_topics(self, header: RequestHeader, body: Body) -> Body:
        results = []
        for t in body["topics"]:
            name = t["name"]
            out: Body = {"name": name, "num_partitions": -1, "replication_factor": -1}
            try:
                configs = _create_configs(t["configs"])
            except InvalidArgumentError as exc:  # a bad config name or value: Kafka's code
                results.append(
                    out | {"error_code": ErrorCode.INVALID_CONFIG, "error_message": str(exc)[:200]}
                )
                continue
            try:
                if t["assignments"]:
                    raise InvalidArgumentError("replica assignments are chosen by replog")
                partitions = 1 if t["num_partitions"] == -1 else t["num_partitions"]
                rf = 0 if t["replication_factor"] == -1 else t["replication_factor"]
                if body["validate_only"]:
                    if name in self.router.metadata.image.topics:
                        raise TopicExistsError(f"topic {name!r} already exists", topic=name)
                else:
                    create = partial(
                        self.node.topics.create,
                        name,
                        partitions,
                        rf,
                        format=ENVELOPE,
                        configs=configs,
                    )
                    await once_elected(create)
                results.append(out | {"error_code": 0, "num_partitions": partitions})
            except ReplogError as exc:
                code = code_of(exc, controller=True)
                results.append(out | {"error_code": code, "error_message": str(exc)[:200]})
        return {"topics": results}

    async def delete_topics(self, header: RequestHeader, body: Body) -> Body:
        results = []
        for name in body["topic_names"]:
            try:
                if name.startswith("__"):
                    raise InvalidArgumentError(f"{name} is internal")
                await once_elected(partial(self.node.topics.delete, name))
                results.append({"name": name, "error_code": 0})
            except ReplogError as exc:
                code = code_of(exc, controller=True)
                results.append({"name": name, "error_code": code, "error_message": str(exc)[:200]})
        return {"responses": results}


def _create_configs(configs: list[Body]) -> dict[str, str]:
    """A CreateTopics topic's configs as replog's topic configs (`topic_configs`: Kafka's
    names, every one replog serves; an unknown name or a bad value: INVALID_ARGUMENT, which
    the caller answers as INVALID_CONFIG). A null value is Kafka's "the default"."""
    out: dict[str, str] = {}
    for c in configs:
        if c["value"] is not None:
            out[c["name"]] = c["value"]
    return topic_configs.checked(out)


def _in_sync(part: ReplicatedPartition, replicas: list[int]) -> list[int]:
    """The leader and the followers whose log reaches its HW (on the leader; elsewhere the
    leader's followers are unknown: every replica)."""
    followers = part.driver.replica.followers()
    if not followers:
        return replicas
    hw = part.high_watermark
    return [r for r in replicas if r == part.driver.leader_id or followers.get(r, (-1, 0))[0] >= hw]
