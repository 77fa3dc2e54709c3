"""The threaded client's ACL and quota calls (replog.v1.Acls: principal x resource x
operation, and per-principal quotas). A mixin of `client.Client`, apart so that the client
module stays one idea: calls and routing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypedDict, TypeVar, Unpack

from replog.client.retry import RetryPolicy
from replog.client.wire import acl as _acl
from replog.v1 import acl_pb2

T = TypeVar("T")


class _Calls(Protocol):
    commit_timeout_s: float
    attempt_timeout_s: float

    def _call(
        self,
        fn: Callable[[Any], T],  # (a client.Node: not imported, no cycle)
        topic: str | None = None,
        partition: int = 0,
        *,
        idempotent: bool = False,
        discover: bool = True,
        retry: RetryPolicy | None = None,
    ) -> T: ...


class AclTarget(TypedDict, total=False):
    """What an ACL is about (keywords of `add_acl` / `remove_acl`): a `topic`, consumer
    `group` or `producer` name (a prefix with `prefix`), or the `cluster`."""

    topic: str
    prefix: bool
    cluster: bool
    group: str
    producer: str


def _target_acl(principal: str, operation: str, target: AclTarget) -> Any:
    unknown = set(target) - AclTarget.__optional_keys__
    if unknown:
        raise TypeError(f"unexpected keyword arguments: {', '.join(sorted(unknown))}")
    where = (target.get("topic", ""), target.get("prefix", False), target.get("cluster", False))
    return _acl(principal, operation, *where, target.get("group", ""), target.get("producer", ""))


class AclCalls:
    def add_acl(self: _Calls, principal: str, operation: str, **target: Unpack[AclTarget]) -> None:
        """Allow `principal` ("User:alice") `operation` on `topic`, consumer `group` or
        `producer` name (a prefix with `prefix`), or on the cluster."""
        acl = _target_acl(principal, operation, target)
        self._call(lambda node: node.acls.AddAcl(acl, timeout=self.commit_timeout_s))

    def remove_acl(
        self: _Calls, principal: str, operation: str, **target: Unpack[AclTarget]
    ) -> None:
        """Remove the ACL `add_acl` made with the same arguments."""
        acl = _target_acl(principal, operation, target)
        self._call(lambda node: node.acls.RemoveAcl(acl, timeout=self.commit_timeout_s))

    def set_quota(self: _Calls, principal: str, **rates: int) -> None:
        """Set `principal`'s quotas ("User:<name>", or "User:*": the default): keyword
        `produce_bytes_per_s`, `fetch_bytes_per_s`, `requests_per_s`,
        `metadata_writes_per_s` (0 or absent: unlimited; all 0 removes the entry)."""
        quota = acl_pb2.Quota(principal=principal, **rates)
        self._call(lambda node: node.acls.SetQuota(quota, timeout=self.commit_timeout_s))

    def list_quotas(self: _Calls) -> list[dict[str, object]]:
        """Every quota entry: `principal` and its rates (0: unlimited)."""
        rates = ("produce_bytes_per_s", "fetch_bytes_per_s", "requests_per_s")
        fields = ("principal", *rates, "metadata_writes_per_s")
        return _listed(self, "ListQuotas", acl_pb2.ListQuotasRequest(), "quotas", fields)

    def list_acls(self: _Calls) -> list[dict[str, object]]:
        """Every ACL: `principal`, `resource_type`, `resource_name`, `prefix`, `operation`."""
        fields = ("principal", "resource_type", "resource_name", "prefix", "operation")
        return _listed(self, "ListAcls", acl_pb2.ListAclsRequest(), "acls", fields)

    def whoami(self: _Calls) -> dict[str, object]:
        """Who the cluster takes this client for (`Acls.WhoAmI`): `principal` ("User:alice",
        or "ANONYMOUS"), `authenticated_by` ("token", "certificate", "none"),
        `authorization` ("acl", "none") and `super_user`."""
        resp = self._call(
            lambda node: node.acls.WhoAmI(acl_pb2.WhoAmIRequest(), timeout=self.attempt_timeout_s),
            idempotent=True,
        )
        return {
            "principal": resp.principal,
            "authenticated_by": resp.authenticated_by,
            "authorization": resp.authorization,
            "super_user": resp.super_user,
        }


def _listed(
    client: _Calls, method: str, request: Any, items: str, fields: tuple[str, ...]
) -> list[dict[str, object]]:
    """An Acls listing call (a read, retried anywhere), each item as a dict of `fields`."""
    timeout_s = client.attempt_timeout_s
    resp = client._call(
        lambda node: getattr(node.acls, method)(request, timeout=timeout_s), idempotent=True
    )
    return [{name: getattr(item, name) for name in fields} for item in getattr(resp, items)]
