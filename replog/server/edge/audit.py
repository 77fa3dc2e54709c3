"""The audit log: who was refused, and who changed the cluster, on its own logger.

Logger `replog.audit` (the node's log format: key=value text or JSON lines; route or
silence it by name). One line per event, with the fields `principal`, `operation`,
`resource` and `outcome`, plus `method` and `peer` (the caller's address) where known:

    audit.unauthenticated  a call without valid credentials on a node with ACLs
                           (outcome UNAUTHENTICATED; principal ANONYMOUS, or "?" for a
                           bad token)
    audit.denied           an authenticated call the ACLs refuse (PERMISSION_DENIED), a
                           peer call from a certificate that names no member, or a peer
                           call sent to the client listener (UNIMPLEMENTED)
    audit.change           a call that changes topics, ACLs, groups, replica placement or
                           membership (`CHANGES`; a node's `Nodes.Join` on the peer
                           listener: listeners.py), once it has run: outcome OK or the
                           status code it ended with; logged by the node the client called
                           (a forwarded change is not logged again by the node it was
                           forwarded to)

Refusals come in floods when something misbehaves: at most `REFUSALS_MAX` lines per
`REFUSAL_INTERVAL_S`, the next line counts the dropped ones (`dropped`). Changes are
never dropped. Secrets (tokens) are never logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import grpc

from replog.server.edge.handler_chain import Handler
from replog.server.logs import Throttle, log

AUDIT_LOGGER = "replog.audit"
_audit = logging.getLogger(AUDIT_LOGGER)
REFUSALS_MAX = 100
REFUSAL_INTERVAL_S = 10.0
FIELD_CHARS_MAX = 200
_refusals = Throttle(REFUSALS_MAX, REFUSAL_INTERVAL_S)


def _clip(value: object) -> str:
    text = str(value)
    return text if len(text) <= FIELD_CHARS_MAX else text[:FIELD_CHARS_MAX] + "..."


def _peer(context: Any) -> str:
    try:
        return _clip(context.peer() or "?")
    except Exception:  # a context without a transport (tests)
        return "?"


def refused(
    event: str,
    *,
    principal: str,
    operation: str,
    resource: str,
    outcome: str,
    context: Any = None,
    method: str = "",
) -> None:
    """An `audit.unauthenticated` or `audit.denied` line (throttled)."""
    allowed, dropped = _refusals.allow()
    if not allowed:
        return
    log(
        _audit,
        event,
        logging.WARNING,
        principal=_clip(principal),
        operation=operation,
        resource=_clip(resource),
        outcome=outcome,
        method=method,
        peer=_peer(context) if context is not None else "",
        dropped=dropped,
    )


def change(
    *, principal: str, operation: str, resource: str, outcome: str, method: str, context: Any
) -> None:
    """An `audit.change` line (never dropped)."""
    log(
        _audit,
        "audit.change",
        principal=_clip(principal),
        operation=operation,
        resource=_clip(resource),
        outcome=outcome,
        method=method,
        peer=_peer(context),
    )


def _acl(r: Any) -> str:
    kind = r.resource_type + ("-prefix" if r.prefix else "")
    target = "cluster" if r.resource_type == "cluster" else f"{kind}:{r.resource_name}"
    return f"acl {r.principal} {r.operation} {target}"


# method -> (operation, how the request names what changed)
CHANGES: dict[str, tuple[str, Callable[[Any], str]]] = {
    "/replog.v1.Admin/CreateTopic": ("create", lambda r: f"topic:{r.name}"),
    "/replog.v1.Admin/DeleteTopic": ("delete", lambda r: f"topic:{r.name}"),
    "/replog.v1.Admin/TransferLeadership": (
        "transfer_leadership",
        lambda r: f"partition:{r.topic}/{r.partition}",
    ),
    "/replog.v1.Admin/ReassignPartition": (
        "reassign",
        lambda r: f"partition:{r.topic}/{r.partition}",
    ),
    "/replog.v1.Admin/AddNode": ("add_node", lambda r: f"node:{r.node_id}"),
    "/replog.v1.Admin/RemoveNode": ("remove_node", lambda r: f"node:{r.node_id}"),
    "/replog.v1.Admin/AlterConfigs": ("alter_configs", lambda r: f"topic:{r.topic}"),
    "/replog.v1.Admin/CreatePartitions": (
        "create_partitions",
        lambda r: f"topic:{r.topic} partitions={r.partitions}",
    ),
    "/replog.v1.Acls/AddAcl": ("add_acl", _acl),
    "/replog.v1.Acls/RemoveAcl": ("remove_acl", _acl),
    "/replog.v1.Acls/SetQuota": (
        "set_quota",
        lambda r: (
            f"quota:{r.principal} produce={r.produce_bytes_per_s} "
            f"fetch={r.fetch_bytes_per_s} requests={r.requests_per_s} "
            f"metadata_writes={r.metadata_writes_per_s}"
        ),
    ),
    "/replog.v1.Groups/DeleteGroup": ("delete", lambda r: f"group:{r.group}"),
}


def outcome(context: Any, exc: BaseException | None) -> str:
    """The status a call ended with: the code its handler set (an abort), else OK, or
    CANCELLED/ERROR for a handler that did not finish."""
    try:
        code = context.code()
    except Exception:  # a context without a status yet
        code = None
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    if isinstance(code, int):
        for status in grpc.StatusCode:
            if status.value[0] == code:
                return str(status.name)
    if exc is None:
        return "OK"
    return "CANCELLED" if isinstance(exc, asyncio.CancelledError) else "ERROR"


def audited(
    inner: Callable[..., Any],
    method: str,
    operation: str,
    principal_of: Callable[[Any], str],
    resource_of: Callable[[Any], str],
) -> Callable[..., Any]:
    """`inner` (a unary handler), logged by `change` once it has run, with its outcome."""

    async def handle(request: Any, context: Any) -> Any:
        failure: BaseException | None = None
        try:
            return await inner(request, context)
        except BaseException as exc:
            failure = exc
            raise
        finally:
            try:
                resource = resource_of(request)
            except Exception:  # a malformed request never reaches here; be safe anyway
                resource = "?"
            change(
                principal=principal_of(context),
                operation=operation,
                resource=resource,
                outcome=outcome(context, failure),
                method=method,
                context=context,
            )

    return handle


class Audit:
    """A handler wrapper (innermost, after the authorizer): every call of `CHANGES` is
    logged once it has run, with its outcome. `principal(context)`: who called."""

    def __init__(self, principal: Callable[[Any], str]) -> None:
        self.principal = principal

    def wrap(self, method: str, handler: Handler) -> Handler:
        entry = CHANGES.get(method)
        if entry is None or handler.unary_unary is None:
            return handler
        operation, resource_of = entry
        return grpc.unary_unary_rpc_method_handler(
            audited(handler.unary_unary, method, operation, self.principal, resource_of),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
