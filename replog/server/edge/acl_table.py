"""Authorization as one table: every RPC of every `replog.v1` service, and what it needs.

`TABLE[method]` is a `Rule` of one of three kinds:

    acl            a client call: `operation` on the resource `resource_type` named by the
                   request's `field` (the cluster when None); plus `operation`... on each
                   topic `topics(request)` names (group calls: read on every topic they
                   name); `special` for the checks a column cannot say (InitProducer)
    authenticated  any authenticated caller; its reply is filtered (`reply_filter`) to what
                   the caller may describe (GetMetadata)
    peer           between nodes only: never served on the client listener
                   (exposure.PeerOnly); on the peer listener a member's certificate
                   (listeners.MembersOnly, the replication transport, `identify_allowed`)

A super-user (`--super-users`) may do everything. Like Kafka, `describe` is implied by
read, write, delete and alter on the same resource (a producer that may write a topic
sees it in GetMetadata). Producer names are a resource type of their own (`producer`,
Kafka's TransactionalId): InitProducer with a name needs `write` on it; an anonymous
idempotent producer needs `write` on some topic or `idempotent_write` on the cluster.

tests/unit/test_acl_table.py enumerates every method of every service from the protobuf
descriptors: a new RPC without an entry here fails CI. The rules are pure: `denial` takes
the ACL check as a function (`Allowed`, `MetadataImage.allowed` in the node).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

Allowed = Callable[[str, str, str, str], bool]  # principal, operation, resource type, name
Writes = Callable[[str], bool]  # whether the principal may write some topic

IMPLYING_DESCRIBE = ("read", "write", "delete", "alter")
NAME_CHARS_MAX = 100
NAMED_TOPICS_MAX = 10_000  # more: the request is refused by its handler anyway


@dataclass(frozen=True, slots=True)
class Rule:
    kind: str  # "acl" | "authenticated" | "peer"
    operation: str = ""
    resource_type: str = ""
    field: str | None = None
    topics: Callable[[Any], Iterable[str]] | None = None
    special: str = ""  # "init_producer"
    reply_filter: str = ""  # "metadata" | "committed_offsets"


@dataclass(frozen=True, slots=True)
class Denied:
    """What a principal may not do: operation on (resource type, name)."""

    operation: str
    resource_type: str
    name: str

    def describe(self, principal: str) -> str:
        what = (
            "the cluster"
            if self.resource_type == "cluster"
            else f"{self.resource_type} {self.name[:NAME_CHARS_MAX]!r}"
        )
        hint = (
            " (an idempotent producer needs write on some topic, or idempotent_write on the "
            "cluster)"
            if self.operation == "idempotent_write"
            else ""
        )
        return f"{principal[:NAME_CHARS_MAX]} may not {self.operation} {what}{hint}"


def _acl(operation: str, resource_type: str, field: str | None = None, **kw: Any) -> Rule:
    return Rule("acl", operation, resource_type, field, **kw)


def _joined_topics(request: Any) -> Iterable[str]:
    return list(request.topics)[:NAMED_TOPICS_MAX]


def _committed_topics(request: Any) -> Iterable[str]:
    return {o.topic for o in list(request.offsets)[:NAMED_TOPICS_MAX]}


def _fetched_topics(request: Any) -> Iterable[str]:
    return {p.topic for p in list(request.partitions)[:NAMED_TOPICS_MAX]}


PEER = Rule("peer")
LOG = "/replog.v1.Log/"
ADMIN = "/replog.v1.Admin/"
ACLS = "/replog.v1.Acls/"
GROUPS = "/replog.v1.Groups/"
TABLE: dict[str, Rule] = {
    LOG + "Append": _acl("write", "topic", "topic"),
    LOG + "AppendStream": _acl("write", "topic", "topic"),  # each request's topic
    LOG + "Fetch": _acl("read", "topic", "topic"),
    LOG + "StreamFrom": _acl("read", "topic", "topic"),
    LOG + "InitProducer": _acl("write", "producer", "name", special="init_producer"),
    ADMIN + "CreateTopic": _acl("create", "topic", "name"),
    ADMIN + "DeleteTopic": _acl("delete", "topic", "name"),
    ADMIN + "ListTopics": _acl("describe", "cluster"),
    ADMIN + "DescribeTopic": _acl("describe", "topic", "name"),
    ADMIN + "GetMetadata": Rule("authenticated", reply_filter="metadata"),
    ADMIN + "ListOffsets": _acl("describe", "topic", "topic"),
    ADMIN + "TransferLeadership": _acl("alter", "cluster"),
    ADMIN + "ReassignPartition": _acl("alter", "cluster"),
    ADMIN + "CreatePartitions": _acl("alter", "topic", "topic"),  # as Kafka
    ADMIN + "AddNode": _acl("alter", "cluster"),
    ADMIN + "RemoveNode": _acl("alter", "cluster"),
    ADMIN + "DescribeConfigs": _acl("describe", "topic", "topic"),
    ADMIN + "AlterConfigs": _acl("alter", "topic", "topic"),
    ACLS + "AddAcl": _acl("alter", "cluster"),
    ACLS + "RemoveAcl": _acl("alter", "cluster"),
    ACLS + "ListAcls": _acl("describe", "cluster"),
    ACLS + "SetQuota": _acl("alter", "cluster"),
    ACLS + "ListQuotas": _acl("describe", "cluster"),
    ACLS + "WhoAmI": Rule("authenticated"),  # the caller's own principal
    # Consumer groups: the group's ACLs, and read on every topic the call names (a member
    # then reads its partitions with the topics' ACLs).
    GROUPS + "FindCoordinator": _acl("describe", "group", "group"),
    GROUPS + "JoinGroup": _acl("read", "group", "group", topics=_joined_topics),
    GROUPS + "Heartbeat": _acl("read", "group", "group"),
    GROUPS + "LeaveGroup": _acl("read", "group", "group"),
    GROUPS + "CommitOffsets": _acl("read", "group", "group", topics=_committed_topics),
    GROUPS + "FetchCommittedOffsets": _acl(
        "read", "group", "group", topics=_fetched_topics, reply_filter="committed_offsets"
    ),
    GROUPS + "DescribeGroup": _acl("describe", "group", "group"),
    GROUPS + "DeleteGroup": _acl("delete", "group", "group"),
    GROUPS + "ListGroups": _acl("describe", "cluster"),
    "/replog.v1.Nodes/Identify": PEER,
    "/replog.v1.Nodes/Join": PEER,
    "/replog.v1.Replication/Exchange": PEER,
    "/replog.v1.Replication/ExchangeBatches": PEER,
    "/replog.v1.Replication/ShareLeaders": PEER,
}
STRICTEST = _acl("alter", "cluster")  # a method missing here (never in CI: the table test)
GUARDED_SERVICES = (LOG, ADMIN, ACLS, GROUPS)


def rule_for(method: str) -> Rule:
    return TABLE.get(method, STRICTEST)


def may(allowed: Allowed, principal: str, operation: str, resource_type: str, name: str) -> bool:
    """`allowed`, with describe implied by read, write, delete and alter."""
    if allowed(principal, operation, resource_type, name):
        return True
    return operation == "describe" and any(
        allowed(principal, op, resource_type, name) for op in IMPLYING_DESCRIBE
    )


def denial(
    allowed: Allowed, writes_some_topic: Writes, principal: str, rule: Rule, request: Any
) -> Denied | None:
    """What `principal` may not do of `request` under `rule` (None: it may do it all)."""
    if rule.kind != "acl":
        return None
    name = str(getattr(request, rule.field, "")) if rule.field else ""
    if rule.special == "init_producer" and not name:
        # An anonymous idempotent producer: a writer of some topic, or a cluster grant.
        if writes_some_topic(principal) or allowed(principal, "idempotent_write", "cluster", ""):
            return None
        return Denied("idempotent_write", "cluster", "")
    if not may(allowed, principal, rule.operation, rule.resource_type, name):
        return Denied(rule.operation, rule.resource_type, name)
    if rule.topics is not None:
        for topic in sorted(set(rule.topics(request))):
            if not may(allowed, principal, "read", "topic", topic):
                return Denied("read", "topic", topic)
    return None


def topic_matcher(
    acls: Iterable[Any], principal: str, operations: tuple[str, ...]
) -> Callable[[str], bool]:
    """Whether `principal` has one of `operations` on a topic, decided from `acls`
    (`AclEntry`s) gathered once: a set of names and a tuple of prefixes, so that a reply of
    many topics costs a lookup per topic, not a scan of the ACLs per topic."""
    exact: set[str] = set()
    prefixes: list[str] = []
    for a in acls:
        if a.operation not in (*operations, "all"):
            continue
        if not a.grants(principal, a.operation, a.resource_type, a.resource_name):
            continue  # another principal's (a grant always covers its own resource)
        if a.resource_type == "cluster":
            return lambda _name: True
        if a.resource_type == "topic":
            (prefixes.append if a.prefix else exact.add)(a.resource_name)
    starts = tuple(prefixes)
    return lambda name: name in exact or (bool(starts) and name.startswith(starts))


def filter_reply(acls: Iterable[Any], principal: str, rule: Rule, reply: Any) -> Any:
    """`reply`, or a copy without what `principal` may not see (the reply itself is never
    changed: a handler may keep and reuse it); `acls`: the `AclEntry`s in force."""
    if rule.reply_filter == "metadata":
        field = "topics"
        sees = topic_matcher(acls, principal, ("describe", *IMPLYING_DESCRIBE))
        keep = [t for t in reply.topics if sees(t.name)]
    elif rule.reply_filter == "committed_offsets":
        field = "offsets"
        sees = topic_matcher(acls, principal, ("read",))
        keep = [o for o in reply.offsets if sees(o.topic)]
    else:
        return reply
    if len(keep) == len(getattr(reply, field)):
        return reply
    out = type(reply)()
    out.CopyFrom(reply)
    del getattr(out, field)[:]
    getattr(out, field).extend(keep)
    return out
