"""`replog certs`: a CA and node or client certificates (PEM) for replog's TLS."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from replog.cli.common import Subparsers, UsageError


def add_parser(sub: Subparsers) -> None:
    certs = sub.add_parser(
        "certs",
        help="make a CA and node or client certificates (PEM) for TLS",
        description="Make certificates for replog's TLS in --dir: `ca` a CA (ca.pem, "
        "ca-key.pem); `node ID --host NAME...` a node certificate (URI SAN replog://node/ID, "
        "DNS or IP SANs of the names it is reached by); `client NAME` a client certificate "
        "(URI SAN replog://client/NAME). node and client need the CA in --dir.",
    )
    certs.set_defaults(run=cmd_certs)
    certs.add_argument("kind", choices=["ca", "node", "client"])
    certs.add_argument("name", nargs="?", help="node id (node) or client name (client)")
    certs.add_argument("--dir", default="certs", help="where the files go (default %(default)s)")
    certs.add_argument(
        "--host",
        action="append",
        default=[],
        help="a DNS name or IP address of the node (repeat; default 127.0.0.1 and localhost)",
    )
    certs.add_argument("--days", type=int, default=365, help="validity (default %(default)s)")


def cmd_certs(args: argparse.Namespace, out: TextIO) -> int:
    from replog import certs

    directory = Path(args.dir)
    if args.kind == "ca":
        if (directory / "ca-key.pem").exists():
            raise UsageError(f"{directory}/ca-key.pem exists; refusing to replace a CA")
        issued = certs.create_ca(directory)
    else:
        ca = certs.Issued(directory / "ca.pem", directory / "ca-key.pem")
        if not ca.key_file.exists():
            raise UsageError(f"no CA in {directory}: run `replog certs ca --dir {directory}`")
        if not args.name:
            raise UsageError(f"`replog certs {args.kind}` needs a name")
        if args.kind == "node":
            if not args.name.isdigit():
                raise UsageError("a node certificate is named by the node id (an integer)")
            hosts = args.host or ["127.0.0.1", "localhost"]
            issued = certs.issue(
                ca,
                directory,
                f"node{int(args.name)}",
                f"replog node {int(args.name)}",
                certs.node_uri(int(args.name)),
                hosts,
                days=args.days,
            )
        else:
            issued = certs.issue(
                ca,
                directory,
                args.name,
                args.name,
                certs.client_uri(args.name),
                server=False,
                days=args.days,
            )
    print(f"wrote {issued.cert_file} and {issued.key_file}", file=out)
    return 0
