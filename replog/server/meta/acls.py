"""Access control entries: who may do what to which resource (`add_acl` / `remove_acl`).

An `AclEntry` allows a principal an operation on a resource: a topic or a consumer group
(by name, or by prefix), or the cluster; a cluster ACL of an operation covers every topic
and group too. Principals are "User:<name>" ("User:*": any authenticated user) and
"Node:<id>". Pure: the metadata image keeps the set (`metadata`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from replog.errors import InvalidArgumentError
from replog.storage import validate_topic_name

OPERATIONS = ("read", "write", "create", "delete", "describe", "alter", "idempotent_write")
RESOURCE_TYPES = ("topic", "cluster", "group", "producer")  # what each guards: acl_table.py
PRINCIPAL_BYTES_MAX = 255
ANY_USER = "User:*"


@dataclass(frozen=True, slots=True, order=True)
class AclEntry:
    principal: str
    resource_type: str  # "topic", "group", "producer" or "cluster"
    resource_name: str  # a topic or group name, or a prefix; "" for the cluster
    prefix: bool
    operation: str  # one of OPERATIONS, or "all"

    @classmethod
    def checked(
        cls, principal: str, resource_type: str, resource_name: str, prefix: bool, operation: str
    ) -> AclEntry:
        """An entry, or InvalidArgumentError (for a client) when a field is out of shape."""
        kind, sep, name = principal.partition(":")
        if not (
            sep and kind in ("User", "Node") and name and len(principal) <= PRINCIPAL_BYTES_MAX
        ):
            raise InvalidArgumentError("a principal is User:<name> or Node:<id>")
        if resource_type not in RESOURCE_TYPES:
            raise InvalidArgumentError(f"resource_type must be one of {list(RESOURCE_TYPES)}")
        if operation not in (*OPERATIONS, "all"):
            raise InvalidArgumentError(f"operation must be one of {[*OPERATIONS, 'all']}")
        if resource_type == "cluster":
            if resource_name or prefix:
                raise InvalidArgumentError("a cluster ACL names no resource and no prefix")
        elif prefix or resource_type in ("group", "producer"):
            if not resource_name or len(resource_name) > PRINCIPAL_BYTES_MAX:
                raise InvalidArgumentError(
                    f"a {resource_type} name or prefix must be 1-255 characters"
                )
        else:
            validate_topic_name(resource_name)
        return cls(principal, resource_type, resource_name, prefix, operation)

    def grants(self, principal: str, operation: str, resource_type: str, name: str) -> bool:
        if self.principal != principal and not (
            self.principal == ANY_USER and principal.startswith("User:")
        ):
            return False
        if self.operation not in (operation, "all"):
            return False
        if self.resource_type == "cluster":
            return True  # cluster rights cover every topic and group
        if resource_type != self.resource_type:
            return False
        return name.startswith(self.resource_name) if self.prefix else name == self.resource_name

    def as_dict(self) -> dict[str, Any]:
        return {
            "principal": self.principal,
            "resource_type": self.resource_type,
            "resource_name": self.resource_name,
            "prefix": self.prefix,
            "operation": self.operation,
        }
