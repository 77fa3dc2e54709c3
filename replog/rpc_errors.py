"""The one place a failed gRPC call turns back into a typed `ReplogError`.

Shared by the client (every call) and the server (calls it forwards to the leader): it sits
beside `replog.errors`, not in either package, so that neither imports the other (the
layering contracts in pyproject.toml's `[tool.importlinter]`). Its inverse, error -> status,
is `replog.server.edge.status`.

The server attaches `google.rpc.ErrorInfo{reason, metadata}`; the reason picks the class
(`replog.errors.error_from_reason`). Calls that fail without it (transport errors:
connection refused, deadline passed on the client, message too large) map by status code:
UNAVAILABLE -> `UnavailableError` (retriable), DEADLINE_EXCEEDED -> `DeadlineExceededError`,
anything else -> `TransportError` with the code's name as `grpc_code`.
"""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from replog.errors import (
    DeadlineExceededError,
    ReplogError,
    TransportError,
    UnavailableError,
    error_from_reason,
)


def from_rpc_error(exc: grpc.RpcError) -> ReplogError:
    """The typed error a failed call carries (sync `grpc.Call` errors and `grpc.aio` ones)."""
    code_of = getattr(exc, "code", None)
    code: grpc.StatusCode = code_of() if callable(code_of) else grpc.StatusCode.UNKNOWN
    details_of = getattr(exc, "details", None)
    details = (details_of() if callable(details_of) else None) or str(exc)
    status = None
    if callable(getattr(exc, "trailing_metadata", None)):
        try:
            status = rpc_status.from_call(exc)  # type: ignore[arg-type]  # duck-typed Call
        except ValueError:
            status = None
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                return error_from_reason(info.reason, status.message, dict(info.metadata))
    return from_code(code, details)


def from_code(code: grpc.StatusCode, details: str) -> ReplogError:
    """The typed error of a call that failed without `ErrorInfo` (a transport failure)."""
    if code is grpc.StatusCode.UNAVAILABLE:
        return UnavailableError(details, grpc_code=code.name)
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return DeadlineExceededError(details)
    return TransportError(f"{code.name}: {details}", grpc_code=code.name)
