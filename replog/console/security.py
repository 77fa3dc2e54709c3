"""What keeps the console's pages from being used by other sites.

* **Host check** (DNS rebinding): a request whose `Host` is not an allowed host name is
  refused (400). By default the allowed names are the loopback ones (`127.0.0.1`,
  `localhost`, `[::1]`) and the host the console listens on; `--allowed-host NAME` adds
  one, `--allowed-host '*'` allows any (behind a proxy or in a cluster).
* **CSRF**: every form carries its browser session's random token (`csrf` field;
  sessions.py); a POST without it, or with a cross-site `Origin` or `Sec-Fetch-Site`, is
  refused (403) before anything is read from or sent to the cluster. The session cookie
  is SameSite=Strict and HttpOnly; another site cannot read the console's pages, so it
  cannot learn the token.
* **Headers**: a Content-Security-Policy that allows only the console's own scripts and
  styles (no inline code: templates carry none), no framing, no referrer to other sites,
  no sniffing, no caching of pages.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSRF_FIELD = "csrf"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; "
    "object-src 'none'"
)
RESPONSE_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


def token_ok(expected: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


def host_name(host_header: str) -> str:
    """The name part of a Host header ("[::1]:8080" -> "[::1]", "a:80" -> "a")."""
    if host_header.startswith("["):
        return host_header.split("]", 1)[0] + "]"
    return host_header.rsplit(":", 1)[0] if ":" in host_header else host_header


def cross_site(headers: Mapping[str, str]) -> str | None:
    """Why a POST looks cross-site (None: it does not): its `Origin` names another host
    than its `Host`, or `Sec-Fetch-Site` says so."""
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return f"Sec-Fetch-Site is {fetch_site}"
    origin = headers.get("origin")
    if origin is not None:
        host = headers.get("host", "")
        _scheme, sep, rest = origin.partition("://")
        if not sep or rest.rstrip("/") != host:
            return "its Origin is another site"
    return None


class Guard:
    """ASGI middleware: host check, cross-site POSTs refused, security headers added."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str]) -> None:
        self.app = app
        self.allowed = {h.lower() for h in allowed_hosts}
        self.any_host = "*" in self.allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        name = host_name(headers.get("host", "")).lower()
        if not self.any_host and name not in self.allowed:
            response = PlainTextResponse(
                "unknown Host header: start the console with --allowed-host NAME", 400
            )
            await response(scope, receive, self._send_with_headers(send))
            return
        if scope["method"] not in SAFE_METHODS:
            why = cross_site(headers)
            if why is not None:
                response = PlainTextResponse(f"refused: a cross-site request ({why})", 403)
                await response(scope, receive, self._send_with_headers(send))
                return
        await self.app(scope, receive, self._send_with_headers(send))

    @staticmethod
    def _send_with_headers(send: Send) -> Send:
        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _v in message.get("headers", [])}
                extra = [(k, v) for k, v in RESPONSE_HEADERS if k not in names]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        return wrapped
