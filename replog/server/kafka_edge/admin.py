"""Kafka's admin APIs, each translated into the node's own request path (no rule here is a
second copy of one the gRPC Admin and Groups services apply):

    CreatePartitions         -> Topics.create_partitions (validate_only: checked, not proposed)
    DescribeConfigs          -> Topics.describe_configs (the gRPC DescribeConfigs' code)
    AlterConfigs             -> Topics.alter_configs, the whole set: configs not named are
                                reset to their defaults (Kafka's non-incremental semantics)
    IncrementalAlterConfigs  -> Topics.alter_configs: SET and DELETE (APPEND / SUBTRACT:
                                INVALID_REQUEST: list-valued configs are set whole)
    DeleteGroups             -> GroupsService.delete_group (the gRPC DeleteGroup's code),
                                after the classic group protocol's membership check
    DescribeCluster          -> the brokers and controller Metadata answers

Config resources: TOPIC only. A BROKER resource is described with no configs (a node's
configs are its flags, not served over Kafka) and refused INVALID_REQUEST when altered, as
any other resource type is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any, Final

from replog.errors import (
    InvalidArgumentError,
    LeaderUnknownError,
    ReplogError,
    UnavailableError,
    UnknownGroupError,
)
from replog.kafka.errors import ErrorCode
from replog.server.control.routing import Router
from replog.server.control.topics import Topics
from replog.server.groups.service import GroupsService
from replog.server.kafka_edge.classic_groups import ClassicCoordinator
from replog.server.kafka_edge.errors import code_of
from replog.server.meta import topic_configs

Body = dict[str, Any]
E = ErrorCode
CLUSTER_ID: Final = "replog"
CONTROLLER_WAIT_S: Final = 10.0  # within clients' request timeouts (librdkafka: 30 s)
BACKOFF_S_MIN, BACKOFF_S_MAX = 0.05, 0.5
# Kafka's ConfigResource types
TOPIC_RESOURCE: Final = 2
BROKER_RESOURCE: Final = 4
# Kafka's DescribeConfigs ConfigSource: a value the topic set; a default (the node's flag)
DYNAMIC_TOPIC_CONFIG: Final = 1
DEFAULT_CONFIG: Final = 5
# Kafka's ConfigType of each config replog serves (DescribeConfigs v3+)
STRING, INT, LONG, LIST = 2, 3, 5, 7
CONFIG_TYPES: Final = {
    topic_configs.CLEANUP_POLICY: LIST,
    topic_configs.MAX_MESSAGE_BYTES: INT,
    topic_configs.TIMESTAMP_TYPE: STRING,
    topic_configs.RETENTION_BYTES: LONG,
    topic_configs.RETENTION_MS: LONG,
    topic_configs.SEGMENT_BYTES: INT,
}
# IncrementalAlterConfigs operations
OP_SET, OP_DELETE = 0, 1
AUTHORIZED_OPERATIONS_OMITTED: Final = -2147483648
BROKERS_ENDPOINT: Final = 1  # DescribeCluster v1+ endpoint_type


def controller_id(router: Router, node_id: int, brokers: Iterable[int]) -> int:
    """The controller Kafka clients are told: the metadata leader; while it is unknown (an
    election) or its Kafka address is, this node: every node takes the controller APIs and
    forwards them to the metadata leader (Topics), so a client never waits for one."""
    try:
        controller = router.metadata_leader()
    except ReplogError:
        return node_id
    return controller if controller in set(brokers) else node_id


async def once_elected(call: Callable[[], Awaitable[Any]]) -> Any:
    """`call()`, tried again for up to CONTROLLER_WAIT_S while the cluster metadata has no
    leader (a cluster that just started, an election): clients such as librdkafka do not
    retry NOT_CONTROLLER for CreateTopics, and their `timeout_ms` (0 by default) is how
    long to wait for the creation to complete, not for a controller. A forward to the
    metadata leader that could not connect (gRPC's "failed to connect to all addresses":
    nothing was sent, e.g. a leader that just stopped) is tried again the same way."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CONTROLLER_WAIT_S
    backoff_s = BACKOFF_S_MIN
    while True:
        try:
            return await call()
        except (LeaderUnknownError, UnavailableError) as exc:
            if not _nothing_sent(exc) or loop.time() + backoff_s > deadline:
                raise
            await asyncio.sleep(backoff_s)
            backoff_s = min(2 * backoff_s, BACKOFF_S_MAX)


def _nothing_sent(exc: ReplogError) -> bool:
    """Whether `exc` certainly changed nothing: no metadata leader, or no connection to it."""
    return isinstance(exc, LeaderUnknownError) or "failed to connect to all addresses" in str(exc)


def _message(exc: ReplogError) -> str:
    return str(exc)[:200]


class KafkaAdmin:
    def __init__(
        self,
        node_id: int,
        router: Router,
        topics: Topics,
        brokers: Callable[[], Awaitable[dict[int, tuple[str, int]]]],
    ) -> None:
        self.node_id = node_id
        self.router = router
        self.topics = topics
        self.brokers = brokers
        self.groups: GroupsService | None = None  # set before the listener starts
        self.classic: ClassicCoordinator | None = None  # likewise

    # -- CreatePartitions -------------------------------------------------------------------

    async def create_partitions(self, body: Body) -> Body:
        results = []
        for t in body["topics"]:
            name = t["name"]
            try:
                if t["assignments"]:
                    raise InvalidArgumentError("replica assignments are chosen by replog")
                grow = partial(
                    self.topics.create_partitions,
                    name,
                    t["count"],
                    validate_only=body["validate_only"],
                )
                await once_elected(grow)
                results.append({"name": name, "error_code": 0, "error_message": None})
            except ReplogError as exc:
                code = code_of(exc, controller=True)
                if code == E.INVALID_REQUEST:  # a count that does not grow the topic, ...
                    code = E.INVALID_PARTITIONS
                results.append({"name": name, "error_code": code, "error_message": _message(exc)})
        return {"results": results}

    # -- DescribeConfigs --------------------------------------------------------------------

    async def describe_configs(self, version: int, body: Body) -> Body:
        return {"results": [await self._describe(version, r) for r in body["resources"]]}

    async def _describe(self, version: int, r: Body) -> Body:
        out: Body = {"resource_type": r["resource_type"], "resource_name": r["resource_name"]}
        out |= {"error_code": 0, "error_message": None, "configs": []}
        if r["resource_type"] == BROKER_RESOURCE:
            return out  # a node's configs are its flags: none are served over Kafka
        if r["resource_type"] != TOPIC_RESOURCE:
            message = f"resource type {r['resource_type']} has no configs in replog"
            return out | {"error_code": E.INVALID_REQUEST, "error_message": message}
        try:
            found = await self.topics.describe_configs(r["resource_name"])
        except ReplogError as exc:
            return out | {"error_code": code_of(exc), "error_message": _message(exc)}
        keys = r["configuration_keys"]
        wanted = None if keys is None else set(keys)
        out["configs"] = [
            {
                "name": c.name,
                "value": c.value,
                "read_only": False,
                "config_source": (
                    DYNAMIC_TOPIC_CONFIG if c.source == topic_configs.TOPIC else DEFAULT_CONFIG
                ),
                "is_sensitive": False,
                "synonyms": [],
                "config_type": CONFIG_TYPES.get(c.name, 0),
                "documentation": None,
            }
            for c in found
            if wanted is None or c.name in wanted
        ]
        return out

    # -- AlterConfigs, IncrementalAlterConfigs ----------------------------------------------

    async def alter_configs(self, body: Body) -> Body:
        """The whole set: what a resource names is set, every other config is reset."""
        responses = []
        for r in body["resources"]:
            set_ = {c["name"]: c["value"] for c in r["configs"] if c["value"] is not None}
            delete = [n for n in topic_configs.NAMES if n not in set_]
            responses.append(await self._alter(r, set_, delete, body["validate_only"]))
        return {"responses": responses}

    async def incremental_alter_configs(self, body: Body) -> Body:
        responses = []
        for r in body["resources"]:
            set_: dict[str, str] = {}
            delete: list[str] = []
            refused = None
            for c in r["configs"]:
                if c["config_operation"] == OP_SET and c["value"] is not None:
                    set_[c["name"]] = c["value"]
                elif c["config_operation"] == OP_DELETE:
                    delete.append(c["name"])
                else:
                    refused = (
                        f"config {str(c['name'])[:64]!r}: operation {c['config_operation']} "
                        "is not supported (SET with a value, or DELETE)"
                    )
            if refused is not None:
                responses.append(_alter_answer(r, E.INVALID_REQUEST, refused))
                continue
            responses.append(await self._alter(r, set_, delete, body["validate_only"]))
        return {"responses": responses}

    async def _alter(
        self, r: Body, set_: dict[str, str], delete: list[str], validate_only: bool
    ) -> Body:
        if r["resource_type"] != TOPIC_RESOURCE:
            message = "only topic configs can be altered (a node's configs are its flags)"
            return _alter_answer(r, E.INVALID_REQUEST, message)
        alter = partial(
            self.topics.alter_configs,
            r["resource_name"],
            set_,
            delete,
            validate_only=validate_only,
        )
        try:
            await once_elected(alter)
        except ReplogError as exc:
            code = code_of(exc, controller=True)
            if code == E.INVALID_REQUEST:  # a bad config name or value
                code = E.INVALID_CONFIG
            return _alter_answer(r, code, _message(exc))
        return _alter_answer(r, E.NONE, None)

    # -- DeleteGroups -----------------------------------------------------------------------

    async def delete_groups(self, body: Body) -> Body:
        return {"results": [await self._delete_group(g) for g in body["groups_names"]]}

    async def _delete_group(self, name: str) -> Body:
        assert self.groups is not None and self.classic is not None, "wired before start"
        refused = await self.classic.check_delete(name)
        if refused is not None:
            return {"group_id": name, "error_code": refused}
        try:
            await self.groups.delete_group(name)
        except UnknownGroupError as exc:
            # a classic group that never committed exists at the edge only
            if not self.classic.forget(name):
                return {"group_id": name, "error_code": code_of(exc, coordinator=True)}
        except ReplogError as exc:
            return {"group_id": name, "error_code": code_of(exc, coordinator=True)}
        self.classic.forget(name)
        return {"group_id": name, "error_code": E.NONE}

    # -- DescribeCluster --------------------------------------------------------------------

    async def describe_cluster(self, body: Body) -> Body:
        brokers = await self.brokers()
        if body["endpoint_type"] != BROKERS_ENDPOINT:  # KRaft controllers: replog has none
            message = "replog serves broker endpoints only (endpoint_type 1)"
            return {"error_code": E.INVALID_REQUEST, "error_message": message, "brokers": []}
        return {
            "error_code": 0,
            "error_message": None,
            "endpoint_type": BROKERS_ENDPOINT,
            "cluster_id": CLUSTER_ID,
            "controller_id": controller_id(self.router, self.node_id, brokers),
            "brokers": [
                {"broker_id": i, "host": host, "port": port, "rack": None, "is_fenced": False}
                for i, (host, port) in sorted(brokers.items())
            ],
            "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }


def _alter_answer(r: Body, code: int, message: str | None) -> Body:
    return {
        "error_code": code,
        "error_message": message,
        "resource_type": r["resource_type"],
        "resource_name": r["resource_name"],
    }
