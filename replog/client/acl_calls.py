"""The threaded client's ACL and quota calls (replog.v1.Acls: principal x resource x
operation, and per-principal quotas). A mixin of `client.Client`, apart so that the client
module stays one idea: calls and routing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

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


class AclCalls:
    def add_acl(
        self: _Calls,
        principal: str,
        operation: str,
        *,
        topic: str = "",
        prefix: bool = False,
        cluster: bool = False,
        group: str = "",
        producer: str = "",
    ) -> None:
        """Allow `principal` ("User:alice") `operation` on `topic`, consumer `group` or
        `producer` name (a prefix with `prefix`), or on the cluster."""
        acl = _acl(principal, operation, topic, prefix, cluster, group, producer)
        self._call(lambda node: node.acls.AddAcl(acl, timeout=self.commit_timeout_s))

    def remove_acl(
        self: _Calls,
        principal: str,
        operation: str,
        *,
        topic: str = "",
        prefix: bool = False,
        cluster: bool = False,
        group: str = "",
        producer: str = "",
    ) -> None:
        acl = _acl(principal, operation, topic, prefix, cluster, group, producer)
        self._call(lambda node: node.acls.RemoveAcl(acl, timeout=self.commit_timeout_s))

    def set_quota(self: _Calls, principal: str, **rates: int) -> None:
        """Set `principal`'s quotas ("User:<name>", or "User:*": the default): keyword
        `produce_bytes_per_s`, `fetch_bytes_per_s`, `requests_per_s`,
        `metadata_writes_per_s` (0 or absent: unlimited; all 0 removes the entry)."""
        quota = acl_pb2.Quota(principal=principal, **rates)
        self._call(lambda node: node.acls.SetQuota(quota, timeout=self.commit_timeout_s))

    def list_quotas(self: _Calls) -> list[dict[str, object]]:
        resp = self._call(
            lambda node: node.acls.ListQuotas(
                acl_pb2.ListQuotasRequest(), timeout=self.attempt_timeout_s
            ),
            idempotent=True,
        )
        return [
            {
                "principal": q.principal,
                "produce_bytes_per_s": q.produce_bytes_per_s,
                "fetch_bytes_per_s": q.fetch_bytes_per_s,
                "requests_per_s": q.requests_per_s,
                "metadata_writes_per_s": q.metadata_writes_per_s,
            }
            for q in resp.quotas
        ]

    def list_acls(self: _Calls) -> list[dict[str, object]]:
        resp = self._call(
            lambda node: node.acls.ListAcls(
                acl_pb2.ListAclsRequest(), timeout=self.attempt_timeout_s
            ),
            idempotent=True,
        )
        return [
            {
                "principal": a.principal,
                "resource_type": a.resource_type,
                "resource_name": a.resource_name,
                "prefix": a.prefix,
                "operation": a.operation,
            }
            for a in resp.acls
        ]

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
