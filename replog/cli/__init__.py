"""The `replog` command: run a node, manage topics, produce and consume records.

    replog serve --data-dir DIR --listen 127.0.0.1:7070 [--ready-file F] [...]   (serve.py)
    replog dev-cluster | console ...                         (serve.py)
    replog topic create|list|describe|delete ...             (topics.py)
    replog partition transfer-leader|reassign ...            (topics.py)
    replog offsets TOPIC                                     (topics.py)
    replog produce TOPIC < records   (lines, -K keys, or length-prefixed values: produce.py)
    replog consume TOPIC [-p P] [-o beginning|end|stored|N|-N] [-f FORMAT] [-c N] [-e]
                         [--group G] [--follow]              (consume.py, render.py)
    replog group list|describe|reset-offsets|delete ...      (groups.py)
    replog node list|add|remove|decommission ...             (nodes.py)
    replog acl add|remove|list ... ; replog token hash       (acls.py)
    replog quota set|list ...                                (acls.py)
    replog whoami                    (the principal the cluster takes you for: whoami.py)
    replog certs ca|node|client ...                          (certs.py)
    replog verify DATA_DIR [...]     (offline check of a stopped node's files: verify.py)
    replog completion bash|zsh       (prints a shell completion script: completion.py)
    replog --version

Read-only commands (topic list, topic describe, offsets, verify, group list, group describe,
node list, acl list, quota list; and group reset-offsets, node add|remove|decommission) take
`--output json` (`-o json`): one JSON document on stdout with the keys listed in each
command's help. `produce` and `consume` show progress on stderr when it is a terminal (or
with `--progress`); stdout carries only the command's output.

Clients find the server with `--address` (env REPLOG_ADDRESS, default 127.0.0.1:7070).

Exit codes (kcat's, for scripts): 0 success (consume: the records asked for were printed,
or the end was reached); 1 an error reported by the server or the connection, or corrupt
data (verify); 2 bad usage or settings (a flag's value, a missing file: one line on
stderr); 130 interrupted (Ctrl-C).

Each command module adds its parser with `set_defaults(run=handler)`; `run` below calls
the handler. The modules import `replog.cli.common`, never this package's top.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from replog import __version__
from replog.cli import consume, produce
from replog.cli.common import (
    ATTEMPT_TIMEOUT_S,
    DEFAULT_ADDRESS,
    EXIT_CODES,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    UsageError,
)
from replog.errors import InvalidConfigError, ReplogError

__all__ = [
    "ATTEMPT_TIMEOUT_S",
    "DEFAULT_ADDRESS",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "UsageError",
    "build_parser",
    "main",
    "run",
]

# Commands that need neither the server's settings nor the console to parse their options.
LEAN_COMMANDS = frozenset(
    {"topic", "partition", "offsets", "produce", "consume", "group", "node", "acl", "token",
     "certs", "verify", "dev-cluster", "whoami"}
)  # fmt: skip


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error for a bad flag or value (the full usage is one
    `--help` away), exit 2; subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# The commands that move data parse with their own parser only: the other commands'
# modules are not imported nor their parsers built (a tenth of such a command's start).
SOLO_COMMANDS = {"produce": produce.add_parser, "consume": consume.add_parser}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; given the command line `argv`, the options of commands other than
    the one it runs may be left out (`serve`'s and `console`'s; all but `produce`'s or
    `consume`'s for those: a quicker start)."""
    lean = argv is not None and len(argv) > 0 and argv[0] in LEAN_COMMANDS
    parser = Parser(
        prog="replog", description="replog: a replicated commit-log service.", epilog=EXIT_CODES
    )
    parser.add_argument("--version", action="version", version=f"replog {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    solo = SOLO_COMMANDS.get(argv[0]) if argv else None
    if solo is not None:
        solo(sub)
        return parser
    from replog.cli import acls, certs, groups, nodes, serve, topics, verify, whoami

    serve.add_parsers(sub, full=not lean)
    topics.add_parsers(sub)
    produce.add_parser(sub)
    consume.add_parser(sub)
    groups.add_parser(sub)
    nodes.add_parser(sub)
    acls.add_parsers(sub)
    certs.add_parser(sub)
    verify.add_parser(sub)
    whoami.add_parser(sub)
    completion = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description='Print a completion script; e.g. in ~/.bashrc: eval "$(replog completion '
        'bash)"; in ~/.zshrc: eval "$(replog completion zsh)".',
    )
    completion.add_argument("shell", choices=["bash", "zsh"])
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    out = sys.stdout
    try:
        if args.command == "completion":
            from replog.cli.completion import bash_script, zsh_script

            script = bash_script if args.shell == "bash" else zsh_script
            out.write(script(parser))
            return 0
        code: int = args.run(args, out)
        return code
    except InvalidConfigError as err:
        print(f"replog: {err.message}", file=sys.stderr)
        return EXIT_USAGE
    except UsageError as err:
        print(f"replog: {err}", file=sys.stderr)
        return EXIT_USAGE
    except ReplogError as err:
        print(f"replog: error: {err.reason}: {err.message}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as err:  # e.g. a data dir that cannot be created or written
        print(f"replog: error: {err}", file=sys.stderr)
        return EXIT_ERROR


def main() -> None:
    sys.exit(run())
