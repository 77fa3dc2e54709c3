"""Kafka's ACL APIs onto replog's ACLs (kafka_edge/acls.py): the mapping both ways, what is
refused as inexpressible, Kafka's filter semantics, and every version's answers encoded
by the codec (flexible versions included); the handlers change ACLs only through the
change function they are given."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from replog.errors import NotFoundError
from replog.kafka import protocol
from replog.kafka.errors import ErrorCode
from replog.kafka.protocol import ApiKey, RequestHeader
from replog.server.kafka_edge import acls
from replog.server.kafka_edge.apis import SUPPORTED
from replog.server.meta.acls import AclEntry

Body = dict[str, Any]
T, G, C, TX = acls.TOPIC, acls.GROUP, acls.CLUSTER, acls.TRANSACTIONAL_ID
READ, WRITE, ALL, DESCRIBE_CONFIGS = 3, 4, 2, 10


def creation(**kw: Any) -> Body:
    base = {"resource_type": T, "resource_name": "orders", "resource_pattern_type": acls.LITERAL}
    base |= {"principal": "User:alice", "host": "*", "operation": READ}
    return base | {"permission_type": acls.ALLOW} | kw


def entry(kind: str, name: str, prefix: bool = False, op: str = "read") -> AclEntry:
    return AclEntry("User:alice", kind, name, prefix, op)


def test_kafka_acls_map_onto_replogs_and_back() -> None:
    cluster = {"resource_type": C, "resource_name": "kafka-cluster"}
    cases = [
        (creation(), entry("topic", "orders")),
        (
            creation(resource_type=G, resource_name="billing-", resource_pattern_type=4),
            entry("group", "billing-", True),
        ),
        (
            creation(resource_type=TX, resource_name="tx-1", operation=WRITE),
            entry("producer", "tx-1", op="write"),
        ),
        (creation(operation=ALL, **cluster), entry("cluster", "", op="all")),
        (creation(operation=12, **cluster), entry("cluster", "", op="idempotent_write")),
    ]
    for kafka, replog in cases:
        assert acls.to_entry(kafka) == replog
        assert acls.kafka_resource(replog) == (
            kafka["resource_type"],
            kafka["resource_name"],
            kafka["resource_pattern_type"],
        )


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"permission_type": 2}, "DENY"),
        ({"host": "10.0.0.1"}, "host"),
        ({"resource_name": "*"}, "wildcard"),
        ({"resource_type": 6}, "resource type"),
        ({"resource_type": 7}, "resource type"),
        ({"operation": DESCRIBE_CONFIGS}, "operation"),
        ({"operation": 9}, "operation"),
        ({"resource_pattern_type": acls.MATCH}, "pattern"),
        ({"resource_type": C, "resource_name": "other"}, "kafka-cluster"),
        ({"principal": "Group:x"}, "principal"),
        ({"resource_name": "bad/name"}, "topic"),
    ],
)
def test_what_replogs_acls_cannot_hold_is_refused_with_a_message(change: Body, says: str) -> None:
    with pytest.raises(acls.Inexpressible) as refused:
        acls.to_entry(creation(**change))
    assert says.lower() in str(refused.value).lower()


def flt(**kw: Any) -> acls.Filter:
    base = {"resource_type_filter": acls.ANY, "resource_name_filter": None}
    base |= {"pattern_type_filter": acls.ANY, "principal_filter": None, "host_filter": None}
    return acls.Filter.of(base | {"operation": acls.ANY, "permission_type": acls.ANY} | kw)


def test_filters_follow_kafkas_acl_binding_filter() -> None:
    literal, prefixed = entry("topic", "orders"), entry("topic", "ord", True)
    group, cluster = entry("group", "orders"), entry("cluster", "", op="all")
    every = [literal, prefixed, group, cluster]

    def matched(f: acls.Filter) -> list[AclEntry]:
        return [e for e in every if f.matches(e)]

    assert matched(flt()) == every
    assert matched(flt(resource_type_filter=T)) == [literal, prefixed]
    # MATCH: the ACLs that apply to topic "orders": the literal one and the prefix "ord"
    applies = flt(resource_type_filter=T, resource_name_filter="orders", pattern_type_filter=2)
    assert matched(applies) == [literal, prefixed]
    assert matched(flt(resource_name_filter="ord", pattern_type_filter=acls.PREFIXED)) == [prefixed]
    named = flt(resource_name_filter="orders", pattern_type_filter=acls.LITERAL)
    assert matched(named) == [literal, group]
    assert matched(flt(resource_name_filter="kafka-cluster")) == [cluster]
    assert matched(flt(operation=ALL)) == [cluster]
    assert matched(flt(principal_filter="User:bob")) == []
    assert matched(flt(permission_type=acls.DENY)) == []  # replog's ACLs all allow
    assert matched(flt(host_filter="10.0.0.1")) == [] and matched(flt(host_filter="*")) == every
    with pytest.raises(acls.Inexpressible):
        flt(pattern_type_filter=0)


class Changes:
    def __init__(self, entries: list[AclEntry]) -> None:
        self.entries = list(entries)
        self.calls: list[tuple[AclEntry, bool]] = []

    async def __call__(self, e: AclEntry, add: bool) -> None:
        self.calls.append((e, add))
        if add:
            self.entries.append(e)
        elif e in self.entries:
            self.entries.remove(e)
        else:
            raise NotFoundError("no such ACL")


def encoded(api: int, version: int, body: Body) -> Body:
    """`body` as a client decodes it (encoded by the codec at `version`)."""
    header = RequestHeader(api, version, 7, "c")
    payload = protocol.encode_response(header, body, any_version=True)
    return protocol.decode_response(api, version, payload[4:])[1]  # after the size


def test_the_handlers_change_acls_through_their_change_function_at_every_version() -> None:
    changes = Changes([entry("topic", "orders"), entry("group", "g")])
    handlers = acls.KafkaAcls(changes, lambda: changes.entries)
    lo, hi = SUPPORTED[ApiKey.CREATE_ACLS]
    assert (lo, hi) == SUPPORTED[ApiKey.DESCRIBE_ACLS] == SUPPORTED[ApiKey.DELETE_ACLS] == (1, 3)
    for version in range(lo, hi + 1):
        body = {"creations": [creation(resource_name="new"), creation(permission_type=2)]}
        created = asyncio.run(handlers.create_acls(version, body))
        codes = [r["error_code"] for r in encoded(ApiKey.CREATE_ACLS, version, created)["results"]]
        assert codes == [0, ErrorCode.INVALID_REQUEST]
        described = asyncio.run(
            handlers.describe_acls(version, _any_filter() | {"resource_type_filter": T})
        )
        got = encoded(ApiKey.DESCRIBE_ACLS, version, described)
        assert [r["resource_name"] for r in got["resources"]] == ["new", "orders"]
        assert got["resources"][0]["acls"] == [
            {"principal": "User:alice", "host": "*", "operation": READ, "permission_type": 3}
        ]
        new = _any_filter() | {"resource_name_filter": "new"}
        deleted = asyncio.run(handlers.delete_acls(version, {"filters": [new]}))
        (result,) = encoded(ApiKey.DELETE_ACLS, version, deleted)["filter_results"]
        assert [(m["resource_name"], m["error_code"]) for m in result["matching_acls"]] == [
            ("new", 0)
        ]
    assert changes.entries == [entry("topic", "orders"), entry("group", "g")]
    assert [add for _, add in changes.calls] == [True, False] * 3  # nothing for the DENY


def _any_filter() -> Body:
    return {
        "resource_type_filter": acls.ANY,
        "resource_name_filter": None,
        "pattern_type_filter": acls.ANY,
        "principal_filter": None,
        "host_filter": None,
        "operation": acls.ANY,
        "permission_type": acls.ANY,
    }


def test_the_acl_apis_need_describe_or_alter_on_the_cluster_as_grpcs_acls_calls() -> None:
    from replog.server.kafka_edge import authz

    def may_nothing(_op: str, _type: str, _name: str) -> bool:
        return False

    def may_describe(op: str, kind: str, _name: str) -> bool:
        return (op, kind) == ("describe", "cluster")

    bodies = {
        ApiKey.DESCRIBE_ACLS: _any_filter(),
        ApiKey.CREATE_ACLS: {"creations": [creation(), creation()]},
        ApiKey.DELETE_ACLS: {"filters": [_any_filter()]},
    }
    denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    for api, body in bodies.items():
        rule = authz.rule_for(api)
        for version in range(1, 4):
            refused = authz.guard(rule, may_nothing, version, body)
            assert refused is not None and refused.body is None
            answer = encoded(api, version, refused.merge(None) or {})
            codes = {
                ApiKey.DESCRIBE_ACLS: lambda a: [a["error_code"]],
                ApiKey.CREATE_ACLS: lambda a: [r["error_code"] for r in a["results"]],
                ApiKey.DELETE_ACLS: lambda a: [r["error_code"] for r in a["filter_results"]],
            }[api](answer)
            assert codes and set(codes) == {denied}
            assert refused.denied[0][1:] == ("cluster", "")
        allowed = authz.guard(rule, may_describe, 3, body)
        assert allowed is not None
        assert (allowed.body is not None) == (api == ApiKey.DESCRIBE_ACLS)
