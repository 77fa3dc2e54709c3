"""The one place server errors become gRPC statuses.

A `ReplogError` leaves the server as: status code = the error's `code`; details = its
message; trailing metadata `grpc-status-details-bin` = a `google.rpc.Status` holding one
`google.rpc.ErrorInfo{reason, domain="replog", metadata}`. Clients rebuild the typed error
from `reason` (see `replog.client.errors`), never from the message text.
"""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from replog.errors import ReplogError

DOMAIN = "replog"


def grpc_code(err: ReplogError) -> grpc.StatusCode:
    code: grpc.StatusCode = getattr(grpc.StatusCode, err.code, grpc.StatusCode.UNKNOWN)
    return code


def to_status(err: ReplogError) -> grpc.Status:
    """The gRPC status (code, details, trailing metadata) carrying `err`."""
    code = grpc_code(err)
    info = error_details_pb2.ErrorInfo(reason=err.reason, domain=DOMAIN, metadata=err.metadata)
    detail = any_pb2.Any()
    detail.Pack(info)
    proto = status_pb2.Status(code=code.value[0], message=err.message, details=[detail])
    status: grpc.Status = rpc_status.to_status(proto)
    return status


async def abort(context: grpc.aio.ServicerContext[object, object], err: ReplogError) -> None:
    """End the call with `err` (raises, as `context.abort` does)."""
    status = to_status(err)
    await context.abort(status.code, status.details, status.trailing_metadata)
