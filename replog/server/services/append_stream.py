"""AppendStream: appends pipelined over one long-lived stream, answered in order.

The client writes `AppendRequest`s (any topic and partition); the server answers each with
one `AppendStreamResponse`, in the order the requests were written: the offsets, or an
`AppendError` (code, reason, message, metadata: what the unary Append's status and
`google.rpc.ErrorInfo` would carry, `status.to_status`) in the request's place. One failed
request does not end the stream.

Two tasks per stream:

* the reader (`_read`) takes each request as it arrives, waits for room in the stream's
  window (`limits.AppendWindow`: requests and bytes (each request's serialized size) read
  but not answered, per stream and per node; the reader does not read on meanwhile, so
  HTTP/2 flow control holds the client), checks it exactly as the unary Append does
  (`LogService.prepare_append`: acks, producer fields, leadership with the NOT_LEADER
  hint, the topic's format), and starts its append as a task. Tasks start in the order
  they are created (the event loop runs ready callbacks first in, first out), and a
  partition takes an append (its owner's inbox, `ReplicationDriver.append`) before the
  task's first suspension: requests reach their partitions in stream order, so an
  idempotent producer's pipelined batches arrive in sequence order;
* the writer (`answer`, the handler's generator) awaits the entries in order and yields
  each answer; `rpc.streaming` writes it once flow control takes it.

A stream that ends or breaks (the client cancels or goes away, a deadline passes)
cancels only the waiting: each append belongs to its partition's owner, which performs it
whole or not at all (`ReplicationDriver.append`). Requests not answered then have an
unknown outcome; an idempotent producer resends them (answered with their first offsets).

The stream itself ends with a status when a request does not decode (MALFORMED_REQUEST,
`guard`), the caller is not authenticated (`auth`), or the node is stopping
(SHUTTING_DOWN, after the answers of the requests before it). An idle stream learns it too:
the node's `draining.Draining` ends the read the reader waits in (or its next one) with
`ShuttingDownError`, which ends the reader as the last entry; the writer answers every
request read before it, then ends the stream with it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Protocol

import grpc

from replog.errors import LogClosedError, ReplogError, ShuttingDownError
from replog.server.edge import status
from replog.server.edge.limits import AppendWindow, Limits
from replog.v1 import log_pb2


class Appender(Protocol):
    """What the stream needs of the Log service (`LogService`; declared here so that this
    module does not import it back)."""

    limits: Limits

    async def prepare_append(self, request: log_pb2.AppendRequest) -> Any: ...

    async def complete_append(self, prepared: Any) -> tuple[int, int, int]: ...


_END = object()


class _Entry:
    """One request's place in the stream: its append task, or its error."""

    __slots__ = ("error", "size_bytes", "task")

    def __init__(
        self,
        size_bytes: int,
        task: asyncio.Task[tuple[int, int, int]] | None = None,
        error: ReplogError | None = None,
    ) -> None:
        self.size_bytes = size_bytes
        self.task = task
        self.error = error


def error_message(err: ReplogError) -> log_pb2.AppendError:
    """`err` as the stream carries it: what `status.to_status` puts in a call's status."""
    return log_pb2.AppendError(
        code=status.grpc_code(err).value[0],
        reason=err.reason,
        message=status.clip(err.message, status.MESSAGE_CHARS_MAX),
        metadata={
            status.clip(k, status.VALUE_CHARS_MAX): status.clip(v, status.VALUE_CHARS_MAX)
            for k, v in list(err.metadata.items())[: status.METADATA_ENTRIES_MAX]
        },
    )


def _stream_level(err: ReplogError) -> bool:
    """The node is stopping: the stream ends (the client moves to another node)."""
    return isinstance(err, ShuttingDownError) and not isinstance(err, LogClosedError)


async def answer(
    service: Appender, requests: AsyncIterator[log_pb2.AppendRequest | status.Refused]
) -> AsyncGenerator[log_pb2.AppendStreamResponse, None]:
    """The answers of one AppendStream, in request order (see the module doc)."""
    window = service.limits.append_window()
    entries: deque[_Entry | object] = deque()
    arrived = asyncio.Event()
    reader = asyncio.get_running_loop().create_task(
        _read(service, requests, window, entries, arrived)
    )
    try:
        while True:
            while not entries:
                arrived.clear()
                await arrived.wait()
            entry = entries.popleft()
            if entry is _END:
                break
            assert isinstance(entry, _Entry)
            err = entry.error
            if entry.task is not None:
                try:
                    base, last, hw = await entry.task
                except ReplogError as exc:
                    err = exc
            window.release(entry.size_bytes)
            if err is None:
                yield log_pb2.AppendStreamResponse(
                    base_offset=base, last_offset=last, high_watermark=hw
                )
            elif _stream_level(err):
                raise err
            else:
                yield log_pb2.AppendStreamResponse(error=error_message(err))
        await reader  # its failure (a refused request body: the call is aborted) ends us
    finally:
        reader.cancel()
        for entry in entries:
            if isinstance(entry, _Entry) and entry.task is not None:
                entry.task.cancel()  # the waits only: each partition's owner appends or not
        window.close()
        await asyncio.gather(reader, return_exceptions=True)


async def _read(
    service: Appender,
    requests: AsyncIterator[log_pb2.AppendRequest | status.Refused],
    window: AppendWindow,
    entries: deque[_Entry | object],
    arrived: asyncio.Event,
) -> None:
    loop = asyncio.get_running_loop()
    try:
        async for request in requests:
            if isinstance(request, status.Refused):
                await window.take(0)
                entries.append(_Entry(0, error=request.error))
                arrived.set()
                continue
            # Its size as read (C; summing the values' lengths here would first copy each
            # value out of the message, a Python object per record).
            size_bytes = request.ByteSize()
            await window.take(size_bytes)
            try:
                prepared = await service.prepare_append(request)
            except ReplogError as err:
                entries.append(_Entry(size_bytes, error=err))
            else:
                # Started now, first in first out: the partition takes it in stream order.
                task = loop.create_task(service.complete_append(prepared))
                entries.append(_Entry(size_bytes, task=task))
            arrived.set()
    except grpc.aio.AbortError:
        pass  # a request was refused (guard, auth): the call already has its status
    finally:
        entries.append(_END)
        arrived.set()
