"""What every page handler shares: the console's settings, its client, the cached cluster
snapshot, rendering (a whole page, or only its live part for the page's refresh) and the
checked form of a POST.

The client is the synchronous `replog.client.Client` (thread-safe); handlers run its calls
in Starlette's thread pool (`call`), so a slow node never blocks the event loop. The
cluster snapshot (`cluster.Prober.snapshot`: one probe per node) is taken at most once per
`snapshot_ttl_s` however many browsers poll.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import jinja2
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from replog import __version__
from replog.client import Client
from replog.console import display
from replog.console.cluster import Prober, Snapshot
from replog.console.forms import FormError
from replog.console.sampler import Sampler
from replog.console.search_jobs import SearchJobs
from replog.console.security import CSRF_FIELD, LOOPBACK_HOSTS, token_ok
from replog.console.sessions import SESSION_COOKIE, Session, Sessions, SignInThrottle

T = TypeVar("T")
HERE = Path(__file__).parent
PARTIAL_HEADER = "x-console-partial"
FORM_BYTES_MAX = 2 * 1024 * 1024  # a test record's value plus its fields


@dataclass(frozen=True, slots=True)
class ConsoleConfig:
    refresh_ms: int = 2000  # how often live parts of a page re-fetch themselves
    page_size: int = 50  # rows per page of the topic and group lists
    records_max: int = 200  # records per page of the record browser
    follow_streams_max: int = 8  # concurrent "follow live" streams (each holds a thread now
    # and then); one more is refused
    follow_duration_s: float = 600.0  # a live stream ends after this (the page can resume)
    snapshot_ttl_s: float = 1.0
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    chart_interval_s: float = 10.0  # the Charts page's sampling interval
    chart_points: int = 360  # points kept per chart series (360 x 10 s: one hour)
    chart_series_max: int = 256  # series kept in all (a bound on the sampler's memory)
    # Why signing in (and so every admin action) is off ("" = on): server.config_from
    # refuses it on a plaintext listener off loopback without --insecure.
    admin_refusal: str = ""
    sessions_max: int = 1000
    session_idle_s: float = 1800.0
    search_fetch_bytes: int = 1024 * 1024  # bytes per Fetch of a record search: a cancel
    # takes effect within one Fetch (smaller: quicker to stop, more calls)

    def __post_init__(self) -> None:
        assert self.refresh_ms >= 100 and self.page_size >= 1 and self.records_max >= 1
        assert self.follow_streams_max >= 1 and self.follow_duration_s > 0
        assert self.chart_interval_s > 0 and self.chart_points >= 2 and self.chart_series_max >= 1
        assert self.search_fetch_bytes >= 1


class Console:
    """The state of one console process (`request.app.state.console`)."""

    def __init__(self, client: Client, config: ConsoleConfig, prober: Prober) -> None:
        self.client = client
        self.config = config
        self.prober = prober
        self.sessions = Sessions(config.sessions_max, config.session_idle_s)
        self.sign_ins = SignInThrottle()
        self.follow_streams = 0
        self._snapshot: Snapshot | None = None
        self._snapshot_at = 0.0
        self._snapshot_lock = asyncio.Lock()
        self.templates = template_environment()
        self.sampler = Sampler(config.chart_points, config.chart_series_max)
        self.searches = SearchJobs()

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` (a blocking client call) in the thread pool."""
        return await run_in_threadpool(fn, *args, **kwargs)

    async def snapshot(self, fresh: bool = False) -> Snapshot:
        async with self._snapshot_lock:
            now = time.monotonic()
            ttl = self.config.snapshot_ttl_s
            if fresh or self._snapshot is None or now - self._snapshot_at > ttl:
                self._snapshot = await self.call(self.prober.snapshot, self.client)
                self._snapshot_at = time.monotonic()
            return self._snapshot

    def render(
        self,
        request: Request,
        name: str,
        context: Mapping[str, Any],
        status_code: int = 200,
        session: Session | None = None,
    ) -> Response:
        """The page `name`; only its `live` block when the page's script asks for it. A
        browser without a session gets one (its cookie is set here; `session`: one the
        handler made for it)."""
        template = self.templates.get_template(name)
        known = self.session_of(request)
        created = known is None or (session is not None and session is not known)
        session = session or known
        if session is None:
            session = self.sessions.new()
        ctx = {
            "request": request,
            "csrf_token": session.csrf_token,
            "session": session,
            "admin_refusal": self.config.admin_refusal,
            "refresh_ms": self.config.refresh_ms,
            **context,
        }
        if request.headers.get(PARTIAL_HEADER) and "live" in template.blocks:
            body = "".join(template.blocks["live"](template.new_context(ctx)))
        else:
            body = template.render(ctx)
        response = HTMLResponse(body, status_code)
        if created:
            set_session_cookie(request, response, session)
        return response

    def session_of(self, request: Request) -> Session | None:
        return self.sessions.get(request.cookies.get(SESSION_COOKIE))

    async def posted_form(self, request: Request) -> FormData:
        """The form of a POST, once its CSRF token checks out."""
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > FORM_BYTES_MAX):
            raise FormError(f"the form is larger than {FORM_BYTES_MAX} bytes")
        form = await request.form(max_files=0, max_fields=64, max_part_size=FORM_BYTES_MAX)
        token = form.get(CSRF_FIELD)
        session = self.session_of(request)
        given = token if isinstance(token, str) else None
        if session is None or not token_ok(session.csrf_token, given):
            raise CsrfError("the form's token is missing or stale: reload the page and retry")
        return form


def template_environment() -> jinja2.Environment:
    """The console's templates, their filters and globals."""
    templates = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    templates.filters["size"] = display.size
    templates.filters["when"] = display.timestamp
    templates.filters["q"] = lambda text: urllib.parse.quote(str(text), safe="")
    templates.globals["query"] = query
    templates.globals.update(version=__version__, csrf_field=CSRF_FIELD)
    return templates


def query(**params: object) -> str:
    """A query string of the parameters that have a value ("" when none has)."""
    kept = {k: v for k, v in params.items() if v not in (None, "", False)}
    return "?" + urllib.parse.urlencode(kept) if kept else ""


class CsrfError(FormError):
    """A POST without the console's token (403)."""


def set_session_cookie(request: Request, response: Response, session: Session) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        session.session_id,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


def console_of(request: Request) -> Console:
    console = request.app.state.console
    assert isinstance(console, Console)
    return console


def text_field(form: FormData, name: str) -> str | None:
    value = form.get(name)
    if value is not None and not isinstance(value, str):
        raise FormError(f"{name} must be text")
    return value
