"""`replog whoami [-o json]`: who the cluster takes this client for (Acls.WhoAmI): the
principal its ACLs, quotas and audit log apply, what proved it (a bearer token, a client
certificate, nothing), whether the node checks ACLs and whether the principal is a
super-user."""

from __future__ import annotations

import argparse
from typing import TextIO

from replog.cli.common import (
    Subparsers,
    add_output_argument,
    cli_client,
    client_parser,
    print_json,
)

JSON_KEYS = '{"principal", "authenticated_by", "authorization", "super_user"}'


def add_parser(sub: Subparsers) -> None:
    p = client_parser(sub, "whoami", "show the principal the cluster takes you for")
    add_output_argument(p, JSON_KEYS)
    p.set_defaults(run=cmd_whoami)


def cmd_whoami(args: argparse.Namespace, out: TextIO) -> int:
    with cli_client(args) as client:
        me = client.whoami()
    if args.output == "json":
        print_json(me, out)
        return 0
    extra = []
    if me["super_user"]:
        extra.append("super-user")
    if me["authorization"] != "acl":
        extra.append("the node checks no ACLs")
    shown = f" ({', '.join(extra)})" if extra else ""
    print(f"{me['principal']}{shown}, authenticated by {me['authenticated_by']}", file=out)
    return 0
