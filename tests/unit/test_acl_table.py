"""Authorization as one table (edge/acl_table.py): every RPC has an entry, and the rules
say what issue 28 asks of each gap."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

import pytest

import replog.v1
from replog.server.edge import acl_table
from replog.server.edge.acl_table import TABLE, Denied, denial, filter_reply, rule_for
from replog.server.edge.exposure import PEER_ONLY_SERVICES
from replog.server.meta.metadata import AclEntry
from replog.v1 import admin_pb2, groups_pb2, log_pb2


def every_method() -> Iterator[str]:
    """`/package.Service/Method` of every service in every replog.v1 descriptor."""
    for module in pkgutil.iter_modules(replog.v1.__path__):
        if not module.name.endswith("_pb2"):
            continue
        descriptor = importlib.import_module(f"replog.v1.{module.name}").DESCRIPTOR
        for service in descriptor.services_by_name.values():
            for method in service.methods:
                yield f"/{service.full_name}/{method.name}"


def test_every_rpc_of_every_service_has_exactly_one_entry() -> None:
    methods = sorted(every_method())
    assert len(methods) >= 30  # the descriptors were found
    missing = [m for m in methods if m not in TABLE]
    assert not missing, f"RPCs without an authorization entry in acl_table.TABLE: {missing}"
    stale = sorted(set(TABLE) - set(methods))
    assert not stale, f"entries for RPCs that do not exist: {stale}"


def test_peer_only_methods_are_exactly_the_services_the_client_listener_refuses() -> None:
    for method, rule in TABLE.items():
        assert (rule.kind == "peer") == method.startswith(PEER_ONLY_SERVICES), method
        if rule.kind == "acl":
            assert rule.operation and rule.resource_type, method
            assert method.startswith(acl_table.GUARDED_SERVICES), method


def test_an_unknown_method_needs_the_strictest_right() -> None:
    assert rule_for("/replog.v1.Admin/SomethingNew") == acl_table.STRICTEST


# -- the rules, against a plain set of ACLs ------------------------------------------------


class Acls:
    def __init__(self, *entries: tuple[str, str, str, str]) -> None:
        self.entries = [AclEntry.checked(p, t, n, False, op) for p, op, t, n in entries]

    def allowed(self, principal: str, operation: str, resource_type: str, name: str) -> bool:
        return any(e.grants(principal, operation, resource_type, name) for e in self.entries)

    def writes_some_topic(self, principal: str) -> bool:
        return any(
            e.operation in ("write", "all")
            and e.resource_type in ("topic", "cluster")
            and e.grants(principal, e.operation, e.resource_type, e.resource_name)
            for e in self.entries
        )

    def denial(self, method: str, request: object, principal: str = "User:alice") -> object:
        return denial(self.allowed, self.writes_some_topic, principal, TABLE[method], request)


ALICE_READS_GROUP = ("User:alice", "read", "group", "g")
ALICE_READS_A = ("User:alice", "read", "topic", "a")


@pytest.mark.parametrize(
    ("method", "request_"),
    [
        ("/replog.v1.Groups/JoinGroup", groups_pb2.JoinGroupRequest(group="g", topics=["a", "b"])),
        (
            "/replog.v1.Groups/CommitOffsets",
            groups_pb2.CommitOffsetsRequest(
                group="g",
                offsets=[
                    groups_pb2.OffsetCommit(topic="a", partition=0, offset=1),
                    groups_pb2.OffsetCommit(topic="b", partition=0, offset=1),
                ],
            ),
        ),
        (
            "/replog.v1.Groups/FetchCommittedOffsets",
            groups_pb2.FetchCommittedOffsetsRequest(
                group="g", partitions=[groups_pb2.TopicPartition(topic="b", partition=0)]
            ),
        ),
    ],
)
def test_group_calls_need_read_on_the_group_and_on_every_topic_they_name(
    method: str, request_: object
) -> None:
    assert Acls(ALICE_READS_A).denial(method, request_) == Denied("read", "group", "g")
    assert Acls(ALICE_READS_GROUP, ALICE_READS_A).denial(method, request_) == Denied(
        "read", "topic", "b"
    )
    both = Acls(ALICE_READS_GROUP, ALICE_READS_A, ("User:alice", "read", "topic", "b"))
    assert both.denial(method, request_) is None


def test_committed_offsets_of_unreadable_topics_are_left_out_of_the_reply() -> None:
    acls = Acls(ALICE_READS_GROUP, ALICE_READS_A)
    reply = groups_pb2.FetchCommittedOffsetsResponse(
        offsets=[
            groups_pb2.CommittedOffset(topic="a", partition=0, offset=5),
            groups_pb2.CommittedOffset(topic="secret", partition=0, offset=9),
        ]
    )
    rule = TABLE["/replog.v1.Groups/FetchCommittedOffsets"]
    shown = filter_reply(acls.entries, "User:alice", rule, reply)
    assert [o.topic for o in shown.offsets] == ["a"]
    assert len(reply.offsets) == 2  # the handler's reply itself is never changed


def test_metadata_lists_only_topics_the_caller_may_describe_read_or_write() -> None:
    acls = Acls(("User:alice", "write", "topic", "w"), ("User:alice", "describe", "topic", "d"))
    reply = admin_pb2.Metadata(
        topics=[admin_pb2.TopicMetadata(name=n) for n in ("d", "w", "hidden")]
    )
    rule = TABLE["/replog.v1.Admin/GetMetadata"]
    assert [t.name for t in filter_reply(acls.entries, "User:alice", rule, reply).topics] == [
        "d",
        "w",
    ]
    assert filter_reply(acls.entries, "User:bob", rule, reply).topics == []
    everything = Acls(("User:alice", "describe", "cluster", ""))
    assert filter_reply(everything.entries, "User:alice", rule, reply) is reply


def test_describe_topic_is_implied_by_read_but_not_by_nothing() -> None:
    method = "/replog.v1.Admin/DescribeTopic"
    request = admin_pb2.DescribeTopicRequest(name="a")
    assert Acls(ALICE_READS_A).denial(method, request) is None
    assert Acls().denial(method, request) == Denied("describe", "topic", "a")


def test_a_producer_name_is_a_resource_that_needs_write() -> None:
    method = "/replog.v1.Log/InitProducer"
    named = log_pb2.InitProducerRequest(name="orders-writer")
    writer = Acls(("User:alice", "write", "topic", "a"))
    assert writer.denial(method, named) == Denied("write", "producer", "orders-writer")
    owner = Acls(("User:alice", "write", "producer", "orders-writer"))
    assert owner.denial(method, named) is None
    assert owner.denial(method, named, "User:mallory") == Denied(
        "write", "producer", "orders-writer"
    )


def test_an_anonymous_idempotent_producer_needs_write_somewhere_or_a_cluster_grant() -> None:
    method = "/replog.v1.Log/InitProducer"
    anonymous = log_pb2.InitProducerRequest()
    assert Acls(ALICE_READS_A).denial(method, anonymous) == Denied(
        "idempotent_write", "cluster", ""
    )
    assert Acls(("User:alice", "write", "topic", "a")).denial(method, anonymous) is None
    grant = Acls(("User:alice", "idempotent_write", "cluster", ""))
    assert grant.denial(method, anonymous) is None


def test_peer_calls_are_not_acl_decisions() -> None:
    assert Acls().denial("/replog.v1.Replication/Exchange", object()) is None


def test_metadata_filter_follows_prefixes_any_user_and_other_principals() -> None:
    acls = [
        AclEntry.checked("User:alice", "topic", "orders.", True, "read"),
        AclEntry.checked("User:*", "topic", "public", False, "describe"),
        AclEntry.checked("User:bob", "topic", "bobs", False, "all"),
        AclEntry.checked("User:alice", "topic", "logs", False, "create"),  # no describe
    ]
    reply = admin_pb2.Metadata(
        topics=[
            admin_pb2.TopicMetadata(name=n)
            for n in ("orders.eu", "orders", "public", "bobs", "logs")
        ]
    )
    rule = TABLE["/replog.v1.Admin/GetMetadata"]
    assert [t.name for t in filter_reply(acls, "User:alice", rule, reply).topics] == [
        "orders.eu",
        "public",
    ]
    assert [t.name for t in filter_reply(acls, "User:bob", rule, reply).topics] == [
        "public",
        "bobs",
    ]
