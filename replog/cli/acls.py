"""`replog acl` and `replog token`: who may do what (docs/api.md).

replog acl add|remove --principal User:NAME --operation OP (--topic T | --group G | --producer P |
           --cluster) [--prefix]
replog acl list [-o json]
replog token hash --principal User:NAME < token     (a line of the server's token file)
replog token scram --principal User:NAME [--mechanism SCRAM-SHA-256|SCRAM-SHA-512]
                   [--iterations N] < password       (a line of --kafka-scram-file)
replog quota set --principal User:NAME|User:* [--produce-bytes-per-s N] [--fetch-bytes-per-s N]
                 [--requests-per-s N] [--metadata-writes-per-s N]      (0 or absent: unlimited)
replog quota list [-o json]
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from replog.cli.common import (
    Subparsers,
    UsageError,
    add_output_argument,
    cli_client,
    client_parser,
    command_group,
    print_json,
)

JSON_KEYS = {
    "acl list": '{"acls": [{"principal", "resource_type", "resource_name", "prefix", '
    '"operation"}]}',
    "quota list": '{"quotas": [{"principal", "produce_bytes_per_s", "fetch_bytes_per_s", '
    '"requests_per_s", "metadata_writes_per_s"}]}',
}
QUOTA_RATES = (
    "produce_bytes_per_s",
    "fetch_bytes_per_s",
    "requests_per_s",
    "metadata_writes_per_s",
)


def add_parsers(sub: Subparsers) -> None:
    asub = command_group(
        sub, "acl", cmd_acl, "manage ACLs (who may do what)", "Manage ACLs (docs/api.md)."
    )
    for name, text in (("add", "allow an operation"), ("remove", "remove an ACL")):
        p = client_parser(asub, name, text)
        p.add_argument("--principal", required=True, help="User:<name>, User:* or Node:<id>")
        p.add_argument(
            "--operation",
            required=True,
            choices=[
                *("read", "write", "create", "delete", "describe", "alter"),
                *("idempotent_write", "all"),
            ],
        )
        target = p.add_mutually_exclusive_group(required=True)
        target.add_argument("--topic", help="a topic name (or a prefix with --prefix)")
        target.add_argument("--group", help="a consumer group (or a prefix with --prefix)")
        target.add_argument("--producer", help="a producer name (or a prefix with --prefix)")
        target.add_argument("--cluster", action="store_true", help="the cluster")
        p.add_argument(
            "--prefix", action="store_true", help="--topic/--group/--producer is a prefix"
        )
    add_output_argument(client_parser(asub, "list", "list ACLs"), JSON_KEYS["acl list"])

    qsub = command_group(
        sub,
        "quota",
        cmd_quota,
        "manage quotas (how fast a principal may go)",
        "Manage quotas per principal and the default User:* (docs/security.md).",
    )
    qset = client_parser(qsub, "set", "set a principal's quotas (all 0: remove them)")
    qset.add_argument("--principal", required=True, help="User:<name>, or User:* (default)")
    for rate in QUOTA_RATES:
        qset.add_argument(
            "--" + rate.replace("_", "-"), type=int, default=0, help="per second; 0: unlimited"
        )
    add_output_argument(client_parser(qsub, "list", "list quotas"), JSON_KEYS["quota list"])

    token = sub.add_parser(
        "token",
        help="hash a bearer token for the server's token file",
        description="Print the token file line for a token read from stdin: "
        "`User:<name> sha256:<hex>` (the server stores hashes only).",
    )
    token.set_defaults(run=lambda args, out: cmd_token(args, sys.stdin, out))
    token.add_argument("token_command", choices=["hash", "scram"])
    token.add_argument("--principal", required=True, help="User:<name>")
    token.add_argument(
        "--mechanism",
        choices=["SCRAM-SHA-256", "SCRAM-SHA-512"],
        default="SCRAM-SHA-256",
        help="scram: the Kafka SASL mechanism the credential is for",
    )
    token.add_argument(
        "--iterations", type=int, default=8192, help="scram: PBKDF2 iterations (>= 4096)"
    )


def cmd_acl(args: argparse.Namespace, out: TextIO) -> int:

    with cli_client(args) as client:
        if args.acl_command == "list":
            acls = client.list_acls()
            if args.output == "json":
                print_json({"acls": acls}, out)
            else:
                print("principal\toperation\tresource", file=out)
                for a in acls:
                    if a["resource_type"] == "cluster":
                        resource = "cluster"
                    else:
                        kind = str(a["resource_type"]) + ("-prefix" if a["prefix"] else "")
                        resource = f"{kind}:{a['resource_name']}"
                    print(f"{a['principal']}\t{a['operation']}\t{resource}", file=out)
            return 0
        call = client.add_acl if args.acl_command == "add" else client.remove_acl
        call(
            args.principal,
            args.operation,
            topic=args.topic or "",
            prefix=args.prefix,
            cluster=args.cluster,
            group=args.group or "",
            producer=args.producer or "",
        )
    return 0


def cmd_quota(args: argparse.Namespace, out: TextIO) -> int:
    with cli_client(args) as client:
        if args.quota_command == "set":
            rates = {rate: getattr(args, rate) for rate in QUOTA_RATES}
            if any(v < 0 for v in rates.values()):
                raise UsageError("quota rates are 0 (unlimited) or more")
            client.set_quota(args.principal, **rates)
            return 0
        quotas = client.list_quotas()
        if args.output == "json":
            print_json({"quotas": quotas}, out)
            return 0
        print("principal\t" + "\t".join(QUOTA_RATES), file=out)
        for q in quotas:
            print("\t".join(str(q[k]) for k in ("principal", *QUOTA_RATES)), file=out)
    return 0


def cmd_token(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    import hashlib

    if not args.principal.startswith("User:") or len(args.principal) <= len("User:"):
        raise UsageError("--principal must be User:<name>")
    token = stdin.readline().strip()
    if not token:
        raise UsageError("give the token on stdin")
    if args.token_command == "scram":  # a Kafka SASL/SCRAM credential: the password's keys
        from replog.errors import InvalidConfigError
        from replog.server.kafka_edge.sasl import scram_credential

        try:
            credential = scram_credential(args.mechanism, token, iterations=args.iterations)
        except InvalidConfigError as exc:
            raise UsageError(str(exc)) from None
        print(credential.entry(args.principal), file=out)
        return 0
    print(f"{args.principal} sha256:{hashlib.sha256(token.encode()).hexdigest()}", file=out)
    return 0
