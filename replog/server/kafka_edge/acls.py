"""Kafka's ACL APIs over replog's own ACLs (the cluster metadata's `AclEntry` set, the one
the gRPC `Acls` service changes and both listeners enforce):

    DescribeAcls  -> the metadata image's ACLs (this node's applied image, as ListAcls)
    CreateAcls    -> AclService.change(add): proposed on the metadata leader
    DeleteAcls    -> the ACLs each filter matches, each AclService.change(remove)

Mapping, both ways (anything else is answered INVALID_REQUEST with a message, and nothing
of that creation or filter is changed):

    Kafka resource type              replog resource_type
    TOPIC (2), GROUP (3)             topic, group
    TRANSACTIONAL_ID (5)             producer (an InitProducer name)
    CLUSTER (4), name kafka-cluster  cluster (name "")
    pattern LITERAL (3) / PREFIXED (4)   prefix False / True
    operation ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, IDEMPOTENT_WRITE
                                     all, read, write, create, delete, alter, describe,
                                     idempotent_write
    permission ALLOW (3), host "*"   every replog ACL (replog has no DENY and no hosts)

Not expressible, so refused on creation: DENY, a host other than "*", the literal
wildcard name "*" (replog has no wildcard resource; a cluster ACL covers every topic and
group), CLUSTER_ACTION / DESCRIBE_CONFIGS / ALTER_CONFIGS, DELEGATION_TOKEN / USER
resources. Filters (Describe/Delete) follow Kafka's AclBindingFilter: ANY matches
everything, MATCH the ACLs that apply to the named resource (literal equal, or a prefix
of it), a DENY filter matches nothing. Who may call them: authz.py (describe / alter on
the cluster, as gRPC's ListAcls / AddAcl / RemoveAcl).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from replog.errors import InvalidArgumentError, NotFoundError, ReplogError
from replog.kafka.errors import ErrorCode
from replog.server.kafka_edge.errors import code_of
from replog.server.meta.acls import AclEntry

Body = dict[str, Any]
E = ErrorCode
CLUSTER_NAME: Final = "kafka-cluster"  # the one CLUSTER resource's name in Kafka
WILDCARD: Final = "*"
# Kafka's ResourceType, PatternType, AclOperation, AclPermissionType
ANY: Final = 1
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 2, 3, 4, 5
MATCH, LITERAL, PREFIXED = 2, 3, 4
DENY, ALLOW = 2, 3
RESOURCE_TYPES: Final = {TOPIC: "topic", GROUP: "group", CLUSTER: "cluster"} | {
    TRANSACTIONAL_ID: "producer"
}
KAFKA_RESOURCE_TYPES: Final = {v: k for k, v in RESOURCE_TYPES.items()}
OPERATIONS: Final = {2: "all", 3: "read", 4: "write", 5: "create", 6: "delete", 7: "alter"} | {
    8: "describe",
    12: "idempotent_write",
}
KAFKA_OPERATIONS: Final = {v: k for k, v in OPERATIONS.items()}
AclChange = Callable[[AclEntry, bool], Awaitable[None]]  # entry, add (False: remove)


class Inexpressible(Exception):
    """A Kafka ACL or filter replog's ACLs cannot hold: INVALID_REQUEST with this message."""


def to_entry(c: Body) -> AclEntry:
    """A CreateAcls creation as replog's ACL (Inexpressible otherwise)."""
    if c["permission_type"] != ALLOW:
        raise Inexpressible("replog's ACLs allow only (no DENY): permission type must be ALLOW")
    if c["host"] != WILDCARD:
        raise Inexpressible('replog\'s ACLs name no hosts: host must be "*"')
    kind = RESOURCE_TYPES.get(c["resource_type"])
    if kind is None:
        raise Inexpressible("resource type must be TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID")
    operation = OPERATIONS.get(c["operation"])
    if operation is None:
        raise Inexpressible(f"operation must be one of {sorted(KAFKA_OPERATIONS)} (upper case)")
    pattern = c.get("resource_pattern_type", LITERAL)
    if pattern not in (LITERAL, PREFIXED):
        raise Inexpressible("pattern type must be LITERAL or PREFIXED")
    name = c["resource_name"]
    if kind == "cluster":
        if name != CLUSTER_NAME or pattern != LITERAL:
            raise Inexpressible(f"the CLUSTER resource is the literal {CLUSTER_NAME!r}")
        name = ""
    elif name == WILDCARD and pattern == LITERAL:
        raise Inexpressible(
            'replog has no wildcard resource name "*": a CLUSTER ACL covers every topic and group'
        )
    try:
        return AclEntry.checked(c["principal"], kind, name, pattern == PREFIXED, operation)
    except InvalidArgumentError as exc:
        raise Inexpressible(str(exc)[:200]) from None


def kafka_resource(entry: AclEntry) -> tuple[int, str, int]:
    """(resource type, name, pattern type) of a replog ACL, as Kafka names them."""
    if entry.resource_type == "cluster":
        return CLUSTER, CLUSTER_NAME, LITERAL
    return (
        KAFKA_RESOURCE_TYPES[entry.resource_type],
        entry.resource_name,
        PREFIXED if entry.prefix else LITERAL,
    )


@dataclass(frozen=True, slots=True)
class Filter:
    """Kafka's AclBindingFilter (None: any)."""

    resource_type: int
    name: str | None
    pattern: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    @classmethod
    def of(cls, f: Body) -> Filter:
        """From a DescribeAcls request or a DeleteAcls filter (Inexpressible when a field
        holds a value Kafka's filters have no meaning for)."""
        flt = cls(
            f["resource_type_filter"],
            f["resource_name_filter"],
            f.get("pattern_type_filter", LITERAL),
            f["principal_filter"],
            f["host_filter"],
            f["operation"],
            f["permission_type"],
        )
        if flt.resource_type not in (ANY, 6, 7, *RESOURCE_TYPES):
            raise Inexpressible("unknown resource type filter")
        if flt.pattern not in (ANY, MATCH, LITERAL, PREFIXED):
            raise Inexpressible("unknown pattern type filter")
        if flt.operation not in (ANY, 9, 10, 11, *OPERATIONS):
            raise Inexpressible("unknown operation filter")
        if flt.permission not in (ANY, DENY, ALLOW):
            raise Inexpressible("unknown permission type filter")
        return flt

    def matches(self, entry: AclEntry) -> bool:
        kind, name, pattern = kafka_resource(entry)
        if self.permission == DENY or self.host not in (None, WILDCARD):
            return False  # replog's ACLs all allow, from any host
        if self.resource_type not in (ANY, kind):
            return False
        if self.operation not in (ANY, KAFKA_OPERATIONS[entry.operation]):
            return False
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.pattern == MATCH:  # the ACLs that apply to the named resource
            if self.name is None:
                return True
            return name == self.name if pattern == LITERAL else self.name.startswith(name)
        if self.pattern not in (ANY, pattern):
            return False
        return self.name is None or self.name == name


def acl_audit_name(acl: Body) -> str:
    """A Kafka ACL binding (a creation, or a matching ACL) as the audit log names ACLs
    (`acl <principal> <operation> <type>:<name>`; `-prefix` for PREFIXED)."""
    kind = RESOURCE_TYPES.get(acl["resource_type"], f"type{acl['resource_type']}")
    pattern = acl.get("resource_pattern_type", acl.get("pattern_type", LITERAL))
    operation = OPERATIONS.get(acl["operation"], f"operation{acl['operation']}")
    target = f"{kind}{'-prefix' if pattern == PREFIXED else ''}:{acl['resource_name']}"
    return f"acl {acl['principal']} {operation} {target}"


def acl_body(entry: AclEntry) -> Body:
    return {
        "principal": entry.principal,
        "host": WILDCARD,
        "operation": KAFKA_OPERATIONS[entry.operation],
        "permission_type": ALLOW,
    }


def describe_body(entries: Iterable[AclEntry], f: Body) -> Body:
    """DescribeAcls' response: the ACLs the request's filter matches, by resource."""
    try:
        flt = Filter.of(f)
    except Inexpressible as exc:
        return {"error_code": E.INVALID_REQUEST, "error_message": str(exc), "resources": []}
    resources: dict[tuple[int, str, int], list[Body]] = {}
    for entry in sorted(entries):
        if flt.matches(entry):
            resources.setdefault(kafka_resource(entry), []).append(acl_body(entry))
    return {
        "error_code": 0,
        "error_message": None,
        "resources": [
            {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
            for (t, n, p), acls in resources.items()
        ],
    }


class KafkaAcls:
    """The handlers; `change` proposes one ACL's addition or removal (AclService's path),
    `entries` is this node's applied set."""

    def __init__(self, change: AclChange, entries: Callable[[], Iterable[AclEntry]]) -> None:
        self.change = change
        self.entries = entries

    async def describe_acls(self, version: int, body: Body) -> Body:
        return describe_body(self.entries(), body)

    async def create_acls(self, version: int, body: Body) -> Body:
        results = []
        for creation in body["creations"]:
            try:
                await self.change(to_entry(creation), True)
            except Inexpressible as exc:
                results.append({"error_code": E.INVALID_REQUEST, "error_message": str(exc)})
            except ReplogError as exc:
                results.append({"error_code": code_of(exc), "error_message": str(exc)[:200]})
            else:
                results.append({"error_code": 0, "error_message": None})
        return {"results": results}

    async def delete_acls(self, version: int, body: Body) -> Body:
        return {"filter_results": [await self._delete(f) for f in body["filters"]]}

    async def _delete(self, f: Body) -> Body:
        try:
            flt = Filter.of(f)
        except Inexpressible as exc:
            return {"error_code": E.INVALID_REQUEST, "error_message": str(exc), "matching_acls": []}
        matching = []
        for entry in sorted(e for e in self.entries() if flt.matches(e)):
            code, message = 0, None
            try:
                await self.change(entry, False)
            except NotFoundError:
                pass  # removed meanwhile (by another call): gone, as asked
            except ReplogError as exc:
                code, message = code_of(exc), str(exc)[:200]
            kind, name, pattern = kafka_resource(entry)
            matching.append(
                {"error_code": code, "error_message": message}
                | {"resource_type": kind, "resource_name": name, "pattern_type": pattern}
                | acl_body(entry)
            )
        return {"error_code": 0, "error_message": None, "matching_acls": matching}
