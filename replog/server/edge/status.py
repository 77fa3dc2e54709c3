"""The one place server errors become gRPC statuses.

A `ReplogError` leaves the server as: status code = the error's `code`; details = its
message; trailing metadata `grpc-status-details-bin` = a `google.rpc.Status` holding one
`google.rpc.ErrorInfo{reason, domain="replog", metadata}`. Clients rebuild the typed error
from `reason` (see `replog.client.errors`), never from the message text.

Whatever the request sent is echoed bounded: the message is cut to `MESSAGE_CHARS_MAX`
UTF-8 bytes and each metadata value to `VALUE_CHARS_MAX` (a cut ends in `...(N chars)`), so
that a 10 KB topic name still gets its INVALID_ARGUMENT and reason instead of overflowing
gRPC's 16 KiB metadata limit (the message travels in `grpc-message` and again in the status).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from replog.errors import ReplogError

T = TypeVar("T")

DOMAIN = "replog"
MESSAGE_CHARS_MAX = 1024
VALUE_CHARS_MAX = 256
METADATA_ENTRIES_MAX = 16


def clip(text: str, chars_max: int) -> str:
    """`text`, or as many of its first characters as fit in `chars_max` UTF-8 bytes and how
    long it was. Bytes, not characters: gRPC percent-encodes a message's non-ASCII bytes
    (3 bytes each in `grpc-message`), and a client refuses, at random between its soft and
    hard limits (8 and 16 KiB), an answer whose headers pass them: 1024 characters of "é"
    made 9 KB of error headers and a RESOURCE_EXHAUSTED instead of the typed error."""
    if len(text) <= chars_max and len(text.encode()) <= chars_max:
        return text
    cut = text.encode()[:chars_max].decode(errors="ignore")
    return f"{cut}...({len(text)} chars)"


def grpc_code(err: ReplogError) -> grpc.StatusCode:
    code: grpc.StatusCode = getattr(grpc.StatusCode, err.code, grpc.StatusCode.UNKNOWN)
    return code


def to_status(err: ReplogError) -> grpc.Status:
    """The gRPC status (code, details, trailing metadata) carrying `err`."""
    code = grpc_code(err)
    metadata = {
        clip(k, VALUE_CHARS_MAX): clip(v, VALUE_CHARS_MAX)
        for k, v in list(err.metadata.items())[:METADATA_ENTRIES_MAX]
    }
    info = error_details_pb2.ErrorInfo(reason=err.reason, domain=DOMAIN, metadata=metadata)
    detail = any_pb2.Any()
    detail.Pack(info)
    message = clip(err.message, MESSAGE_CHARS_MAX)
    proto = status_pb2.Status(code=code.value[0], message=message, details=[detail])
    status: grpc.Status = rpc_status.to_status(proto)
    return status


class Refused:
    """A streamed request an interceptor refused (ACLs, internal topics): the handler
    answers `error` in the request's place, in order, and the stream goes on."""

    __slots__ = ("error", "request")

    def __init__(self, request: object, error: ReplogError) -> None:
        self.request = request
        self.error = error


async def abort(context: grpc.aio.ServicerContext[Any, Any], err: ReplogError) -> None:
    """End the call with `err` (raises, as `context.abort` does)."""
    status = to_status(err)
    await context.abort(status.code, status.details, status.trailing_metadata)


async def refuse(context: grpc.aio.ServicerContext[Any, Any], err: ReplogError) -> NoReturn:
    """`abort`, typed as the end of the call it is."""
    await abort(context, err)
    raise AssertionError("abort returned") from err


async def or_refuse(context: grpc.aio.ServicerContext[Any, Any], take: Callable[[], T]) -> T:
    """`take()`, or the call ends with the `ReplogError` it raises (a limit, a check)."""
    try:
        return take()
    except ReplogError as err:
        await refuse(context, err)
