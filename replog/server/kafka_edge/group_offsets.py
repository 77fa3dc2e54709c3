"""FindCoordinator, OffsetCommit and OffsetFetch for consumers outside a group's membership.

Kafka consumers that `assign()` their partitions commit with no member id and generation
-1; replog's groups take exactly such commits (while the group has no members: replog's
own members are fenced as they are over gRPC). Each request goes to the Groups service's
own code (`GroupsService.find_coordinator` / `commit_offsets` / `fetch_committed_offsets`):
the offsets are the same ones replog's clients commit and read, in `__consumer_offsets`.

A commit with a member id or a generation is a member of Kafka's classic group protocol:
it is fenced by the group's generation first (`ClassicCoordinator.check_commit`: Kafka's
REBALANCE_IN_PROGRESS / UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION), then written as the same
offsets (the classic group's membership is the Kafka edge's; replog's groups see a commit
without a member). A commit is all or nothing in replog, so one error answers every
partition of the request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from replog.errors import ReplogError
from replog.kafka.errors import ErrorCode
from replog.server.groups.service import GroupsService
from replog.server.kafka_edge.classic_groups import ClassicCoordinator
from replog.server.kafka_edge.errors import code_of
from replog.v1 import groups_pb2

Body = dict[str, Any]
GROUP_KEY = 0  # FindCoordinator key_type: a group (1: a transaction, not served)


class GroupOffsets:
    def __init__(
        self,
        groups: GroupsService,
        brokers: Callable[[], Awaitable[dict[int, tuple[str, int]]]],
        classic: ClassicCoordinator,
    ) -> None:
        self.groups = groups
        self.brokers = brokers
        self.classic = classic

    async def find_coordinator(self, version: int, body: Body) -> Body:
        keys = body["coordinator_keys"] if version >= 4 else [body["key"]]
        found = [await self._coordinator(key, body["key_type"]) for key in keys]
        if version >= 4:
            return {"coordinators": found}
        return found[0]

    async def _coordinator(self, key: str, key_type: int) -> Body:
        out: Body = {"key": key, "node_id": -1, "host": "", "port": -1}
        if key_type != GROUP_KEY:
            return out | {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
        try:
            reply = await self.groups.find_coordinator(
                groups_pb2.FindCoordinatorRequest(group=key), forwarded=False
            )
        except ReplogError as exc:
            return out | {"error_code": _coordinator_code(exc), "error_message": str(exc)[:200]}
        where = (await self.brokers()).get(reply.node_id)
        if where is None:  # its Kafka address is not known yet: clients ask again
            return out | {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
        return out | {"error_code": 0, "node_id": reply.node_id, "host": where[0], "port": where[1]}

    async def offset_commit(self, body: Body) -> Body:
        request = groups_pb2.CommitOffsetsRequest(
            group=body["group_id"], member_id="", generation=-1
        )
        for t in body["topics"]:
            for p in t["partitions"]:
                request.offsets.add(
                    topic=t["name"],
                    partition=p["partition_index"],
                    offset=p["committed_offset"],
                    metadata=p["committed_metadata"] or "",
                )
        fenced = await self.classic.check_commit(
            body["group_id"], body["member_id"], body["generation_id_or_member_epoch"]
        )
        code = fenced or ErrorCode.NONE
        if code == ErrorCode.NONE:
            try:
                await self.groups.commit_offsets(request)
            except ReplogError as exc:
                code = _coordinator_code(exc)
        return {
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {"partition_index": p["partition_index"], "error_code": code}
                        for p in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ]
        }

    async def offset_fetch(self, body: Body) -> Body:
        request = groups_pb2.FetchCommittedOffsetsRequest(group=body["group_id"])
        for t in body["topics"] or ():
            for p in t["partition_indexes"]:
                request.partitions.add(topic=t["name"], partition=p)
        try:
            reply = await self.groups.fetch_committed_offsets(request)
        except ReplogError as exc:
            return {"error_code": _coordinator_code(exc), "topics": []}
        topics: dict[str, list[Body]] = {}
        for o in reply.offsets:
            topics.setdefault(o.topic, []).append(
                {
                    "partition_index": o.partition,
                    "committed_offset": o.offset,
                    "committed_leader_epoch": -1,
                    "metadata": o.metadata if o.offset >= 0 else None,
                    "error_code": 0,
                }
            )
        return {
            "error_code": 0,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
        }


def _coordinator_code(exc: ReplogError) -> ErrorCode:
    return code_of(exc, coordinator=True)
