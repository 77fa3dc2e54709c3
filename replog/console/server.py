"""The console process: `replog console [--listen 127.0.0.1:8080] [client options]`.

It takes the client options every CLI command takes (`--address`, `--tls-ca`, `--tls-cert`,
`--tls-key`, `--tls-server-name`, `--token`, and their `REPLOG_*` environment twins), binds
its HTTP listener before it says it is ready (port 0 picks a free one), prints its URL,
writes it to `--ready-file` (first line the URL, then `pid=N`) and serves with uvicorn until
SIGINT or SIGTERM. It listens on 127.0.0.1 unless told otherwise; see `security` for the
host check (`--allowed-host`). Signing in (administration: admin_pages, sessions) is off
on a listener that is not loopback unless `--insecure` says a TLS proxy is in front.

Starlette, Jinja2 and uvicorn are the `replog[console]` extra: without them the command
says so (exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from replog.console.state import ConsoleConfig

DEFAULT_LISTEN = "127.0.0.1:8080"
DEFAULT_TIMEOUT_S = 10.0


class ConsoleUsageError(Exception):
    """Bad options (the CLI turns it into exit code 2)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    p.set_defaults(timeout=DEFAULT_TIMEOUT_S)
    p.add_argument(
        "--listen",
        default=env("REPLOG_CONSOLE_LISTEN", DEFAULT_LISTEN),
        help="host:port of the web UI (port 0: any free one; env REPLOG_CONSOLE_LISTEN; "
        "default %(default)s)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name browsers may use besides the loopback names and the --listen host "
        "(repeat; '*' allows any: behind a proxy or in a cluster)",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="allow signing in (and so administration) although --listen is not a loopback "
        "address and the console serves plain HTTP (only behind a proxy that terminates TLS)",
    )
    p.add_argument("--ready-file", help="write the URL and pid here once listening")
    p.add_argument(
        "--refresh-ms", type=int, default=2000, help="how often live pages refresh (default 2000)"
    )
    p.add_argument(
        "--chart-interval-s",
        type=float,
        default=10.0,
        help="how often the Charts page's sampler asks the cluster (default 10; it keeps "
        "360 points: an hour at 10 s)",
    )
    p.add_argument(
        "--search-fetch-kib",
        type=int,
        default=1024,
        help="KiB per Fetch of a record search: a Cancel takes effect within one (default "
        "1024; smaller stops sooner, with more calls)",
    )
    p.add_argument(
        "--log-level",
        choices=["critical", "error", "warning", "info", "debug"],
        default="info",
        help="uvicorn's log level (info logs each request)",
    )


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConsoleUsageError(f"--listen wants host:port, got {text!r}")
    return host, int(port)


def config_from(args: argparse.Namespace, listen_host: str) -> ConsoleConfig:
    from replog.console.security import LOOPBACK_HOSTS
    from replog.console.state import ConsoleConfig

    if not 100 <= args.refresh_ms <= 3_600_000:
        raise ConsoleUsageError("--refresh-ms must be in [100, 3600000]")
    if not 0.1 <= args.chart_interval_s <= 3600:
        raise ConsoleUsageError("--chart-interval-s must be in [0.1, 3600]")
    if not 1 <= args.search_fetch_kib <= 65536:
        raise ConsoleUsageError("--search-fetch-kib must be in [1, 65536]")
    bind = f"[{listen_host}]" if ":" in listen_host else listen_host
    hosts = (*LOOPBACK_HOSTS, bind, *args.allowed_host)
    return ConsoleConfig(
        refresh_ms=args.refresh_ms,
        allowed_hosts=hosts,
        chart_interval_s=args.chart_interval_s,
        admin_refusal=admin_refusal(listen_host, args.insecure),
        search_fetch_bytes=args.search_fetch_kib * 1024,
    )


def admin_refusal(listen_host: str, insecure: bool) -> str:
    """Why signing in is off ("" = on): a token typed into a plain-HTTP page that is not on
    this machine would cross the network in the clear."""
    if insecure or is_loopback(listen_host):
        return ""
    return (
        f"administration is off: the console listens on {listen_host} over plain HTTP, where "
        "a token would cross the network in the clear (listen on 127.0.0.1, or put it behind "
        "a TLS proxy and start it with --insecure)"
    )


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def run(args: argparse.Namespace, out: TextIO) -> int:
    """`replog console`: serve until interrupted (0), or raise ConsoleUsageError."""
    try:
        import uvicorn

        from replog.console.app import create_app
    except ImportError as exc:
        raise ConsoleUsageError(
            f"the console needs its extra: pip install 'replog[console]' ({exc.name} is missing)"
        ) from None
    from replog.client import Client, ClientTls, RetryPolicy

    host, port = parse_listen(args.listen)
    try:
        tls = ClientTls.from_options(args.tls_ca, args.tls_cert, args.tls_key, args.tls_server_name)
        retry = RetryPolicy(deadline_ms=int(args.timeout * 1000))
        client = Client(
            args.address, timeout_s=args.timeout, tls=tls, token=args.token, retry=retry
        )
    except ValueError as exc:
        raise ConsoleUsageError(str(exc)) from None
    config = config_from(args, host)
    _log_audit_lines()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        client.close()
        raise ConsoleUsageError(f"cannot listen on {args.listen}: {exc.strerror}") from None
    bound_port = sock.getsockname()[1]
    shown_host = f"[{host}]" if ":" in host else host
    url = f"http://{shown_host}:{bound_port}/"
    app = create_app(client, config)
    server = uvicorn.Server(
        uvicorn.Config(app, log_level=args.log_level, lifespan="on", timeout_graceful_shutdown=5)
    )
    try:
        asyncio.run(_serve(server, sock, url, args.address, args.ready_file, out))
    finally:
        app.state.console.prober.close()
        client.close()
        sock.close()
    return 0


def _log_audit_lines() -> None:
    """The console's `audit.console` lines (admin_pages) to stderr, unless already routed."""
    audit = logging.getLogger("replog.audit")
    if not audit.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        audit.addHandler(handler)
        audit.setLevel(logging.INFO)


async def _serve(
    server: Any, sock: socket.socket, url: str, address: str, ready_file: str | None, out: TextIO
) -> None:
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():
            await serving  # it failed: raise why
            return
        await asyncio.sleep(0.02)
    print(f"replog console: {url}  (cluster: {address})", file=out, flush=True)
    if ready_file:
        tmp = Path(ready_file + ".tmp")
        tmp.write_text(f"{url}\npid={os.getpid()}\n")
        tmp.replace(ready_file)
    await serving
