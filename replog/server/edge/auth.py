"""Client authentication and authorization (ACLs) on the client listener.

Who is calling (`Authenticator.principal`), in this order:

    1. metadata `authorization: Bearer <token>`: the token's SHA-256 must match an entry of
       the token file (`--token-file`), whose principal it becomes; a token no entry matches
       is UNAUTHENTICATED (reason UNAUTHENTICATED), whatever else the call carries;
    2. a verified client certificate (`--tls-client-auth require`) with the URI SAN
       `replog://client/<name>`: principal `User:<name>`;
    3. nothing: anonymous, which is UNAUTHENTICATED when authorization is on.

Token file, one entry a line (`#` comments), reloaded when it changes (mtime, size)::

    User:alice sha256:2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90

(the hex SHA-256 of the token's UTF-8 bytes: `replog token hash`); tokens are never stored.

What it may do (`Authorizer`, a handler wrapper of `handler_chain.py`, with
`--authorization acl`): every Log, Admin, Acls and Groups call names an operation on a
resource (the one table: acl_table.py); a principal in `--super-users` may do everything,
anyone else needs an ACL of the replicated metadata (`MetadataImage.allowed`), else
PERMISSION_DENIED (reason PERMISSION_DENIED) naming the operation and resource.
GetMetadata needs only an authenticated caller (clients route with it) and lists only the
topics the caller may describe. Health and reflection are open. Calls
forwarded between nodes arrive on the peer listener, where mutual TLS authenticates the
node (security.py); the node that took the client's call authorized it.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc

from replog.certs import CLIENT_URI_PREFIX
from replog.errors import InvalidConfigError, PermissionDeniedError, UnauthenticatedError
from replog.server.edge import audit
from replog.server.edge.acl_table import (
    GUARDED_SERVICES,
    NAME_CHARS_MAX,
    Rule,
    denial,
    filter_reply,
    rule_for,
)
from replog.server.edge.audit import Audit
from replog.server.edge.handler_chain import Handler
from replog.server.edge.quotas import Quotas
from replog.server.edge.security import peer_sans
from replog.server.edge.status import Refused, abort, or_refuse
from replog.server.edge.watched_file import WatchedFile
from replog.server.meta.metadata import MetadataImage

AUTHORIZATION_KEY = "authorization"
BEARER = "bearer "
HASH_PREFIX = "sha256:"
ANONYMOUS = "ANONYMOUS"
TOKEN_RELOAD_CHECK_S = 1.0
TOKEN_BYTES_MAX = 4096


def hash_token(token: str) -> str:
    """What the token file stores for `token`."""
    return HASH_PREFIX + hashlib.sha256(token.encode()).hexdigest()


def _parse_tokens(path: Path) -> list[tuple[bytes, str]]:
    """`User:<name> sha256:<64 hex digits>` lines (comments after `#`)."""
    entries: list[tuple[bytes, str]] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        principal, _, digest = line.partition(" ")
        digest = digest.strip()
        hex_part = digest[len(HASH_PREFIX) :]
        if not (
            principal.startswith("User:")
            and digest.startswith(HASH_PREFIX)
            and len(hex_part) == 64
            and all(c in "0123456789abcdef" for c in hex_part)
        ):
            raise InvalidConfigError(
                f"{path}:{number}: expected `User:<name> sha256:<64 hex digits>`"
            )
        entries.append((bytes.fromhex(hex_part), principal))
    return entries


class TokenFile:
    """Principals by token hash, from a file re-read when it changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = WatchedFile(path, _parse_tokens, TOKEN_RELOAD_CHECK_S)

    def principal(self, token: str) -> str | None:
        entries = self._file.current()
        digest = hashlib.sha256(token.encode()).digest()
        found = None
        for known, principal in entries:  # no early exit: the time does not say which
            if hmac.compare_digest(known, digest):
                found = principal
        return found


class Authenticator:
    def __init__(self, tokens: TokenFile | None) -> None:
        self.tokens = tokens

    def audited_principal(self, context: Any) -> str:
        """The principal, for the audit log (never raises: "?" for a bad token)."""
        try:
            return self.principal(context)
        except UnauthenticatedError:
            return "?"

    def principal(self, context: Any) -> str:
        """The caller's principal (ANONYMOUS without credentials); UnauthenticatedError for
        a bearer token that matches no entry."""
        return self.identify(context)[0]

    def identify(self, context: Any) -> tuple[str, str]:
        """(the caller's principal, what proved it: "token", "certificate" or "none")."""
        for key, value in context.invocation_metadata() or ():
            if key != AUTHORIZATION_KEY:
                continue
            text = value if isinstance(value, str) else value.decode(errors="replace")
            if not text[: len(BEARER)].lower() == BEARER:
                raise UnauthenticatedError("the authorization metadata must be `Bearer <token>`")
            token = text[len(BEARER) :].strip()
            found = None
            if self.tokens is not None and 0 < len(token) <= TOKEN_BYTES_MAX:
                found = self.tokens.principal(token)
            if found is None:
                raise UnauthenticatedError("the bearer token is not valid")
            return found, "token"
        for san in peer_sans(context):
            if san.startswith(CLIENT_URI_PREFIX) and len(san) > len(CLIENT_URI_PREFIX):
                return "User:" + san[len(CLIENT_URI_PREFIX) :], "certificate"
        return ANONYMOUS, "none"


class Authorizer:
    """Checks every Log, Admin, Acls and Groups call against the ACLs before its handler
    runs (what each needs: acl_table.py), and filters the replies that list resources."""

    def __init__(
        self,
        authenticator: Authenticator,
        image: Callable[[], MetadataImage],
        super_users: frozenset[str],
    ) -> None:
        self.authenticator = authenticator
        self.image = image
        self.super_users = super_users
        self.denied = 0

    def wrap(self, method: str, handler: Handler) -> Handler:
        if not method.startswith(GUARDED_SERVICES):
            return handler
        rule = rule_for(method)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap(handler.unary_unary, rule, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap(handler.unary_stream, rule, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._wrap_streamed(handler.stream_stream, rule, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # no other client-streaming calls in these services

    def _wrap_streamed(
        self, inner: Callable[..., Any], rule: Rule, method: str
    ) -> Callable[..., Any]:
        """A stream of requests (AppendStream): the caller is authenticated when the stream
        opens (else the stream ends UNAUTHENTICATED); each request is authorized as it is
        read, and a denied one reaches the handler as `Refused` (answered PERMISSION_DENIED
        in its place; the stream goes on)."""

        async def authorized(
            requests: AsyncIterator[Any], principal: str, context: Any
        ) -> AsyncIterator[Any]:
            async for request in requests:
                if isinstance(request, Refused):
                    yield request
                    continue
                denied = self._denial(principal, request, rule, context, method)
                yield request if denied is None else Refused(request, denied)

        async def handle(requests: AsyncIterator[Any], context: Any) -> Any:
            principal = await or_refuse(context, lambda: self._principal(context, method))
            return await inner(authorized(requests, principal, context), context)

        return handle

    def _principal(self, context: Any, method: str = "") -> str:
        try:
            principal = self.authenticator.principal(context)
        except UnauthenticatedError:
            self._unauthenticated("?", context, method)
            raise
        if principal == ANONYMOUS:
            self._unauthenticated(ANONYMOUS, context, method)
            raise UnauthenticatedError(
                "this node requires credentials: a bearer token or a client certificate"
            )
        return principal

    @staticmethod
    def _unauthenticated(principal: str, context: Any, method: str) -> None:
        audit.refused(
            "audit.unauthenticated",
            principal=principal,
            operation="call",
            resource=method,
            outcome="UNAUTHENTICATED",
            context=context,
            method=method,
        )

    def _writes_some_topic(self, principal: str) -> bool:
        image = self.image()
        return any(
            a.operation in ("write", "all")
            and a.resource_type in ("topic", "cluster")
            and a.grants(principal, a.operation, a.resource_type, a.resource_name)
            for a in image.acls
        )

    def _denial(
        self, principal: str, request: Any, rule: Rule, context: Any, method: str
    ) -> PermissionDeniedError | None:
        """Why `principal` may not make `request` (None: it may)."""
        if principal in self.super_users:
            return None
        denied = denial(self.image().allowed, self._writes_some_topic, principal, rule, request)
        if denied is None:
            return None
        self.denied += 1
        audit.refused(
            "audit.denied",
            principal=principal,
            operation=denied.operation,
            resource=f"{denied.resource_type}:{denied.name}",
            outcome="PERMISSION_DENIED",
            context=context,
            method=method,
        )
        return PermissionDeniedError(
            denied.describe(principal),
            principal=principal[:NAME_CHARS_MAX],
            operation=denied.operation,
            resource_type=denied.resource_type,
        )

    def _wrap(self, inner: Callable[..., Any], rule: Rule, method: str) -> Callable[..., Any]:
        if inspect.isasyncgenfunction(inner):

            async def generate(request: Any, context: Any) -> AsyncIterator[Any]:
                await self.check(request, context, rule, method)
                async for reply in inner(request, context):
                    yield reply

            return generate

        if rule.reply_filter:

            async def filtered(request: Any, context: Any) -> Any:
                principal = await self.check(request, context, rule, method)
                reply = await inner(request, context)
                if principal is None or principal in self.super_users:
                    return reply
                return filter_reply(self.image().acls, principal, rule, reply)

            return filtered

        async def handle(request: Any, context: Any) -> Any:
            await self.check(request, context, rule, method)
            return await inner(request, context)

        return handle

    async def check(self, request: Any, context: Any, rule: Rule, method: str) -> str | None:
        """The authorized caller's principal; the call is aborted otherwise."""
        try:
            principal = self._principal(context, method)
            denied = self._denial(principal, request, rule, context, method)
            if denied is not None:
                raise denied
            return principal
        except (UnauthenticatedError, PermissionDeniedError) as err:
            await abort(context, err)
        return None


def authorizers(
    authorization: str,
    token_file: Path | None,
    super_users: str,
    image: Callable[[], MetadataImage],
    authenticator: Authenticator | None = None,
) -> list[Authorizer | Quotas | Audit]:
    """The client listener's authorization wrapper (none with authorization off), the
    quotas of the caller's principal (quotas.py; always), then the audit of the calls that
    change the cluster (audit.py; always)."""
    authenticator = authenticator or authenticator_for(token_file)
    changes = Audit(authenticator.audited_principal)  # innermost: calls that were allowed
    quotas = Quotas(authenticator.audited_principal, lambda: image().quotas)
    if authorization != "acl":
        return [quotas, changes]
    return [Authorizer(authenticator, image, super_users_of(super_users)), quotas, changes]


def authenticator_for(token_file: Path | None) -> Authenticator:
    """Who calls, by the token file (if any) and client certificates."""
    return Authenticator(TokenFile(token_file) if token_file is not None else None)


def super_users_of(text: str) -> frozenset[str]:
    """The principals of `--super-users` (comma-separated)."""
    return frozenset(p.strip() for p in text.split(",") if p.strip())
