"""Who is on a Kafka connection, what it may do, and how fast: TLS, SASL, ACLs, quotas.

TLS (`ReloadingContext`): the node's own files (`--tls-cert-file`, `--tls-key-file`,
`--tls-ca-file`), TLS 1.2 or later; with `--tls-client-auth require` a client certificate
signed by the CA is required, as on the gRPC client listener. Files that change are
loaded at the next handshake (checked at most once a second), as gRPC's are. A node
with TLS serves Kafka over TLS only: a plaintext client fails the handshake.

The principal of a connection (`Session.principal`), as gRPC's (edge/auth.py) derives it:
a verified client certificate with the URI SAN `replog://client/<name>` is `User:<name>`;
a SASL exchange (sasl.py: PLAIN with a bearer token of `--token-file`, SCRAM with
`--kafka-scram-file`) then names the principal; nothing: ANONYMOUS. Kafka's order holds:
after a SaslHandshake the next request must be SaslAuthenticate; a failed authentication
is answered SASL_AUTHENTICATION_FAILED, audited (`audit.unauthenticated`), and the
connection closed.

Authorization (`--authorization acl`): every request but ApiVersions and SASL's is split
by `authz.TABLE` under the gRPC rules: super-users may do everything, ANONYMOUS nothing
(its requests are answered with the authorization errors, audited as unauthenticated);
everyone else as the metadata's ACLs say. Denials are audited (`audit.denied`); topic
creations and deletions, partition growths, config alters and group deletions are audited
(`audit.change`) with their outcome, as on gRPC.

Quotas (edge/quotas.py, the same buckets as gRPC's calls): each request is charged after
it ran, to the quotas of the gRPC method its API maps to (requests; produce bytes: the
records sent; fetch bytes: the records answered; metadata writes). A principal in debt is
told how long in the response's `throttle_time_ms` and its connection is not read for
that long (Kafka's KIP-219: respond, then mute), at most `THROTTLE_MS_MAX` per request.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from replog.certs import CLIENT_URI_PREFIX
from replog.errors import UnauthenticatedError
from replog.kafka.errors import ErrorCode
from replog.kafka.protocol import ApiKey, RequestHeader
from replog.server.edge import audit
from replog.server.edge.acl_table import IMPLYING_DESCRIBE, topic_matcher
from replog.server.edge.acl_table import may as acl_may
from replog.server.edge.auth import ANONYMOUS, TokenFile
from replog.server.edge.quotas import Quotas
from replog.server.edge.security import check_pair
from replog.server.kafka_edge import authz, sasl
from replog.server.kafka_edge.acls import acl_audit_name
from replog.server.logs import log
from replog.server.meta.metadata import MetadataImage
from replog.tls import TlsFiles

_log = logging.getLogger("replog.server.kafka")
Body = dict[str, Any]
Handler = Callable[[RequestHeader, Body], Awaitable[Body | None]]
THROTTLE_MS_MAX: Final = 30_000
RELOAD_CHECK_INTERVAL_S: Final = 1.0
TOPIC_DENIED: Final = ErrorCode.TOPIC_AUTHORIZATION_FAILED
# The APIs that change the cluster, audited (`audit.change`) per entry of their response:
# api -> (operation, the response's list, the resource type, the entry's name field).
CHANGES: Final[dict[int, tuple[str, str, str, str]]] = {
    ApiKey.CREATE_TOPICS: ("create", "topics", "topic", "name"),
    ApiKey.DELETE_TOPICS: ("delete", "responses", "topic", "name"),
    ApiKey.CREATE_PARTITIONS: ("alter", "results", "topic", "name"),
    ApiKey.ALTER_CONFIGS: ("alter", "responses", "topic", "resource_name"),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: ("alter", "responses", "topic", "resource_name"),
    ApiKey.DELETE_GROUPS: ("delete", "results", "group", "group_id"),
}
ACL_CHANGES: Final = frozenset({ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS})
DENIED_CODES: Final = frozenset(
    {TOPIC_DENIED, ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
)
BROKER_RESOURCE: Final = 4  # a config resource of a broker: the cluster


class ReloadingContext:
    """Server TLS for `files`. `context` is what the listener binds with; at each handshake
    (its SNI callback, which runs for every ClientHello, with or without a server name) the
    files are checked, at most once a second, and the connection is handed the context of
    their latest good load: a new certificate, key or CA bundle (a CA taken out too) holds
    from the next handshake on, and a half-written rotation keeps the previous one."""

    def __init__(self, files: TlsFiles, *, require_client_auth: bool) -> None:
        self.files = files
        self.require_client_auth = require_client_auth
        self.reloads = 0
        self._signature = files.signature()
        self._checked_at = time.monotonic()
        self.current = self._build()
        self.context = self._build()
        self.context.sni_callback = self._hello

    def _build(self) -> ssl.SSLContext:
        f = self.files
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.verify_mode = ssl.CERT_REQUIRED if self.require_client_auth else ssl.CERT_NONE
        context.load_cert_chain(f.cert_file, f.key_file)
        context.load_verify_locations(cafile=f.ca_file)
        return context

    def _hello(self, connection: Any, _server_name: str | None, _context: Any) -> None:
        self.check()
        connection.context = self.current

    def check(self, *, now: float | None = None) -> None:
        """Load the files again if they changed (`now`: tests skip the once-a-second)."""
        now = time.monotonic() if now is None else now
        if now - self._checked_at < RELOAD_CHECK_INTERVAL_S:
            return
        self._checked_at = now
        signature = self.files.signature()
        if signature == self._signature:
            return
        try:
            check_pair(self.files)
            self.current = self._build()
        except (OSError, ValueError, ssl.SSLError) as exc:
            log(_log, "kafka.tls_reload_failed", logging.WARNING, error=str(exc)[:200])
            return
        self._signature = signature
        self.reloads += 1
        log(_log, "kafka.tls_reloaded", cert=self.files.cert_file, reloads=self.reloads)


def certificate_principal(peercert: Any) -> str | None:
    """`User:<name>` of a verified certificate's `replog://client/<name>` URI SAN."""
    for kind, value in (peercert or {}).get("subjectAltName", ()):
        if kind == "URI" and value.startswith(CLIENT_URI_PREFIX):
            name = value[len(CLIENT_URI_PREFIX) :]
            if name:
                return "User:" + str(name)
    return None


@dataclass
class Session:
    """One connection's security state (owned by its connection task)."""

    peer: str
    principal: str = ANONYMOUS
    mechanism: str = ""  # set by a SaslHandshake; the next request must authenticate
    scram: sasl.ScramServer | None = None
    close: bool = False  # after this response (a failed authentication)
    mute_s: float = 0.0  # before the next request is read (quota throttling)
    sasl_done: bool = False  # a SASL exchange succeeded: no other on this connection

    def peer_context(self) -> _Peer:
        return _Peer(self.peer)


class _Peer:
    """What the audit log asks of a call context: its peer."""

    def __init__(self, peer: str) -> None:
        self._peer = peer

    def peer(self) -> str:
        return self._peer


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    tls: TlsFiles | None = None
    require_client_auth: bool = False
    authorization: bool = False  # --authorization acl
    super_users: frozenset[str] = frozenset()
    token_file: Path | None = None
    scram_file: Path | None = None


class KafkaSecurity:
    def __init__(self, config: SecurityConfig, image: Callable[[], MetadataImage]) -> None:
        self.config = config
        self.image = image
        self.tls = (
            ReloadingContext(config.tls, require_client_auth=config.require_client_auth)
            if config.tls is not None
            else None
        )
        self.tokens = TokenFile(config.token_file) if config.token_file is not None else None
        self.scram = sasl.ScramFile(config.scram_file) if config.scram_file is not None else None
        self.quotas: Quotas | None = None  # the gRPC listener's (shared buckets)
        # outcome -> counted (the listener's metric): sasl_failed, denied, unauthenticated
        self.count_refusal: Callable[[str], None] = lambda _outcome: None
        self.mechanisms = [
            *(sasl.MECHANISMS if self.scram is not None else ()),
            *((sasl.PLAIN,) if self.tokens is not None else ()),
        ]

    def session(self, peer: str, peercert: Any) -> Session:
        return Session(peer, certificate_principal(peercert) or ANONYMOUS)

    # -- authorization ----------------------------------------------------------------------

    def may(self, principal: str) -> authz.May:
        """The ACL check of `principal` (everything with authorization off)."""
        if not self.config.authorization or principal in self.config.super_users:
            return lambda _op, _type, _name: True
        if principal == ANONYMOUS:
            return lambda _op, _type, _name: False
        image = self.image()
        # topic checks through one matcher per operation, built once per request: a
        # Metadata listing costs a lookup per topic, not a scan of the ACLs per topic
        matchers: dict[str, Callable[[str], bool]] = {}

        def check(operation: str, resource_type: str, name: str) -> bool:
            if operation == "idempotent_write":  # a producer id without a transactional id
                # (acl_table.denial's rule for an InitProducer without a name)
                return image.allowed(principal, "idempotent_write", "cluster", "") or any(
                    a.operation in ("write", "all")
                    and a.resource_type in ("topic", "cluster")
                    and a.grants(principal, a.operation, a.resource_type, a.resource_name)
                    for a in image.acls
                )
            if resource_type == "topic":
                matcher = matchers.get(operation)
                if matcher is None:
                    implying = IMPLYING_DESCRIBE if operation == "describe" else ()
                    operations = (operation, *implying)
                    matcher = matchers[operation] = topic_matcher(image.acls, principal, operations)
                return matcher(name)
            return acl_may(image.allowed, principal, operation, resource_type, name)

        return check

    async def answer(
        self, session: Session, header: RequestHeader, body: Body, handle: Handler
    ) -> Body | None:
        """The response to one request of `session` (None: none, acks=0)."""
        api = header.api_key
        if session.mechanism and api != ApiKey.SASL_AUTHENTICATE:
            session.close = True  # Kafka: after a handshake, authenticate or be closed
            raise UnauthenticatedError("a SaslHandshake must be followed by SaslAuthenticate")
        if api == ApiKey.SASL_HANDSHAKE:
            return self._handshake(session, body)
        if api == ApiKey.SASL_AUTHENTICATE:
            return self._authenticate(session, body)
        rule = authz.rule_for(api)
        if not rule.method:
            return await handle(header, body)
        may = self.may(session.principal)
        guarded = authz.guard(rule, may, header.api_version, body)
        if guarded is None:  # no split: the gRPC rule's cluster right, whole
            if not may(rule.operation, "cluster", ""):
                self._refused(session, ((rule.operation, "cluster", ""),), api)
                session.close = True
                return None
            guarded = authz.Guarded(body, lambda r: r)
        if guarded.denied:
            self._refused(session, guarded.denied, api)
        response = await handle(header, guarded.body) if guarded.body is not None else None
        response = guarded.merge(response)
        if api in CHANGES and guarded.body is not None and response is not None:
            self._audit_changes(session, api, response)
        if api in ACL_CHANGES and guarded.body is not None and response is not None:
            self._audit_acl_changes(session, api, guarded.body, response)
        if response is not None or api == ApiKey.PRODUCE:
            self._throttle(session, rule.method, guarded.body, response)
        return response

    def _refused(
        self, session: Session, denied: tuple[tuple[str, str, str], ...], api: int
    ) -> None:
        anonymous = session.principal == ANONYMOUS
        self.count_refusal("unauthenticated" if anonymous else "denied")
        for operation, resource_type, name in denied:
            audit.refused(
                "audit.unauthenticated" if anonymous else "audit.denied",
                principal=session.principal,
                operation=operation,
                resource=f"{resource_type}:{name}",
                outcome="UNAUTHENTICATED" if anonymous else "PERMISSION_DENIED",
                context=session.peer_context(),
                method=f"kafka:{ApiKey(api).name}",
            )

    def _audit_changes(self, session: Session, api: int, response: Body) -> None:
        operation, key, resource_type, name_key = CHANGES[api]
        for entry in response[key]:
            if entry["error_code"] in DENIED_CODES:
                continue  # audited as denied
            code = entry["error_code"]
            kind = resource_type
            if entry.get("resource_type") == BROKER_RESOURCE:
                kind = "cluster"
            audit.change(
                principal=session.principal,
                operation=operation,
                resource=f"{kind}:{entry[name_key]}",
                outcome="OK" if code == 0 else ErrorCode(code).name,
                method=f"kafka:{ApiKey(api).name}",
                context=session.peer_context(),
            )

    def _audit_acl_changes(self, session: Session, api: int, body: Body, response: Body) -> None:
        """An `audit.change` line per ACL created (each creation, with its outcome) or
        deleted (each ACL a filter matched), as gRPC's AddAcl / RemoveAcl log them."""
        if api == ApiKey.CREATE_ACLS:
            pairs = zip(body["creations"], response["results"], strict=True)
            changes = [("add_acl", c, r["error_code"]) for c, r in pairs]
        else:
            changes = [
                ("remove_acl", m, m["error_code"])
                for f in response["filter_results"]
                for m in f["matching_acls"]
            ]
        for operation, acl, code in changes:
            if code in DENIED_CODES:
                continue  # audited as denied
            audit.change(
                principal=session.principal,
                operation=operation,
                resource=acl_audit_name(acl),
                outcome="OK" if code == 0 else ErrorCode(code).name,
                method=f"kafka:{ApiKey(api).name}",
                context=session.peer_context(),
            )

    def _throttle(
        self,
        session: Session,
        method: str,
        body: Body | None,
        response: Body | None,
    ) -> None:
        if self.quotas is None:
            return

        def cost(quota: str) -> float:
            if quota == "produce_bytes":
                return float(
                    sum(
                        len(p["records"] or b"")
                        for t in (body or {}).get("topic_data", ())
                        for p in t["partition_data"]
                    )
                )
            if quota == "fetch_bytes":
                return float(
                    sum(
                        len(p["records"] or b"")
                        for t in (response or {}).get("responses", ())
                        for p in t["partitions"]
                    )
                )
            return 1.0

        wait_s = self.quotas.throttle(session.principal, method, cost)
        if wait_s <= 0:
            return
        throttle_ms = min(THROTTLE_MS_MAX, max(1, int(wait_s * 1000)))
        session.mute_s = throttle_ms / 1000
        if response is not None:
            response["throttle_time_ms"] = throttle_ms

    # -- SASL -------------------------------------------------------------------------------

    def _handshake(self, session: Session, body: Body) -> Body:
        mechanism = body["mechanism"]
        if session.sasl_done:  # Kafka: one authentication per connection (no KIP-368)
            session.close = True
            return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": self.mechanisms}
        if mechanism not in self.mechanisms:
            return {
                "error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                "mechanisms": self.mechanisms,
            }
        session.mechanism = mechanism
        return {"error_code": 0, "mechanisms": self.mechanisms}

    def _authenticate(self, session: Session, body: Body) -> Body:
        message = body["auth_bytes"] or b""
        mechanism = session.mechanism
        try:
            if not mechanism:
                raise UnauthenticatedError("SaslAuthenticate without a SaslHandshake")
            if mechanism == sasl.PLAIN:
                principal = sasl.plain(message, self.tokens.principal if self.tokens else None)
                return self._authenticated(session, principal, b"")
            assert self.scram is not None
            if session.scram is None:
                session.scram = sasl.ScramServer(
                    sasl.MECHANISMS[mechanism], mechanism, self.scram.lookup
                )
                return {"error_code": 0, "auth_bytes": session.scram.first(message)}
            final = session.scram.final(message)
            return self._authenticated(session, session.scram.principal, final)
        except UnauthenticatedError as exc:
            self.count_refusal("sasl_failed")
            audit.refused(
                "audit.unauthenticated",
                principal=session.scram.principal if session.scram else "?",
                operation="authenticate",
                resource=f"sasl:{mechanism or '?'}",
                outcome="SASL_AUTHENTICATION_FAILED",
                context=session.peer_context(),
                method="kafka:SASL_AUTHENTICATE",
            )
            session.close = True
            return {
                "error_code": ErrorCode.SASL_AUTHENTICATION_FAILED,
                "error_message": str(exc)[:200],
                "auth_bytes": b"",
            }

    @staticmethod
    def _authenticated(session: Session, principal: str, final: bytes) -> Body:
        session.principal = principal  # (replaces a certificate's, as in Kafka)
        session.sasl_done = True
        session.mechanism = ""
        session.scram = None
        log(_log, "kafka.authenticated", logging.DEBUG, principal=principal, peer=session.peer)
        return {"error_code": 0, "auth_bytes": final, "session_lifetime_ms": 0}
