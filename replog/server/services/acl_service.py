"""`replog.v1.Acls`: add, remove and list the ACLs kept in the replicated cluster metadata;
set and list the quotas kept there too (meta/quotas.py).

Changes are proposed by the `__cluster` leader (`MetadataLog.propose`, validated against
its caught-up image); another node forwards the call to it once, on the peer listener.
Listing answers from this node's applied image. Who may call what: auth.py (`alter` and
`describe` on the cluster). `WhoAmI` answers the caller's principal as this node
authenticates it (`CallerIdentity`; any authenticated caller, anyone with authorization off).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from replog.errors import LeaderUnknownError
from replog.server.edge.rpc import Context, unary
from replog.server.meta.metadata import AclEntry, MetadataImage
from replog.server.meta.metadata_log import MetadataLog
from replog.server.meta.quotas import QuotaEntry, check_room
from replog.server.metrics import Metrics
from replog.server.peering.peers import remote
from replog.v1 import acl_pb2, acl_pb2_grpc

Forward = Any  # a callable node id -> Acls stub (Peers.acls)


@dataclass(frozen=True, slots=True)
class CallerIdentity:
    """How this node names its callers (WhoAmI): `identify(context)` is (principal, proof)
    (auth.Authenticator.identify: UnauthenticatedError for an unknown token)."""

    identify: Callable[[Any], tuple[str, str]]
    authorization: str  # "acl" | "none"
    super_users: frozenset[str]


def to_entry(acl: acl_pb2.Acl) -> AclEntry:
    return AclEntry.checked(
        acl.principal, acl.resource_type, acl.resource_name, acl.prefix, acl.operation
    )


def to_proto(entry: AclEntry) -> acl_pb2.Acl:
    return acl_pb2.Acl(
        principal=entry.principal,
        resource_type=entry.resource_type,
        resource_name=entry.resource_name,
        prefix=entry.prefix,
        operation=entry.operation,
    )


def to_quota(quota: acl_pb2.Quota) -> QuotaEntry:
    return QuotaEntry.checked(
        quota.principal,
        produce_bytes_per_s=quota.produce_bytes_per_s,
        fetch_bytes_per_s=quota.fetch_bytes_per_s,
        requests_per_s=quota.requests_per_s,
        metadata_writes_per_s=quota.metadata_writes_per_s,
    )


class AclService(acl_pb2_grpc.AclsServicer):
    def __init__(
        self,
        metadata: MetadataLog,
        node_id: int,
        stub: Forward,
        metrics: Metrics,
        timeout_s: float,
        identity: CallerIdentity,
    ) -> None:
        self.identity = identity
        self.metadata = metadata
        self.node_id = node_id
        self.stub = stub
        self.metrics = metrics
        self.timeout_s = timeout_s

    async def change(self, entry: AclEntry, add: bool) -> None:
        """Add or remove one ACL, as AddAcl / RemoveAcl do (Kafka's ACL APIs: kafka_edge)."""
        method = "AddAcl" if add else "RemoveAcl"
        await self._change(to_proto(entry), method, add)

    async def _change(self, request: acl_pb2.Acl, method: str, add: bool) -> None:
        entry = to_entry(request)  # INVALID_ARGUMENT on any node, before forwarding

        def make(image: MetadataImage) -> Any:
            return image.add_acl(entry) if add else image.remove_acl(entry)

        await self._propose(request, method, make)

    async def _propose(self, request: Any, method: str, make: Any) -> None:
        """Propose `make(image)` on the metadata leader (forward `request` to it once)."""
        if not self.metadata.ready:
            raise LeaderUnknownError("this node has not caught up with the cluster metadata")
        leader = self.metadata.leader()
        if leader != self.node_id:
            call = getattr(self.stub(leader), method)
            await remote(call(request, timeout=self.timeout_s))
            return
        await self.metadata.propose(make, self.timeout_s)

    @unary("AddAcl")
    async def AddAcl(self, request: acl_pb2.Acl, context: Context) -> acl_pb2.AclChangeResponse:
        await self._change(request, "AddAcl", add=True)
        return acl_pb2.AclChangeResponse()

    @unary("RemoveAcl")
    async def RemoveAcl(self, request: acl_pb2.Acl, context: Context) -> acl_pb2.AclChangeResponse:
        await self._change(request, "RemoveAcl", add=False)
        return acl_pb2.AclChangeResponse()

    @unary("ListAcls")
    async def ListAcls(
        self, request: acl_pb2.ListAclsRequest, context: Context
    ) -> acl_pb2.ListAclsResponse:
        return acl_pb2.ListAclsResponse(
            acls=[to_proto(e) for e in sorted(self.metadata.image.acls)]
        )

    @unary("SetQuota")
    async def SetQuota(
        self, request: acl_pb2.Quota, context: Context
    ) -> acl_pb2.QuotaChangeResponse:
        entry = to_quota(request)  # INVALID_ARGUMENT on any node, before forwarding
        await self._propose(request, "SetQuota", lambda image: check_room(image.quotas, entry))
        return acl_pb2.QuotaChangeResponse()

    @unary("ListQuotas")
    async def ListQuotas(
        self, request: acl_pb2.ListQuotasRequest, context: Context
    ) -> acl_pb2.ListQuotasResponse:
        quotas = sorted(self.metadata.image.quotas.values(), key=lambda q: q.principal)
        return acl_pb2.ListQuotasResponse(quotas=[acl_pb2.Quota(**q.as_dict()) for q in quotas])

    @unary("WhoAmI")
    async def WhoAmI(
        self, request: acl_pb2.WhoAmIRequest, context: Context
    ) -> acl_pb2.WhoAmIResponse:
        principal, proof = self.identity.identify(context)
        return acl_pb2.WhoAmIResponse(
            principal=principal,
            authenticated_by=proof,
            authorization=self.identity.authorization,
            super_user=principal in self.identity.super_users,
        )
