"""What every `replog` command module shares: exit codes, the usage error, the client
options (`--address`, deadlines, TLS, token), `--output json` and `--progress`.

The command modules import this module and never the package's top (`replog.cli`), which
imports them (an import-linter contract keeps it so).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from replog.errors import ReplogError

if TYPE_CHECKING:
    from replog.client import Client
    from replog.tls import ClientTls

DEFAULT_ADDRESS = "127.0.0.1:7070"
ATTEMPT_TIMEOUT_S = 2.0  # = replog.client.channels' (not imported: the CLI starts without grpc)
EXIT_OK = 0
EXIT_ERROR = 1  # an error reported by the server or the connection, or corrupt data (verify)
EXIT_USAGE = 2  # bad usage or settings: a flag's value, a missing file
EXIT_INTERRUPTED = 130  # Ctrl-C

EXIT_CODES = (
    "exit codes: 0 ok (consume: the records asked for were printed, or the end reached); "
    "1 an error from the server or the connection (verify: corrupt data); 2 bad usage or "
    "settings; 130 interrupted"
)

# The parent of subcommands: `sub.add_parser(...)` (argparse's private class, hence Any).
Subparsers = Any


class UsageError(Exception):
    """A command used wrongly: printed as one line, exit 2."""


def print_json(document: object, out: TextIO) -> None:
    print(json.dumps(document, indent=2), file=out)


def print_rows(
    out: TextIO,
    output: str,
    key: str,
    rows: list[dict[str, object]],
    header: str | None,
    document: dict[str, object] | None = None,
) -> None:
    """A listing: with `--output json` one document, `document` with `rows` under `key`;
    as text the `header` line (None: none) and a line a row, its values tab-separated."""
    if output == "json":
        print_json({**(document or {}), key: rows}, out)
        return
    if header is not None:
        print(header, file=out)
    for row in rows:
        print("\t".join(map(str, row.values())), file=out)


def add_output_argument(p: argparse.ArgumentParser, keys: str) -> None:
    """`--output text|json` (`-o json`); `keys` describes the JSON document. Stable: add
    keys, never rename or remove them."""
    p.add_argument(
        "--output",
        "-o",
        choices=["text", "json"],
        default="text",
        help=f"text (default) or json: one document, {keys}".replace("%", "%%"),
    )


def add_progress_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="records/s, bytes and ETA on stderr (default: only when stderr is a terminal)",
    )


def progress_enabled(args: argparse.Namespace) -> bool:
    return sys.stderr.isatty() if args.progress is None else bool(args.progress)


# The TLS options of a client command: flag, environment variable (the default), help.
_TLS_OPTIONS = (
    (
        "--tls-ca",
        "REPLOG_TLS_CA",
        "PEM CA bundle that signs the servers' certificates: TLS on",
    ),
    ("--tls-cert", "REPLOG_TLS_CERT", "PEM client certificate, for mutual TLS"),
    ("--tls-key", "REPLOG_TLS_KEY", "PEM key of --tls-cert"),
    ("--token", "REPLOG_TOKEN", "bearer token sent with every call, TLS only"),
    (
        "--tls-server-name",
        "REPLOG_TLS_SERVER_NAME",
        "name to verify in the server certificate instead of the address's host",
    ),
)


def command_group(
    sub: Subparsers,
    name: str,
    run: Callable[[argparse.Namespace, TextIO], int],
    help_text: str,
    description: str,
) -> Subparsers:
    """A command with actions (`replog NAME ACTION ...`): its parser runs `run`, which
    finds the action in `args.<name>_command`; the actions are added to the result."""
    p = sub.add_parser(name, help=help_text, description=description)
    p.set_defaults(run=run)
    return p.add_subparsers(dest=f"{name}_command", required=True, metavar="ACTION")


def client_parser(parent: Subparsers, name: str, help_text: str) -> argparse.ArgumentParser:
    """A subcommand that talks to a cluster: with the connection options."""
    p: argparse.ArgumentParser = parent.add_parser(
        name, help=help_text, description=help_text, epilog=EXIT_CODES
    )
    env = os.environ.get
    p.add_argument(
        "--address",
        "-a",
        default=env("REPLOG_ADDRESS", DEFAULT_ADDRESS),
        help="server host:port (env REPLOG_ADDRESS; default %(default)s)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="deadline of calls that wait for the cluster (topic, ACL, node changes), "
        "seconds (default %(default)s)",
    )
    p.add_argument(
        "--attempt-timeout",
        type=float,
        default=float(env("REPLOG_ATTEMPT_TIMEOUT", ATTEMPT_TIMEOUT_S)),
        help="deadline of one attempt of a call: a node that does not answer within it "
        "is passed over, and an address that cannot be reached fails the command "
        "(env REPLOG_ATTEMPT_TIMEOUT; default %(default)s)",
    )
    tls = p.add_argument_group("TLS (all off unless --tls-ca is given)")
    for flag, variable, text in _TLS_OPTIONS:
        tls.add_argument(flag, default=env(variable), help=f"{text} (env {variable})")
    return p


def cli_client(args: argparse.Namespace, address: str | None = None) -> Client:
    """The client of a command, from its `--address` (or `address`), deadlines, TLS and
    token options."""
    from replog.client import Client

    return Client(
        args.address if address is None else address,
        timeout_s=args.timeout,
        attempt_timeout_s=args.attempt_timeout,
        tls=client_tls(args),
        token=args.token,
    )


def client_tls(args: argparse.Namespace) -> ClientTls | None:
    from replog.tls import ClientTls

    try:
        return ClientTls.from_options(
            args.tls_ca, args.tls_cert, args.tls_key, args.tls_server_name
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def time_ms_arg(text: str, flag: str) -> int:
    """A time flag's value: milliseconds since the epoch, or an ISO 8601 time."""
    from replog.client.formats import parse_time_ms

    try:
        return parse_time_ms(text)
    except ReplogError as exc:
        raise UsageError(f"{flag}: {exc.message}") from None


def int_list(text: str, what: str, lowest: int) -> list[int]:
    """`2,3,4` -> [2, 3, 4] (an argparse type: a bad value is a one-line usage error)."""
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of {what}"
        ) from None
    if not ids or min(ids) < lowest:
        raise argparse.ArgumentTypeError(f"{text!r}: {what} are integers >= {lowest}")
    return ids


def node_ids(text: str) -> list[int]:
    """`2,3,4` -> [2, 3, 4] (argparse type)."""
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of ids") from None
    if not ids or min(ids) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: node ids are positive integers")
    return ids
