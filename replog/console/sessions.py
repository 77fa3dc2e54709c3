"""Browser sessions of the console: a per-session CSRF token for every form, and sign-in.

Every browser gets a session on its first page: a random id in the cookie `SESSION_COOKIE`
(HttpOnly, SameSite=Strict, Secure when served over HTTPS), kept in memory only (a
restart signs everyone out). Each session has its own CSRF token, which every form carries
(`security.CSRF_FIELD`) and every POST must return.

Signing in (`/login`) means giving one of the cluster's bearer tokens (a node's
`--token-file`): the console checks it by calling the cluster with it (GetMetadata: any
authenticated caller may; WhoAmI: the principal the nodes take it for, refused for a token
no node's token file holds), then makes the session's changes (administration, producing,
resetting offsets) with a client that sends it. The nodes authenticate the token,
authorize each call by their ACLs and write their own `audit.change` line with the
principal; the console authorizes nothing itself. The
token stays in the console's memory, never in a cookie, a page or a log; the console names
a signed-in session by `fingerprint` ("sha256:" and the first 16 hex digits of the token's
SHA-256: the prefix of the token file's entry for it).

Bounds: at most `sessions_max` sessions not signed in (the least recently used goes
first) and at most `signed_in_max` signed in (likewise, its client closed): a flood of new
browsers never signs anyone out. Each ends `idle_s` after its last request and
`lifetime_s` after it began. Failed sign-ins are throttled per browser address
(`SignInThrottle`): at most `failures_max` per `window_s`, then refused until it passes.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from replog.client import Client

SESSION_COOKIE = "replog_console_session"
TOKEN_CHARS_MAX = 4096


def fingerprint(token: str) -> str:
    """How the console names a token: the prefix of its entry in a node's token file."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()[:16]


@dataclass
class Session:
    session_id: str
    csrf_token: str
    began_at: float
    used_at: float
    client: Client | None = None  # signed in: the calls sent with the user's token
    principal: str = ""  # signed in: the token's fingerprint
    user: str = ""  # signed in: the token's principal as the cluster names it (WhoAmI)
    closed: bool = field(default=False)

    @property
    def signed_in(self) -> bool:
        return self.client is not None


class Sessions:
    """The console's sessions (thread-safe: handlers run in threads and on the loop)."""

    def __init__(
        self,
        sessions_max: int = 1000,
        idle_s: float = 1800.0,
        lifetime_s: float = 12 * 3600.0,
        clock: Callable[[], float] = time.monotonic,
        signed_in_max: int = 100,
    ) -> None:
        assert sessions_max >= 1 and signed_in_max >= 1 and idle_s > 0 and lifetime_s > 0
        self.sessions_max = sessions_max
        self.signed_in_max = signed_in_max
        self.idle_s = idle_s
        self.lifetime_s = lifetime_s
        self.clock = clock
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def get(self, session_id: str | None) -> Session | None:
        """The live session of the cookie `session_id` (None: none, or it ended)."""
        if not session_id or len(session_id) > 100:
            return None
        now = self.clock()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return None
            if now - session.used_at > self.idle_s or now - session.began_at > self.lifetime_s:
                del self._sessions[session_id]
                ended = session
            else:
                session.used_at = now
                self._sessions.move_to_end(session_id)
                return session
        _close(ended)
        return None

    def new(self, client: Client | None = None, principal: str = "", user: str = "") -> Session:
        now = self.clock()
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), now, now)
        session.client, session.principal, session.user = client, principal, user
        signed_in = client is not None
        cap = self.signed_in_max if signed_in else self.sessions_max
        evicted: list[Session] = []
        with self._lock:
            self._sessions[session.session_id] = session
            alike = [s for s in self._sessions.values() if s.signed_in == signed_in]
            for old in alike[: max(0, len(alike) - cap)]:  # least recently used first
                del self._sessions[old.session_id]
                evicted.append(old)
        for old in evicted:
            _close(old)
        return session

    def sign_in(self, session: Session, client: Client, principal: str, user: str = "") -> Session:
        """A new session (new id, new CSRF token: no fixation) signed in with `client`."""
        self.end(session)
        return self.new(client, principal, user)

    def end(self, session: Session) -> None:
        with self._lock:
            self._sessions.pop(session.session_id, None)
        _close(session)

    def close(self) -> None:
        with self._lock:
            ended = list(self._sessions.values())
            self._sessions.clear()
        for session in ended:
            _close(session)

    def __len__(self) -> int:
        return len(self._sessions)


def _close(session: Session) -> None:
    if session.client is not None and not session.closed:
        session.closed = True
        session.client.close()


class SignInThrottle:
    """Failed sign-ins per browser address: at most `failures_max` within `window_s`."""

    def __init__(
        self,
        failures_max: int = 5,
        window_s: float = 60.0,
        addresses_max: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failures_max = failures_max
        self.window_s = window_s
        self.addresses_max = addresses_max
        self.clock = clock
        self._lock = threading.Lock()
        self._failures: OrderedDict[str, list[float]] = OrderedDict()

    def _recent(self, address: str, now: float) -> list[float]:
        times = [t for t in self._failures.get(address, ()) if now - t < self.window_s]
        if times:
            self._failures[address] = times
        else:
            self._failures.pop(address, None)
        return times

    def allowed(self, address: str) -> bool:
        with self._lock:
            return len(self._recent(address, self.clock())) < self.failures_max

    def failed(self, address: str) -> None:
        now = self.clock()
        with self._lock:
            self._failures[address] = [*self._recent(address, now), now]
            self._failures.move_to_end(address)
            while len(self._failures) > self.addresses_max:
                self._failures.popitem(last=False)
