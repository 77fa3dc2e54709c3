"""The console's web application: routes, error pages, middleware (`create_app`).

    GET  /                                  cluster: nodes, health, leaders, under-replicated
    GET  /topics?q=&page=&node=&problems=1  topics, searched and paged
    GET  /topics/{topic}                    partitions: leader, replicas and their lag, offsets
    GET  /topics/{topic}/records?partition=&offset=|time=&limit=&decode=   record browser
    GET  /topics/{topic}/records/live?...   the browser's "follow live" (Server-Sent Events)
    GET  /topics/{topic}/produce, POST      a form that produces a test record
    GET  /groups?q=&page=                   consumer groups
    GET  /groups/{group}                    members, assignment, committed offsets, lag
    POST /groups/{group}/reset              reset offsets: dry run (step=plan), then apply
    GET  /topics/{topic}/search?partition=&contains=&where=&offset=|time=&scan=   search
    GET  /topics/{topic}/search/jobs/{job}, POST .../cancel   its progress (JSON), cancel
    GET  /acls?q=                           ACLs (add and remove: admin_pages)
    GET  /quotas                            quotas (set and remove: admin_pages)
    GET  /login, POST /login, POST /logout  sign in with a cluster token (sessions.py)
    POST /topics/new, /topics/{topic}/delete|partitions|configs, /acls/add|remove,
         /quotas/set                        administration (admin_pages.py)
    GET  /charts                            produce/consume rates, lag, leader and size skew
    GET  /charts/data                       the charts' points (JSON, sampled in the background)
    GET  /healthz                           the console process is up (no cluster call)

Errors are pages, never tracebacks: a `ReplogError` from the cluster shows its reason and
message (with an HTTP status after its gRPC code), a rejected input its message (400), an
unexpected exception "internal error" (500, its traceback goes to the console's log).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from replog.client import Client
from replog.console import admin_pages, charts, group_pages, pages, records_pages, search
from replog.console.cluster import Prober
from replog.console.forms import FormError
from replog.console.search_jobs import TooManySearches
from replog.console.security import Guard
from replog.console.state import (
    HERE,
    PARTIAL_HEADER,
    Console,
    ConsoleConfig,
    CsrfError,
    console_of,
)
from replog.errors import ReplogError

log = logging.getLogger("replog.console")
FORM_BYTES_MAX = 4 * 1024 * 1024
HTTP_STATUS = {  # gRPC code of a ReplogError -> the page's status
    "INVALID_ARGUMENT": 400,
    "OUT_OF_RANGE": 400,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "FAILED_PRECONDITION": 409,
    "PERMISSION_DENIED": 403,
    "UNAUTHENTICATED": 403,
    "RESOURCE_EXHAUSTED": 429,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}


def _error_page(request: Request, status: int, title: str, message: str) -> Response:
    console = console_of(request)
    if request.headers.get(PARTIAL_HEADER):
        # A live part refreshing itself: it keeps what it shows and says what went wrong
        # (a failed fetch() would be a browser console error for a passing hiccup).
        said = " ".join(f"{title}: {message}"[:300].encode("ascii", "replace").decode().split())
        return Response(b"", 204, headers={"x-console-problem": said})
    if request.headers.get("accept") == "text/event-stream":
        return PlainTextResponse(message, status)
    return console.render(request, "error.html", {"title": title, "message": message}, status)


async def on_replog_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ReplogError)
    status = HTTP_STATUS.get(exc.code, 502)
    return _error_page(request, status, f"The cluster said {exc.reason}", exc.message)


async def on_form_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, FormError)
    status = 403 if isinstance(exc, CsrfError | admin_pages.NotSignedIn) else 400
    if isinstance(exc, TooManySearches):
        status = 429
    return _error_page(request, status, "Not accepted", exc.message)


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    title = "Not found" if exc.status_code == 404 else f"HTTP {exc.status_code}"
    return _error_page(request, exc.status_code, title, str(exc.detail))


async def on_unexpected(request: Request, exc: Exception) -> Response:
    log.error("console: %s %s failed", request.method, request.url.path, exc_info=exc)
    return _error_page(
        request, 500, "Internal error", "the console failed on this page (see its log)"
    )


async def healthz(_request: Request) -> Response:
    return PlainTextResponse("ok")


async def favicon(_request: Request) -> Response:
    return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml")


@contextlib.asynccontextmanager
async def _sampling(app: Starlette) -> AsyncIterator[None]:
    """The charts' sampler runs as long as the app does."""
    console = app.state.console
    task = asyncio.create_task(
        charts.sample_forever(
            console.client, console.prober, console.sampler, console.config.chart_interval_s
        ),
        name="console-charts-sampler",
    )
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await console.searches.close()
        console.sessions.close()


def create_app(
    client: Client, config: ConsoleConfig | None = None, prober: Prober | None = None
) -> Starlette:
    """The console for the cluster `client` reaches (the caller closes the client)."""
    config = config or ConsoleConfig()
    prober = prober or Prober(client.tls, client.token)
    console = Console(client, config, prober)
    routes = [
        Route("/", pages.cluster_page),
        Route("/topics", pages.topics_page),
        Route("/login", admin_pages.login_page, methods=["GET", "POST"]),
        Route("/logout", admin_pages.logout, methods=["POST"]),
        Route("/topics/new", admin_pages.new_topic_page, methods=["GET", "POST"]),
        Route("/topics/{topic}", pages.topic_page),
        Route("/topics/{topic}/delete", admin_pages.delete_topic, methods=["POST"]),
        Route("/topics/{topic}/partitions", admin_pages.grow_partitions, methods=["POST"]),
        Route("/topics/{topic}/configs", admin_pages.alter_config, methods=["POST"]),
        Route("/topics/{topic}/search", search.search_page),
        Route("/topics/{topic}/search/jobs/{job}", search.search_job),
        Route("/topics/{topic}/search/jobs/{job}/cancel", search.cancel_search, methods=["POST"]),
        Route("/topics/{topic}/records", records_pages.records_page),
        Route("/topics/{topic}/records/live", records_pages.live_records),
        Route("/topics/{topic}/produce", records_pages.produce_page, methods=["GET", "POST"]),
        Route("/groups", group_pages.groups_page),
        Route("/groups/{group}", group_pages.group_page),
        Route("/groups/{group}/reset", group_pages.reset, methods=["POST"]),
        Route("/acls", pages.acls_page),
        Route("/acls/add", admin_pages.add_acl, methods=["POST"]),
        Route("/acls/remove", admin_pages.remove_acl, methods=["POST"]),
        Route("/quotas", admin_pages.quotas_page),
        Route("/quotas/set", admin_pages.set_quota, methods=["POST"]),
        Route("/charts", charts.charts_page),
        Route("/charts/data", charts.charts_data),
        Route("/healthz", healthz),
        Route("/favicon.ico", favicon),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    handlers: dict[Any, Any] = {
        ReplogError: on_replog_error,
        FormError: on_form_error,
        HTTPException: on_http_error,
        Exception: on_unexpected,
    }
    app = Starlette(
        routes=routes,
        middleware=[Middleware(Guard, allowed_hosts=config.allowed_hosts)],
        exception_handlers=handlers,
        max_body_size=FORM_BYTES_MAX,
        lifespan=_sampling,
    )
    console.templates.globals["done_messages"] = admin_pages.DONE
    app.state.console = console
    return app
