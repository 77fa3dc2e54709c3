"""The audit log (edge/audit.py): one structured line per refusal and per change."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
import pytest

from replog.server.edge import audit
from replog.server.edge.audit import AUDIT_LOGGER, CHANGES, Audit
from replog.server.edge.auth import Authenticator, Authorizer
from replog.server.meta.metadata import AclEntry, MetadataImage
from replog.v1 import acl_pb2, admin_pb2


class Context:
    """The parts of a grpc.aio servicer context the wrappers use."""

    def __init__(self, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.metadata = metadata
        self.status: grpc.StatusCode | None = None

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"

    def code(self) -> grpc.StatusCode | None:
        return self.status

    async def abort(self, code: grpc.StatusCode, details: str = "", *_: Any) -> None:
        self.status = code
        raise grpc.RpcError(details)


def fields(caplog: pytest.LogCaptureFixture, event: str) -> list[dict[str, Any]]:
    return [
        dict(r.replog_fields)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == AUDIT_LOGGER and r.getMessage() == event
    ]


def handler(reply: Any = None, fail: grpc.StatusCode | None = None) -> Any:
    async def serve(request: Any, context: Context) -> Any:
        if fail is not None:
            await context.abort(fail, "refused")
        return reply

    return grpc.unary_unary_rpc_method_handler(serve)


def test_a_change_is_logged_with_principal_operation_resource_and_outcome(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER)
    wrapped = Audit(lambda _ctx: "User:admin").wrap(
        "/replog.v1.Acls/AddAcl", handler(acl_pb2.AclChangeResponse())
    )
    acl = acl_pb2.Acl(principal="User:bob", resource_type="topic", resource_name="t")
    acl.operation = "read"
    asyncio.run(wrapped.unary_unary(acl, Context()))
    assert fields(caplog, "audit.change") == [
        {
            "principal": "User:admin",
            "operation": "add_acl",
            "resource": "acl User:bob read topic:t",
            "outcome": "OK",
            "method": "/replog.v1.Acls/AddAcl",
            "peer": "ipv4:127.0.0.1:5555",
        }
    ]


def test_a_failed_change_is_logged_with_the_status_it_ended_with(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER)
    wrapped = Audit(lambda _ctx: "User:ops").wrap(
        "/replog.v1.Admin/DeleteTopic", handler(fail=grpc.StatusCode.NOT_FOUND)
    )
    with pytest.raises(grpc.RpcError):
        asyncio.run(wrapped.unary_unary(admin_pb2.DeleteTopicRequest(name="gone"), Context()))
    [line] = fields(caplog, "audit.change")
    assert (line["operation"], line["resource"], line["outcome"]) == (
        "delete",
        "topic:gone",
        "NOT_FOUND",
    )


def test_reads_are_not_audited() -> None:
    plain = handler(admin_pb2.Metadata())
    assert Audit(lambda _ctx: "?").wrap("/replog.v1.Admin/GetMetadata", plain) is plain
    assert "/replog.v1.Log/Append" not in CHANGES


def test_denials_and_missing_credentials_are_logged_by_the_authorizer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER)
    image = MetadataImage()
    image.acls.add(AclEntry.checked("User:alice", "topic", "mine", False, "read"))
    authorizer = Authorizer(Authenticator(None), lambda: image, frozenset())
    wrapped = authorizer.wrap(
        "/replog.v1.Admin/DeleteTopic", handler(admin_pb2.DeleteTopicResponse())
    )
    # (a client certificate names the principal: here the context's SAN)
    alice = Context()
    alice.auth_context = lambda: {  # type: ignore[method-assign]
        "x509_subject_alternative_name": [b"replog://client/alice"]
    }
    with pytest.raises(grpc.RpcError):
        asyncio.run(wrapped.unary_unary(admin_pb2.DeleteTopicRequest(name="mine"), alice))
    with pytest.raises(grpc.RpcError):
        asyncio.run(wrapped.unary_unary(admin_pb2.DeleteTopicRequest(name="x"), Context()))
    [denied] = fields(caplog, "audit.denied")
    assert (denied["principal"], denied["operation"], denied["resource"], denied["outcome"]) == (
        "User:alice",
        "delete",
        "topic:mine",
        "PERMISSION_DENIED",
    )
    [anonymous] = fields(caplog, "audit.unauthenticated")
    assert (anonymous["principal"], anonymous["outcome"]) == ("ANONYMOUS", "UNAUTHENTICATED")


def test_refusals_are_throttled_and_the_next_line_counts_the_dropped(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER)
    monkeypatch.setattr(audit, "_refusals", audit.Throttle(2, 3600.0))
    for _ in range(5):
        audit.refused("audit.denied", principal="p", operation="o", resource="r", outcome="x")
    assert len(fields(caplog, "audit.denied")) == 2
