"""Kafka APIs under gRPC's ACL rules: one table, `TABLE`, from each Kafka API key to the
gRPC method whose rule (`edge/acl_table.TABLE`) decides it, and how the request names its
resources.

    Produce          Log/Append                write topic (each topic of the request)
    Fetch            Log/Fetch                 read topic
    ListOffsets      Admin/ListOffsets         describe topic
    Metadata         Admin/DescribeTopic       describe topic: a listing of all topics
                                               leaves out those the principal may not
                                               describe; a named one answers
                                               TOPIC_AUTHORIZATION_FAILED (as Kafka)
    CreateTopics     Admin/CreateTopic         create topic
    DeleteTopics     Admin/DeleteTopic         delete topic
    InitProducerId   Log/InitProducer          write producer <transactional id>; an
                                               idempotent producer: write on some topic or
                                               idempotent_write on the cluster
    FindCoordinator  Groups/FindCoordinator    describe group
    OffsetCommit     Groups/CommitOffsets      read group, read each topic
    OffsetFetch      Groups/FetchCommittedOffsets  read group, read each topic (a fetch of
                                               all the group's offsets leaves out topics
                                               the principal may not read)
    CreatePartitions Admin/CreatePartitions    alter topic
    DescribeConfigs  Admin/DescribeConfigs     describe topic (a broker resource: describe
                                               cluster)
    AlterConfigs, IncrementalAlterConfigs
                     Admin/AlterConfigs        alter topic (a broker resource: alter cluster)
    DeleteGroups     Groups/DeleteGroup        delete group (each group named)
    DescribeCluster  Admin/DescribeTopic       as Metadata: the brokers, to any principal
                                               let in (it names no topic)
    DescribeAcls     Acls/ListAcls             describe cluster
    CreateAcls       Acls/AddAcl               alter cluster
    DeleteAcls       Acls/RemoveAcl            alter cluster
    ApiVersions, SaslHandshake, SaslAuthenticate   open: they come before authentication

Kafka answers authorization per resource, so each request is split: the topics the
principal may use go to the handler, the others are answered TOPIC_AUTHORIZATION_FAILED
(a group: GROUP_AUTHORIZATION_FAILED; the cluster: CLUSTER_AUTHORIZATION_FAILED) and merged
into its response. Pure: `guard` takes the ACL check as a function (`May`).
tests/unit/test_kafka_authz.py checks that every API the listener serves has an entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from replog.kafka.errors import ErrorCode
from replog.kafka.protocol import ApiKey
from replog.server.edge.acl_table import ACLS, ADMIN, GROUPS, LOG
from replog.server.edge.acl_table import TABLE as GRPC_TABLE
from replog.server.kafka_edge.classic import JoinReply, SyncReply
from replog.server.kafka_edge.classic_groups import join_body, sync_body

Body = dict[str, Any]
May = Callable[[str, str, str], bool]  # operation, resource type, name
Merge = Callable[[Body | None], Body | None]
TOPIC_DENIED: Final = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED: Final = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED: Final = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
GROUP_KEY = 0


@dataclass(frozen=True, slots=True)
class Guarded:
    """What is left of a request once the denied resources are taken out: `body` for the
    handler (None: nothing is left; the handler is not called), `merge` turning the
    handler's response (None when not called) into the client's, `denied`: (operation,
    resource type, name) refused, for the audit log."""

    body: Body | None
    merge: Merge
    denied: tuple[tuple[str, str, str], ...] = ()


def _same(response: Body | None) -> Body | None:
    return response


@dataclass(frozen=True, slots=True)
class KafkaRule:
    method: str  # the gRPC method whose rule decides ("": open, before authentication)
    guard: Callable[[May, int, Body], Guarded] | None = None

    @property
    def operation(self) -> str:
        return GRPC_TABLE[self.method].operation if self.method else ""


def _split(
    items: list[Body], key: str, may: Callable[[str], bool]
) -> tuple[list[Body], list[Body]]:
    allowed = [t for t in items if may(t[key])]
    return allowed, [t for t in items if not may(t[key])]


def _topics_guard(
    list_key: str,
    name_key: str,
    response_key: str,
    refused: Callable[[Body], Body],
    operation: str,
) -> Callable[[May, int, Body], Guarded]:
    """A request of topics (`body[list_key]`, each named by `name_key`) answered by a list
    of topics (`response[response_key]`): the denied ones answered `refused(topic)`."""

    def guard(may: May, version: int, body: Body) -> Guarded:
        allowed, denied = _split(
            body[list_key] or [], name_key, lambda n: may(operation, "topic", n)
        )
        if not denied:
            return Guarded(body, _same)
        answers = [refused(t) for t in denied]

        def merge(response: Body | None) -> Body | None:
            if response is None:
                return None
            return response | {response_key: [*response[response_key], *answers]}

        names = tuple((operation, "topic", str(t[name_key])) for t in denied)
        return Guarded(body | {list_key: allowed}, merge, names)

    return guard


def _produce_refused(t: Body) -> Body:
    parts = [
        {"index": p["index"], "error_code": TOPIC_DENIED, "base_offset": -1}
        | {"log_append_time_ms": -1, "log_start_offset": -1}
        for p in t["partition_data"]
    ]
    return {"name": t["name"], "partition_responses": parts}


def _fetch_refused(t: Body) -> Body:
    parts = [
        {"partition_index": p["partition"], "error_code": TOPIC_DENIED, "high_watermark": -1}
        | {"last_stable_offset": -1, "log_start_offset": -1, "records": b""}
        | {"aborted_transactions": None}
        for p in t["partitions"]
    ]
    return {"topic": t["topic"], "partitions": parts}


def _list_offsets_refused(t: Body) -> Body:
    parts = [
        {"partition_index": p["partition_index"], "error_code": TOPIC_DENIED, "timestamp": -1}
        | {"offset": -1, "leader_epoch": -1}
        for p in t["partitions"]
    ]
    return {"name": t["name"], "partitions": parts}


def _create_refused(t: Body) -> Body:
    return {"name": t["name"], "error_code": TOPIC_DENIED, "num_partitions": -1} | {
        "replication_factor": -1,
        "error_message": "Authorization failed.",
    }


def _delete_guard(may: May, version: int, body: Body) -> Guarded:
    names = list(body["topic_names"])
    denied = [n for n in names if not may("delete", "topic", n)]
    if not denied:
        return Guarded(body, _same)
    answers = [{"name": n, "error_code": TOPIC_DENIED} for n in denied]

    def merge(response: Body | None) -> Body | None:
        assert response is not None
        return response | {"responses": [*response["responses"], *answers]}

    allowed = [n for n in names if n not in denied]
    return Guarded(
        body | {"topic_names": allowed}, merge, tuple(("delete", "topic", n) for n in denied)
    )


def _metadata_guard(may: May, version: int, body: Body) -> Guarded:
    asked = body["topics"]
    listing = asked is None or (version == 0 and not asked)

    def merge(response: Body | None) -> Body | None:
        assert response is not None
        topics = []
        for t in response["topics"]:
            if may("describe", "topic", t["name"]):
                topics.append(t)
            elif not listing:  # named: say so without saying whether it exists
                topics.append({"error_code": TOPIC_DENIED, "name": t["name"], "partitions": []})
        return response | {"topics": topics}

    named = [] if listing else [t["name"] for t in asked if t["name"] is not None]
    denied = tuple(("describe", "topic", n) for n in named if not may("describe", "topic", n))
    return Guarded(body, merge, denied)


def _init_producer_guard(may: May, version: int, body: Body) -> Guarded:
    name = body["transactional_id"]
    if name is None:  # idempotent: may("idempotent_write") is the listener's special check
        if may("idempotent_write", "cluster", ""):
            return Guarded(body, _same)
        code, denied = CLUSTER_DENIED, ("idempotent_write", "cluster", "")
    elif may("write", "producer", name):
        return Guarded(body, _same)
    else:
        code, denied = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ("write", "producer", name)
    answer = {"error_code": code, "producer_id": -1, "producer_epoch": -1}
    return Guarded(None, lambda _r: answer, (denied,))


def _find_coordinator_guard(may: May, version: int, body: Body) -> Guarded:
    if body["key_type"] != GROUP_KEY:
        return Guarded(body, _same)  # transactions: answered by the handler (not served)
    keys = body["coordinator_keys"] if version >= 4 else [body["key"]]
    denied = [k for k in keys if not may("describe", "group", k)]
    if not denied:
        return Guarded(body, _same)
    answers = [
        {"key": k, "node_id": -1, "host": "", "port": -1, "error_code": GROUP_DENIED}
        | {"error_message": "Authorization failed."}
        for k in denied
    ]
    audit = tuple(("describe", "group", k) for k in denied)
    if version < 4:
        return Guarded(None, lambda _r: answers[0], audit)
    allowed = [k for k in keys if k not in denied]

    def merge(response: Body | None) -> Body | None:
        found = response["coordinators"] if response is not None else []
        return {"coordinators": [*found, *answers]}

    return Guarded(body | {"coordinator_keys": allowed} if allowed else None, merge, audit)


def _offset_commit_guard(may: May, version: int, body: Body) -> Guarded:
    group = body["group_id"]
    topics = body["topics"]
    group_ok = may("read", "group", group)
    allowed, denied = _split(topics, "name", lambda n: group_ok and may("read", "topic", n))
    if not denied:
        return Guarded(body, _same)
    code = TOPIC_DENIED if group_ok else GROUP_DENIED
    answers = [
        {
            "name": t["name"],
            "partitions": [
                {"partition_index": p["partition_index"], "error_code": code}
                for p in t["partitions"]
            ],
        }
        for t in denied
    ]

    def merge(response: Body | None) -> Body | None:
        found = response["topics"] if response is not None else []
        return {"topics": [*found, *answers]}

    audit = (
        tuple(("read", "topic", t["name"]) for t in denied)
        if group_ok
        else (("read", "group", group),)
    )
    return Guarded(body | {"topics": allowed} if allowed else None, merge, audit)


def _offset_fetch_guard(may: May, version: int, body: Body) -> Guarded:
    group = body["group_id"]
    if not may("read", "group", group):
        answer = {"error_code": GROUP_DENIED, "topics": []}
        return Guarded(None, lambda _r: answer, (("read", "group", group),))
    if body["topics"] is None:  # all of the group's offsets: those of readable topics

        def keep_readable(response: Body | None) -> Body | None:
            assert response is not None
            seen = [t for t in response["topics"] if may("read", "topic", t["name"])]
            return response | {"topics": seen}

        return Guarded(body, keep_readable)
    allowed, denied = _split(body["topics"], "name", lambda n: may("read", "topic", n))
    if not denied:
        return Guarded(body, _same)
    answers = [
        {
            "name": t["name"],
            "partitions": [
                {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1}
                | {"metadata": None, "error_code": TOPIC_DENIED}
                for p in t["partition_indexes"]
            ],
        }
        for t in denied
    ]

    def merge(response: Body | None) -> Body | None:
        found = response["topics"] if response is not None else []
        code = response["error_code"] if response is not None else 0
        return {"error_code": code, "topics": [*found, *answers]}

    audit = tuple(("read", "topic", t["name"]) for t in denied)
    return Guarded(body | {"topics": allowed} if allowed else None, merge, audit)


def _group_guard(
    operation: str, refused: Callable[[int, Body], Body]
) -> Callable[[May, int, Body], Guarded]:
    """A request about one group (`body["group_id"]`): `operation` on it, else
    `refused(version, body)` (GROUP_AUTHORIZATION_FAILED) and the handler is not called."""

    def guard(may: May, version: int, body: Body) -> Guarded:
        group = body["group_id"]
        if may(operation, "group", group):
            return Guarded(body, _same)
        answer = refused(version, body)
        return Guarded(None, lambda _r: answer, ((operation, "group", group),))

    return guard


def _join_refused(version: int, body: Body) -> Body:
    return join_body(version, JoinReply(GROUP_DENIED, body["member_id"]))


def _sync_refused(version: int, body: Body) -> Body:
    return sync_body(version, SyncReply(GROUP_DENIED))


def _leave_refused(version: int, body: Body) -> Body:
    return {"error_code": GROUP_DENIED} | ({"members": []} if version >= 3 else {})


def _describe_groups_guard(may: May, version: int, body: Body) -> Guarded:
    """Each group named needs describe on it (Kafka's DescribeGroups): the others are
    answered GROUP_AUTHORIZATION_FAILED, in the order asked."""
    names = list(body["groups"])
    denied = [g for g in names if not may("describe", "group", g)]
    if not denied:
        return Guarded(body, _same)
    allowed = [g for g in names if g not in denied]

    def merge(response: Body | None) -> Body | None:
        found = {g["group_id"]: g for g in (response["groups"] if response else [])}
        out = []
        for name in names:
            if name in found:
                out.append(found[name])
            else:
                out.append(
                    {"group_id": name, "error_code": GROUP_DENIED, "group_state": ""}
                    | {"protocol_type": "", "protocol_data": "", "members": []}
                    | {"authorized_operations": -2147483648}
                )
        return {"groups": out}

    audit = tuple(("describe", "group", g) for g in denied)
    return Guarded(body | {"groups": allowed} if allowed else None, merge, audit)


def _list_groups_guard(may: May, version: int, body: Body) -> Guarded:
    """Every group to a principal that may describe the cluster; else only the groups it
    may describe (as Kafka lists them)."""
    if may("describe", "cluster", ""):
        return Guarded(body, _same)

    def keep_describable(response: Body | None) -> Body | None:
        assert response is not None
        seen = [g for g in response["groups"] if may("describe", "group", g["group_id"])]
        return response | {"groups": seen}

    return Guarded(body, keep_describable)


def _create_partitions_refused(t: Body) -> Body:
    return {"name": t["name"], "error_code": TOPIC_DENIED, "error_message": "Authorization failed."}


# Kafka's ConfigResource types (admin.py serves TOPIC; BROKER is the cluster here)
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


def _configs_guard(operation: str, response_key: str) -> Callable[[May, int, Body], Guarded]:
    """DescribeConfigs / AlterConfigs / IncrementalAlterConfigs: `operation` on each topic
    resource (TOPIC_AUTHORIZATION_FAILED), on the cluster for a broker resource
    (CLUSTER_AUTHORIZATION_FAILED); other types go to the handler (INVALID_REQUEST)."""

    def denied_code(may: May, r: Body) -> int | None:
        if r["resource_type"] == TOPIC_RESOURCE:
            return None if may(operation, "topic", r["resource_name"]) else TOPIC_DENIED
        if r["resource_type"] == BROKER_RESOURCE:
            return None if may(operation, "cluster", "") else CLUSTER_DENIED
        return None

    def guard(may: May, version: int, body: Body) -> Guarded:
        codes = [denied_code(may, r) for r in body["resources"]]
        if not any(codes):
            return Guarded(body, _same)
        allowed = [r for r, c in zip(body["resources"], codes, strict=True) if c is None]
        answers = [
            {"error_code": c, "error_message": "Authorization failed."}
            | {"resource_type": r["resource_type"], "resource_name": r["resource_name"]}
            | ({"configs": []} if response_key == "results" else {})
            for r, c in zip(body["resources"], codes, strict=True)
            if c is not None
        ]

        def merge(response: Body | None) -> Body | None:
            found = response[response_key] if response is not None else []
            return {response_key: [*found, *answers]}

        audit = tuple(
            (operation, "topic" if c == TOPIC_DENIED else "cluster", str(r["resource_name"]))
            for r, c in zip(body["resources"], codes, strict=True)
            if c is not None
        )
        return Guarded(body | {"resources": allowed} if allowed else None, merge, audit)

    return guard


def _delete_groups_guard(may: May, version: int, body: Body) -> Guarded:
    """delete on each group named (gRPC's DeleteGroup); the others GROUP_AUTHORIZATION_FAILED."""
    operation = _op(GROUPS + "DeleteGroup")
    names = list(body["groups_names"])
    denied = [g for g in names if not may(operation, "group", g)]
    if not denied:
        return Guarded(body, _same)
    allowed = [g for g in names if g not in denied]
    answers = [{"group_id": g, "error_code": GROUP_DENIED} for g in denied]

    def merge(response: Body | None) -> Body | None:
        found = response["results"] if response is not None else []
        return {"results": [*found, *answers]}

    audit = tuple((operation, "group", g) for g in denied)
    return Guarded(body | {"groups_names": allowed} if allowed else None, merge, audit)


def _brokers_guard(may: May, version: int, body: Body) -> Guarded:
    """DescribeCluster names no topic: its brokers and controller are what Metadata tells
    any principal the listener let in, so nothing is split off."""
    return Guarded(body, _same)


def _cluster_guard(
    method: str, refused: Callable[[Body], Body]
) -> Callable[[May, int, Body], Guarded]:
    """A request decided whole by gRPC's cluster right for `method` (the ACL APIs): denied,
    it is answered `refused(body)` (CLUSTER_AUTHORIZATION_FAILED), the connection kept."""
    operation = _op(method)

    def guard(may: May, version: int, body: Body) -> Guarded:
        if may(operation, "cluster", ""):
            return Guarded(body, _same)
        answer = refused(body)
        return Guarded(None, lambda _r: answer, ((operation, "cluster", ""),))

    return guard


_DENIED_MESSAGE: Final = {"error_code": CLUSTER_DENIED, "error_message": "Authorization failed."}


def _describe_acls_refused(body: Body) -> Body:
    return _DENIED_MESSAGE | {"resources": []}


def _create_acls_refused(body: Body) -> Body:
    return {"results": [_DENIED_MESSAGE for _ in body["creations"]]}


def _delete_acls_refused(body: Body) -> Body:
    return {"filter_results": [_DENIED_MESSAGE | {"matching_acls": []} for _ in body["filters"]]}


def _op(method: str) -> str:
    """The operation gRPC's rule for `method` needs (one source for both protocols)."""
    return GRPC_TABLE[method].operation


OPEN: Final = KafkaRule("")
TABLE: Final[dict[int, KafkaRule]] = {
    ApiKey.API_VERSIONS: OPEN,
    ApiKey.SASL_HANDSHAKE: OPEN,
    ApiKey.SASL_AUTHENTICATE: OPEN,
    ApiKey.PRODUCE: KafkaRule(
        LOG + "Append",
        _topics_guard("topic_data", "name", "responses", _produce_refused, _op(LOG + "Append")),
    ),
    ApiKey.FETCH: KafkaRule(
        LOG + "Fetch",
        _topics_guard("topics", "topic", "responses", _fetch_refused, _op(LOG + "Fetch")),
    ),
    ApiKey.LIST_OFFSETS: KafkaRule(
        ADMIN + "ListOffsets",
        _topics_guard(
            "topics", "name", "topics", _list_offsets_refused, _op(ADMIN + "ListOffsets")
        ),
    ),
    ApiKey.METADATA: KafkaRule(ADMIN + "DescribeTopic", _metadata_guard),
    ApiKey.CREATE_TOPICS: KafkaRule(
        ADMIN + "CreateTopic",
        _topics_guard("topics", "name", "topics", _create_refused, _op(ADMIN + "CreateTopic")),
    ),
    ApiKey.DELETE_TOPICS: KafkaRule(ADMIN + "DeleteTopic", _delete_guard),
    ApiKey.INIT_PRODUCER_ID: KafkaRule(LOG + "InitProducer", _init_producer_guard),
    ApiKey.FIND_COORDINATOR: KafkaRule(GROUPS + "FindCoordinator", _find_coordinator_guard),
    ApiKey.OFFSET_COMMIT: KafkaRule(GROUPS + "CommitOffsets", _offset_commit_guard),
    ApiKey.OFFSET_FETCH: KafkaRule(GROUPS + "FetchCommittedOffsets", _offset_fetch_guard),
    # the classic group protocol: read on the group, as gRPC's JoinGroup/Heartbeat/LeaveGroup
    ApiKey.JOIN_GROUP: KafkaRule(
        GROUPS + "JoinGroup", _group_guard(_op(GROUPS + "JoinGroup"), _join_refused)
    ),
    ApiKey.SYNC_GROUP: KafkaRule(
        GROUPS + "JoinGroup", _group_guard(_op(GROUPS + "JoinGroup"), _sync_refused)
    ),
    ApiKey.HEARTBEAT: KafkaRule(
        GROUPS + "Heartbeat",
        _group_guard(_op(GROUPS + "Heartbeat"), lambda _v, _b: {"error_code": GROUP_DENIED}),
    ),
    ApiKey.LEAVE_GROUP: KafkaRule(
        GROUPS + "LeaveGroup", _group_guard(_op(GROUPS + "LeaveGroup"), _leave_refused)
    ),
    ApiKey.DESCRIBE_GROUPS: KafkaRule(GROUPS + "DescribeGroup", _describe_groups_guard),
    ApiKey.LIST_GROUPS: KafkaRule(GROUPS + "ListGroups", _list_groups_guard),
    # the admin APIs (admin.py)
    ApiKey.CREATE_PARTITIONS: KafkaRule(
        ADMIN + "CreatePartitions",
        _topics_guard(
            "topics",
            "name",
            "results",
            _create_partitions_refused,
            _op(ADMIN + "CreatePartitions"),
        ),
    ),
    ApiKey.DESCRIBE_CONFIGS: KafkaRule(
        ADMIN + "DescribeConfigs", _configs_guard(_op(ADMIN + "DescribeConfigs"), "results")
    ),
    ApiKey.ALTER_CONFIGS: KafkaRule(
        ADMIN + "AlterConfigs", _configs_guard(_op(ADMIN + "AlterConfigs"), "responses")
    ),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: KafkaRule(
        ADMIN + "AlterConfigs", _configs_guard(_op(ADMIN + "AlterConfigs"), "responses")
    ),
    ApiKey.DELETE_GROUPS: KafkaRule(GROUPS + "DeleteGroup", _delete_groups_guard),
    ApiKey.DESCRIBE_CLUSTER: KafkaRule(ADMIN + "DescribeTopic", _brokers_guard),  # as Metadata
    # the ACL APIs (acls.py): gRPC's Acls rules, the cluster's describe / alter
    ApiKey.DESCRIBE_ACLS: KafkaRule(
        ACLS + "ListAcls", _cluster_guard(ACLS + "ListAcls", _describe_acls_refused)
    ),
    ApiKey.CREATE_ACLS: KafkaRule(
        ACLS + "AddAcl", _cluster_guard(ACLS + "AddAcl", _create_acls_refused)
    ),
    ApiKey.DELETE_ACLS: KafkaRule(
        ACLS + "RemoveAcl", _cluster_guard(ACLS + "RemoveAcl", _delete_acls_refused)
    ),
}
# An API served without an entry here (never in CI: the table test) needs the strictest
# right: alter on the cluster, else CLUSTER_AUTHORIZATION_FAILED and the connection closed.
STRICTEST: Final = KafkaRule(ADMIN + "AddNode")


def rule_for(api_key: int) -> KafkaRule:
    return TABLE.get(api_key, STRICTEST)


def guard(rule: KafkaRule, may: May, version: int, body: Body) -> Guarded | None:
    """The request split by `may` (None: the API has no per-resource split; `may` on its
    gRPC rule's cluster operation decides it whole)."""
    if rule.guard is None:
        return None
    return rule.guard(may, version, body)
