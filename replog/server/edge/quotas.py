"""Quotas on the client listener: a handler wrapper (`handler_chain.py`) that holds each
principal to the rates the metadata image sets for it (`meta/quotas.py`, `replog quota set`).

Every Log, Admin, Acls and Groups call costs one `requests` token; the calls that write a
`__cluster` record (`METADATA_WRITES`) one `metadata_writes` token too; Append the bytes of
its request (`produce_bytes`), each AppendStream request the same. These are taken before
the handler runs: over a quota the call is answered RESOURCE_EXHAUSTED, reason
QUOTA_EXCEEDED (retriable), metadata `quota` and `retry_after_ms` (when the bucket has
room again: Kafka's throttle time), and nothing is done; a refused AppendStream request is
answered so in its place and the stream goes on. Fetch and StreamFrom replies cost their
bytes (`fetch_bytes`) once built: a Fetch over the quota leaves the bucket in debt and the
next one is refused until it is paid; a StreamFrom waits out its debt before its next
reply (HTTP/2 flow control holds nothing meanwhile: the stream is simply slower).

The principal is the authenticator's (auth.py; ANONYMOUS with authorization off), its
entry its own or the default (`User:*`). Buckets: `edge/buckets.py` (bounded, evicted
least recently used). Refusals are counted by (`principal_kind`: "own" or "default",
`quota`): `replog_quota_throttled_total`, never a label per principal.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from replog.errors import QuotaExceededError
from replog.server.edge.acl_table import ACLS, ADMIN, GROUPS, GUARDED_SERVICES, LOG
from replog.server.edge.buckets import Buckets
from replog.server.edge.handler_chain import Handler
from replog.server.edge.status import Refused, abort
from replog.server.meta.quotas import QuotaEntry, quota_for

METADATA_WRITES = frozenset(
    {
        LOG + "InitProducer",
        ADMIN + "CreateTopic",
        ADMIN + "DeleteTopic",
        ADMIN + "ReassignPartition",
        ADMIN + "AddNode",
        ADMIN + "RemoveNode",
        ACLS + "AddAcl",
        ACLS + "RemoveAcl",
        ACLS + "SetQuota",
        GROUPS + "JoinGroup",
        GROUPS + "DeleteGroup",
    }
)
PRODUCES = frozenset({LOG + "Append", LOG + "AppendStream"})
FETCHES = frozenset({LOG + "Fetch", LOG + "StreamFrom"})
# method -> the quotas a call of it is charged against, in the order they are checked
QUOTAS_OF: dict[str, tuple[str, ...]] = {
    **{m: ("requests", "metadata_writes") for m in METADATA_WRITES},
    **{m: ("requests", "produce_bytes") for m in PRODUCES},
    **{m: ("requests", "fetch_bytes") for m in FETCHES},
}
STREAM_WAIT_S_MAX = 5.0  # a StreamFrom sleeps at most this long at once (then re-checks)


class Quotas:
    def __init__(
        self,
        principal: Callable[[Any], str],
        quotas: Callable[[], dict[str, QuotaEntry]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.principal = principal
        self.quotas = quotas
        self.clock = clock
        self.buckets = Buckets()
        self.throttled: Counter[tuple[str, str]] = Counter()  # (principal_kind, quota)

    def snapshot(self) -> list[tuple[str, str, int]]:
        """(principal_kind, quota, calls refused or delayed) for the metrics."""
        return [(kind, quota, n) for (kind, quota), n in sorted(self.throttled.items())]

    def admit(self, principal: str, method: str, request: Any) -> QuotaExceededError | None:
        """Take the call's costs from the principal's buckets, or the error that refuses
        the call (then nothing is taken from the buckets after the first refusal)."""
        entry, own = quota_for(self.quotas(), principal)
        if entry is None:
            return None
        now = self.clock()
        for quota in QUOTAS_OF.get(method, ("requests",)):
            rate = entry.rate(quota)
            if not rate:
                continue
            cost = float(request.ByteSize()) if quota == "produce_bytes" else 1.0
            if quota == "fetch_bytes":
                cost = 0.0  # refused while in debt; the reply is charged once built
            wait_s = self.buckets.take((principal, quota), rate, cost, now)
            if wait_s > 0:
                kind = "own" if own else "default"
                self.throttled[(kind, quota)] += 1
                return QuotaExceededError(
                    f"over the {quota} quota ({rate}/s) of {'its' if own else 'the default'} "
                    f"entry: retry in {math.ceil(wait_s * 1000)} ms",
                    quota=quota,
                    quota_value=rate,
                    retry_after_ms=max(1, math.ceil(wait_s * 1000)),
                    principal_kind=kind,
                )
        return None

    def throttle(self, principal: str, method: str, cost: Callable[[str], float]) -> float:
        """Kafka's way (kafka_edge/security.py): charge a request that already ran to the
        quotas of the gRPC `method` it maps to, `cost(quota)` each (the buckets may go into
        debt); the seconds until the deepest of them is out of debt (0.0: none)."""
        entry, own = quota_for(self.quotas(), principal)
        if entry is None:
            return 0.0
        now = self.clock()
        wait_s = 0.0
        for quota in QUOTAS_OF.get(method, ("requests",)):
            rate = entry.rate(quota)
            if not rate:
                continue
            bucket = self.buckets.bucket((principal, quota), rate, now)
            bucket.charge(cost(quota), now)
            if bucket.tokens < 0:
                self.throttled[("own" if own else "default", quota)] += 1
                wait_s = max(wait_s, -bucket.tokens / rate)
        return wait_s

    def charge_fetch(self, principal: str, reply: Any) -> float:
        """Take a reply's bytes; the seconds the principal's fetch bucket is in debt."""
        entry, _own = quota_for(self.quotas(), principal)
        rate = entry.rate("fetch_bytes") if entry is not None else 0
        if not rate:
            return 0.0  # (no quota: the reply's size is never computed)
        now = self.clock()
        bucket = self.buckets.bucket((principal, "fetch_bytes"), rate, now)
        bucket.charge(reply.ByteSize(), now)
        return max(0.0, -bucket.tokens / rate)

    def wrap(self, method: str, handler: Handler) -> Handler:
        if not method.startswith(GUARDED_SERVICES):
            return handler
        make = dict(
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, method), **make
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._streamed_replies(handler.unary_stream, method), **make
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._streamed_requests(handler.stream_stream, method), **make
            )
        return handler

    def _unary(self, inner: Callable[..., Any], method: str) -> Callable[..., Any]:
        async def handle(request: Any, context: Any) -> Any:
            principal = self.principal(context)
            refused = self.admit(principal, method, request)
            if refused is not None:
                await abort(context, refused)
            reply = await inner(request, context)
            if method in FETCHES:
                self.charge_fetch(principal, reply)
            return reply

        return handle

    def _streamed_replies(self, inner: Callable[..., Any], method: str) -> Callable[..., Any]:
        """StreamFrom: admitted like a unary call; then each reply is charged once sent and
        the stream waits out the debt before the next. The handler writes its replies with
        `context.write` (rpc.streaming), so it is given a context that charges them."""

        async def admitted(request: Any, context: Any) -> str:
            principal = self.principal(context)
            refused = self.admit(principal, method, request)
            if refused is not None:
                await abort(context, refused)
            return principal

        if inspect.isasyncgenfunction(inner):

            async def generate(request: Any, context: Any) -> AsyncIterator[Any]:
                principal = await admitted(request, context)
                async for reply in inner(request, context):
                    yield reply
                    await self._wait_debt(principal, reply)

            return generate

        async def handle(request: Any, context: Any) -> Any:
            principal = await admitted(request, context)
            return await inner(request, _ChargedContext(context, self, principal))

        return handle

    async def _wait_debt(self, principal: str, reply: Any) -> None:
        debt_s = self.charge_fetch(principal, reply)
        if debt_s > 0:
            self.throttled[("stream", "fetch_bytes")] += 1
            await asyncio.sleep(min(debt_s, STREAM_WAIT_S_MAX))

    def _streamed_requests(self, inner: Callable[..., Any], method: str) -> Callable[..., Any]:
        async def admitted(requests: AsyncIterator[Any], principal: str) -> AsyncIterator[Any]:
            async for request in requests:
                if isinstance(request, Refused):
                    yield request
                    continue
                refused = self.admit(principal, method, request)
                yield request if refused is None else Refused(request, refused)

        async def handle(requests: AsyncIterator[Any], context: Any) -> Any:
            return await inner(admitted(requests, self.principal(context)), context)

        return handle


class _ChargedContext:
    """A call's context whose `write` charges each reply to the principal's fetch quota
    and waits out the debt; everything else is the call's own context."""

    def __init__(self, context: Any, quotas: Quotas, principal: str) -> None:
        self._context = context
        self._quotas = quotas
        self._principal = principal

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    async def write(self, reply: Any) -> None:
        await self._context.write(reply)
        await self._quotas._wait_debt(self._principal, reply)
