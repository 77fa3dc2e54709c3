"""`replog topic configs` and `replog topic alter --config`: a topic's configs.

replog topic create NAME --config retention.ms=86400000 [--config k=v ...]
replog topic configs NAME [-o json]
replog topic alter NAME [--config k=v ...] [--delete-config k ...]
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

from replog.cli.common import add_output_argument, print_rows

if TYPE_CHECKING:
    from replog.client import Client

JSON_KEYS = '{"topic", "configs": [{"name", "value", "source": "topic"|"default"}]} by name'


def key_value(text: str) -> tuple[str, str]:
    """`k=v` (argparse type)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def add_config_argument(p: argparse.ArgumentParser) -> None:
    """`--config k=v`, repeatable (Kafka's topic config names: docs/api.md)."""
    p.add_argument(
        "--config",
        action="append",
        type=key_value,
        default=[],
        metavar="NAME=VALUE",
        help="a topic config, e.g. retention.ms=86400000 (repeat for more)",
    )


def add_alter_arguments(alter: argparse.ArgumentParser) -> None:
    """The config options of `replog topic alter` (`--config`, `--delete-config`)."""
    add_config_argument(alter)
    alter.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="NAME",
        help="reset a config to the node's default (repeat for more)",
    )


def add_describe_parser(configs: argparse.ArgumentParser) -> None:
    configs.add_argument("name")
    add_output_argument(configs, JSON_KEYS)


def alter(client: Client, args: argparse.Namespace, out: TextIO) -> None:
    client.alter_configs(args.name, set=dict(args.config), delete=args.delete_config)
    changed = [f"{k}={v}" for k, v in args.config] + [f"-{k}" for k in args.delete_config]
    print(f"altered topic {args.name}: {' '.join(changed) or 'nothing'}", file=out)


def describe(client: Client, args: argparse.Namespace, out: TextIO) -> None:
    found = sorted(client.describe_configs(args.name).items())
    rows: list[dict[str, object]] = [
        {"name": k, "value": c.value, "source": c.source} for k, c in found
    ]
    print_rows(out, args.output, "configs", rows, "config\tvalue\tsource", {"topic": args.name})
