"""The `replog` command: run a node, manage topics, produce and consume records.

    replog serve --data-dir DIR --listen 127.0.0.1:7070 [--ready-file F] [...]
    replog topic create|list|describe|delete ...
    replog produce TOPIC < records        (lines, or u32-big-endian length-prefixed values)
    replog consume TOPIC [--from earliest|latest|N] [--follow] [--format text|hex|json]
    replog offsets TOPIC
    replog group list|describe|reset-offsets|delete ...   (consumer groups: cli_groups.py)
    replog node list|add|remove|decommission ...  (the cluster's nodes: cli_nodes.py)
    replog verify DATA_DIR [...]          (offline check of a stopped node's files)
    replog console [--listen 127.0.0.1:8080]   (the web console: replog/console/)
    replog completion bash|zsh            (prints a shell completion script)
    replog --version

Read-only commands (topic list, topic describe, offsets, verify, group list, group describe;
and group reset-offsets) take `--output json`
(`-o json`): one JSON document on stdout with the keys listed in each command's help.
`produce` and `consume` show progress on stderr when it is a terminal (or with
`--progress`); stdout carries only the command's output.

Clients find the server with `--address` (env REPLOG_ADDRESS, default 127.0.0.1:7070).
Exit codes: 0 success, 1 an error reported by the server or the connection, 2 bad usage or
settings, 130 interrupted.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import stat
import struct
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TextIO

from replog import __version__, cli_groups, cli_nodes
from replog.cli_progress import Progress
from replog.errors import InvalidConfigError, ReplogError

if TYPE_CHECKING:
    from replog.client import AppendResult, Client, PartitionInfo
    from replog.frames import DecodedFrames
    from replog.records import DecodedRecords, Record
    from replog.tls import ClientTls

DEFAULT_ADDRESS = "127.0.0.1:7070"
ATTEMPT_TIMEOUT_S = 2.0  # = replog.client.channels' (not imported: the CLI starts without grpc)
CHUNK_BYTES = 1 << 20
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
_LENGTH = struct.Struct(">I")


class UsageError(Exception):
    pass


# The keys of each `--output json` document; shown in the commands' help. Stable: add keys,
# never rename or remove them.
JSON_KEYS = {
    "topic list": '{"topics": [{"name", "partitions"}]} sorted by name',
    "topic describe": '{"topic", "partitions": [{"partition", "leader_id" (null: none), '
    '"epoch", "replicas": [id], "log_start_offset", "high_watermark", "log_end_offset", '
    '"segment_count", "size_bytes", "replica_status": [{"replica_id", "log_end_offset", '
    '"lag_records", "last_fetch_ms_ago"}], "corrupt_ranges": [{"replica_id", "segment", '
    '"start_position", "end_position", "first_offset", "end_offset", "detail"}], '
    '"observers": [id], "target_replicas": [id] (empty: no reassignment), '
    '"reassignment_step", "reassignment_error"}]}',
    "offsets": '{"topic", "partitions": [{"partition", "earliest", "latest", "log_end_offset"}]}',
    "verify": '{"ok", "data_dirs": [{"data_dir", "ok", "partitions", "segments", "records", '
    '"bytes_checked", "findings": [{"severity", "path", "detail"}]}]}',
    "acl list": '{"acls": [{"principal", "resource_type", "resource_name", "prefix", '
    '"operation"}]}',
    **cli_groups.JSON_KEYS,
    **cli_nodes.JSON_KEYS,
}


def add_output_argument(p: argparse.ArgumentParser, command: str) -> None:
    p.add_argument(
        "--output",
        "-o",
        choices=["text", "json"],
        default="text",
        help=f"text (default) or json: one document, {JSON_KEYS[command]}".replace("%", "%%"),
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


def print_json(document: object, out: TextIO) -> None:
    print(json.dumps(document, indent=2), file=out)


# -- parsing ------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from replog.server.settings import Settings

    parser = argparse.ArgumentParser(
        prog="replog", description="replog: a replicated commit-log service."
    )
    parser.add_argument("--version", action="version", version=f"replog {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run a node", description="Run a replog node.")
    Settings.add_arguments(serve)

    def client_parser(
        name: str, help_text: str, parent: argparse._SubParsersAction[argparse.ArgumentParser] = sub
    ) -> argparse.ArgumentParser:
        p = parent.add_parser(name, help=help_text, description=help_text)
        p.add_argument(
            "--address",
            "-a",
            default=os.environ.get("REPLOG_ADDRESS", DEFAULT_ADDRESS),
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
            default=float(os.environ.get("REPLOG_ATTEMPT_TIMEOUT", ATTEMPT_TIMEOUT_S)),
            help="deadline of one attempt of a call: a node that does not answer within it "
            "is passed over, and an address that cannot be reached fails the command "
            "(env REPLOG_ATTEMPT_TIMEOUT; default %(default)s)",
        )
        env = os.environ.get
        tls = p.add_argument_group("TLS (all off unless --tls-ca is given)")
        tls.add_argument(
            "--tls-ca",
            default=env("REPLOG_TLS_CA"),
            help="PEM CA bundle that signs the servers' certificates: TLS on (env REPLOG_TLS_CA)",
        )
        tls.add_argument(
            "--tls-cert",
            default=env("REPLOG_TLS_CERT"),
            help="PEM client certificate, for mutual TLS (env REPLOG_TLS_CERT)",
        )
        tls.add_argument(
            "--tls-key",
            default=env("REPLOG_TLS_KEY"),
            help="PEM key of --tls-cert (env REPLOG_TLS_KEY)",
        )
        tls.add_argument(
            "--token",
            default=env("REPLOG_TOKEN"),
            help="bearer token sent with every call (TLS only; env REPLOG_TOKEN)",
        )
        tls.add_argument(
            "--tls-server-name",
            default=env("REPLOG_TLS_SERVER_NAME"),
            help="name to verify in the server certificate instead of the address's host "
            "(env REPLOG_TLS_SERVER_NAME)",
        )
        return p

    topic = sub.add_parser("topic", help="manage topics", description="Manage topics.")
    tsub = topic.add_subparsers(dest="topic_command", required=True, metavar="ACTION")
    create = client_parser("create", "create a topic", tsub)
    create.add_argument("name")
    create.add_argument("--partitions", "-p", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=0)
    create.add_argument(
        "--format",
        choices=["raw", "envelope"],
        default="envelope",
        help="envelope (default): records with key, timestamp and headers; raw: values are "
        "your bytes as they are, nothing else",
    )
    create.add_argument(
        "--timestamp-type",
        choices=["create_time", "log_append_time"],
        default="create_time",
        help="envelope topics: the producer's timestamp, or the leader's clock at append",
    )
    add_output_argument(client_parser("list", "list topics", tsub), "topic list")
    describe = client_parser("describe", "show a topic's partitions and offsets", tsub)
    describe.add_argument("name")
    add_output_argument(describe, "topic describe")
    delete = client_parser("delete", "delete a topic and its data", tsub)
    delete.add_argument("name")

    produce = client_parser("produce", "append records read from stdin")
    produce.add_argument("topic")
    produce.add_argument(
        "--partition",
        "-p",
        type=int,
        default=None,
        help="default: by key, else round-robin batches",
    )
    produce.add_argument(
        "--key",
        default=None,
        help="partition by crc32 of this key (and, on an envelope topic, "
        "give each record this key)",
    )
    produce.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="envelope topics: a header on each record (repeat for more)",
    )
    produce.add_argument(
        "--format",
        choices=["lines", "length-prefixed"],
        default="lines",
        help="lines: one record per line (newline removed); length-prefixed: u32 BE length + value",
    )
    produce.add_argument("--acks", choices=["none", "leader", "all"], default="all")
    produce.add_argument("--batch-records", type=int, default=1000, help="records per Append")
    add_progress_argument(produce)

    consume = client_parser("consume", "print records of a partition")
    consume.add_argument("topic")
    consume.add_argument("--partition", "-p", type=int, default=0)
    consume.add_argument(
        "--from", dest="start", default="earliest", help="earliest, latest or an offset"
    )
    consume.add_argument(
        "--from-time",
        default=None,
        metavar="TIME",
        help="start at the first record at or after TIME: ISO 8601 (2026-11-25T10:00:00Z; "
        "no zone: UTC) or milliseconds since the epoch (replaces --from)",
    )
    consume.add_argument("--follow", "-f", action="store_true", help="keep waiting for new records")
    consume.add_argument(
        "--until-latest",
        action="store_true",
        help="stop at the high watermark seen at start (the default without --follow)",
    )
    consume.add_argument("--format", choices=["text", "hex", "json"], default="text")
    consume.add_argument("--max-records", "-n", type=int, default=None, help="stop after N records")
    add_progress_argument(consume)

    partition = sub.add_parser(
        "partition", help="operate on one partition", description="Operate on one partition."
    )
    psub = partition.add_subparsers(dest="partition_command", required=True, metavar="ACTION")
    transfer = client_parser(
        "transfer-leader", "hand a partition's leadership to another of its voters", psub
    )
    transfer.add_argument("topic")
    transfer.add_argument("partition", type=int)
    transfer.add_argument(
        "--to", type=int, default=0, help="the node to hand over to (default: the freshest)"
    )

    reassign = client_parser(
        "reassign", "move a partition's replicas to other nodes (docs/operations.md)", psub
    )
    reassign.add_argument("topic")
    reassign.add_argument("partition", type=int)
    reassign.add_argument(
        "--replicas",
        required=True,
        type=node_ids,
        help="the target node ids, preferred leader first, e.g. 2,3,4 (the current replicas "
        "cancel a move in progress)",
    )

    offsets = client_parser("offsets", "show earliest, committed (HW) and end offsets")
    offsets.add_argument("topic")
    add_output_argument(offsets, "offsets")

    cli_groups.add_parser(sub, client_parser, add_output_argument)
    cli_nodes.add_parser(sub, client_parser, add_output_argument)

    from replog.console.server import add_arguments as add_console_arguments

    add_console_arguments(
        client_parser("console", "run the web console for a cluster (docs/console.md)")
    )

    dev = sub.add_parser(
        "dev-cluster",
        help="run a local cluster of nodes (separate processes on 127.0.0.1)",
        description="Run a local cluster of replog nodes on 127.0.0.1 until interrupted.",
    )
    dev.add_argument("--nodes", type=int, default=3, help="how many nodes (1-5)")
    dev.add_argument("--data-dir", default="dev-data", help="parent of each node's data dir")
    dev.add_argument("--flush", choices=["always", "interval", "never"], default="always")
    dev.add_argument(
        "--plaintext",
        action="store_true",
        help="no TLS, no ACLs: the nodes run --insecure (default: a throwaway CA in "
        "DATA_DIR/tls, TLS, mutual TLS between nodes, client certificates and ACLs, the "
        "operator User:admin a super-user)",
    )

    acl = sub.add_parser(
        "acl", help="manage ACLs (who may do what)", description="Manage ACLs (docs/api.md)."
    )
    asub = acl.add_subparsers(dest="acl_command", required=True, metavar="ACTION")
    for name, text in (("add", "allow an operation"), ("remove", "remove an ACL")):
        p = client_parser(name, text, asub)
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
    add_output_argument(client_parser("list", "list ACLs", asub), "acl list")

    token = sub.add_parser(
        "token",
        help="hash a bearer token for the server's token file",
        description="Print the token file line for a token read from stdin: "
        "`User:<name> sha256:<hex>` (the server stores hashes only).",
    )
    token.add_argument("token_command", choices=["hash"])
    token.add_argument("--principal", required=True, help="User:<name>")

    certs = sub.add_parser(
        "certs",
        help="make a CA and node or client certificates (PEM) for TLS",
        description="Make certificates for replog's TLS in --dir: `ca` a CA (ca.pem, "
        "ca-key.pem); `node ID --host NAME...` a node certificate (URI SAN replog://node/ID, "
        "DNS or IP SANs of the names it is reached by); `client NAME` a client certificate "
        "(URI SAN replog://client/NAME). node and client need the CA in --dir.",
    )
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

    verify = sub.add_parser(
        "verify",
        help="check a stopped node's storage files offline (frames, index, checksums)",
        description="Check every segment of a stopped node's data dir without changing it; "
        "exit 1 if anything is corrupt.",
    )
    verify.add_argument("data_dirs", nargs="+", metavar="DATA_DIR")
    add_output_argument(verify, "verify")

    completion = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description='Print a completion script; e.g. in ~/.bashrc: eval "$(replog completion '
        'bash)"; in ~/.zshrc: eval "$(replog completion zsh)".',
    )
    completion.add_argument("shell", choices=["bash", "zsh"])
    return parser


# -- commands -----------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    from replog.server.node import serve
    from replog.server.settings import Settings

    settings = Settings.from_sources(vars(args))
    return serve(settings)


def cmd_topic(args: argparse.Namespace, out: TextIO) -> int:

    with cli_client(args) as client:
        if args.topic_command == "create":
            client.create_topic(
                args.name,
                args.partitions,
                args.replication_factor,
                format=args.format,
                timestamp_type=args.timestamp_type,
            )
            print(f"created topic {args.name} with {args.partitions} partition(s)", file=out)
        elif args.topic_command == "list":
            topics = sorted(client.list_topics().items())
            if args.output == "json":
                rows = [{"name": name, "partitions": count} for name, count in topics]
                print_json({"topics": rows}, out)
                return 0
            for name, count in topics:
                print(f"{name}\t{count}", file=out)
        elif args.topic_command == "describe":
            infos = client.describe_topic(args.name)
            if args.output == "json":
                fmt, timestamp_type = client.topic_config(args.name)
                rows = [describe_row(p) for p in infos]
                body = {"topic": args.name, "format": fmt, "timestamp_type": timestamp_type}
                print_json({**body, "partitions": rows}, out)
                return 0
            print(
                "partition\tleader\tepoch\treplicas\tlog_start\thw\tleo\tsegments\tbytes"
                "\treplica:leo/lag\tcorrupt\treassigning",
                file=out,
            )
            for p in infos:
                replicas = ",".join(map(str, p.replicas))
                status = (
                    ",".join(
                        f"{r.replica_id}:{r.log_end_offset}/{r.lag_records}"
                        for r in p.replica_status
                    )
                    or "-"
                )
                leader = "-" if p.leader_id is None else p.leader_id
                corrupt = (
                    ",".join(
                        f"{c.replica_id}:[{c.first_offset},{c.end_offset})"
                        for c in p.corrupt_ranges
                    )
                    or "-"
                )
                print(
                    f"{p.partition}\t{leader}\t{p.epoch}\t{replicas}\t{p.log_start_offset}\t"
                    f"{p.high_watermark}\t{p.log_end_offset}\t{p.segment_count}\t{p.size_bytes}"
                    f"\t{status}\t{corrupt}\t{reassigning(p)}",
                    file=out,
                )
        elif args.topic_command == "delete":
            client.delete_topic(args.name)
            print(f"deleted topic {args.name}", file=out)
    return 0


def reassigning(p: PartitionInfo) -> str:
    """The describe table's last column: `-`, or the target, observers, step and error."""
    if not p.target_replicas:
        return "-"
    text = "->" + ",".join(map(str, p.target_replicas))
    if p.observers:
        text += " observers=" + ",".join(map(str, p.observers))
    if p.reassignment_step:
        text += f" step={p.reassignment_step!r}"
    if p.reassignment_error:
        text += f" error={p.reassignment_error!r}"
    return text


def describe_row(p: PartitionInfo) -> dict[str, object]:
    return {
        "partition": p.partition,
        "leader_id": p.leader_id,
        "epoch": p.epoch,
        "replicas": list(p.replicas),
        "log_start_offset": p.log_start_offset,
        "high_watermark": p.high_watermark,
        "log_end_offset": p.log_end_offset,
        "segment_count": p.segment_count,
        "size_bytes": p.size_bytes,
        "replica_status": [
            {
                "replica_id": r.replica_id,
                "log_end_offset": r.log_end_offset,
                "lag_records": r.lag_records,
                "last_fetch_ms_ago": r.last_fetch_ms_ago,
            }
            for r in p.replica_status
        ],
        "corrupt_ranges": [
            {
                "replica_id": c.replica_id,
                "segment": c.segment,
                "start_position": c.start_position,
                "end_position": c.end_position,
                "first_offset": c.first_offset,
                "end_offset": c.end_offset,
                "detail": c.detail,
            }
            for c in p.corrupt_ranges
        ],
        "observers": list(p.observers),
        "target_replicas": list(p.target_replicas),
        "reassignment_step": p.reassignment_step,
        "reassignment_error": p.reassignment_error,
    }


def input_bytes_left(stream: BinaryIO) -> int | None:
    """Bytes still to read when stdin is a regular file (for an ETA); None for a pipe."""
    try:
        fd = stream.fileno()
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        return max(st.st_size - stream.tell(), 0)
    except (OSError, ValueError, AttributeError):
        return None


def read_lines(stream: BinaryIO) -> Iterator[list[bytes]]:
    """Chunks of records, one per line (a final line without newline counts)."""
    rest = b""
    while chunk := stream.read(CHUNK_BYTES):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        if lines:
            yield lines
    if rest:
        yield [rest]


def read_length_prefixed(stream: BinaryIO) -> Iterator[list[bytes]]:
    """Chunks of records framed as u32 big-endian length + value."""
    buf = b""
    while chunk := stream.read(CHUNK_BYTES):
        buf += chunk
        pos = 0
        values: list[bytes] = []
        while pos + 4 <= len(buf):
            (n,) = _LENGTH.unpack_from(buf, pos)
            if pos + 4 + n > len(buf):
                break
            values.append(buf[pos + 4 : pos + 4 + n])
            pos += 4 + n
        buf = buf[pos:]
        if values:
            yield values
    if buf:
        raise UsageError(f"stdin ends inside a length-prefixed record ({len(buf)} bytes left)")


def cmd_produce(args: argparse.Namespace, stdin: BinaryIO, out: TextIO) -> int:
    from replog.client import partition_for_key

    if args.batch_records < 1:
        raise UsageError("--batch-records must be >= 1")
    reader = read_lines if args.format == "lines" else read_length_prefixed
    framing_bytes = 1 if args.format == "lines" else _LENGTH.size
    progress = Progress(
        sys.stderr, "produced", enabled=progress_enabled(args), total_bytes=input_bytes_left(stdin)
    )
    with cli_client(args) as client:
        partitions = client.partition_count(args.topic)
        partition = args.partition
        if partition is None and args.key is not None:
            partition = partition_for_key(args.key.encode(), partitions)
        as_records = record_maker(args, client.topic_format(args.topic) == "envelope")
        producer = client.producer(
            args.topic, acks=args.acks, partitions=partitions, batch_records_max=args.batch_records
        )
        started = time.perf_counter()
        count = 0
        sent: list[tuple[int, Future[AppendResult]]] = []
        try:
            for values in reader(stdin):
                for i in range(0, len(values), args.batch_records):
                    batch = values[i : i + args.batch_records]
                    p = partition if partition is not None else len(sent) % partitions
                    sent.append((p, producer.send_batch(as_records(batch), p)))
                    count += len(batch)
                    progress.update(len(batch), sum(map(len, batch)) + framing_bytes * len(batch))
            producer.flush()
        finally:
            producer.close()
        ranges: dict[int, list[int]] = {}
        for p, fut in sent:
            res = fut.result()
            if res.base_offset < 0:
                continue
            span = ranges.setdefault(p, [res.base_offset, res.last_offset])
            span[0] = min(span[0], res.base_offset)
            span[1] = max(span[1], res.last_offset)
        elapsed = time.perf_counter() - started
        progress.finish()
        where = ", ".join(f"partition {p} offsets {a}..{b}" for p, (a, b) in sorted(ranges.items()))
        rate = count / elapsed if elapsed > 0 else 0.0
        if not where:
            where = "no offsets (acks=none)" if count else "nothing to send"
        print(
            f"produced {count} records to {args.topic}: {where} ({rate:,.0f} records/s)",
            file=out,
        )
    return 0


def record_maker(
    args: argparse.Namespace, envelope: bool
) -> Callable[[list[bytes]], Sequence[bytes | Record]]:
    """What `produce` sends for a batch of input values: records with `--key` and
    `--header`s on an envelope topic; the values on a raw topic (which holds no headers)."""
    headers = []
    for item in args.header:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--header wants NAME=VALUE, got {item!r}")
        headers.append((name, value.encode()))
    if headers and not envelope:
        raise UsageError(f"topic {args.topic} is raw: --header needs an envelope topic")
    if not envelope or (args.key is None and not headers):
        return lambda values: values
    from replog.records import Record

    key = None if args.key is None else args.key.encode()
    return lambda values: [Record(v, key=key, headers=headers) for v in values]


def _text_or_base64(body: dict[str, object], name: str, data: bytes) -> None:
    try:
        body[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        body[f"{name}_base64"] = base64.b64encode(data).decode()


def time_ms_arg(text: str) -> int:
    """`--from-time`: milliseconds since the epoch, or an ISO 8601 time."""
    from replog.client.formats import parse_time_ms

    try:
        return parse_time_ms(text)
    except ReplogError as exc:
        raise UsageError(f"--from-time: {exc.message}") from None


def format_record(
    offset: int,
    value: bytes,
    fmt: str,
    partition: int,
    meta: tuple[bytes | None, tuple[tuple[str, bytes], ...], int] | None = None,
) -> str:
    """One record as `consume` prints it; `meta` (key, headers, timestamp_ms) for an
    envelope topic's records, shown by the json format."""
    if fmt == "hex":
        return value.hex()
    if fmt == "json":
        body: dict[str, object] = {"partition": partition, "offset": offset}
        _text_or_base64(body, "value", value)
        if meta is not None:
            key, headers, timestamp_ms = meta
            if key is not None:
                _text_or_base64(body, "key", key)
            body["timestamp_ms"] = timestamp_ms
            shown = []
            for name, hvalue in headers:
                header: dict[str, object] = {"name": name}
                _text_or_base64(header, "value", hvalue)
                shown.append(header)
            if shown:
                body["headers"] = shown
        return json.dumps(body)
    return value.decode("utf-8", errors="replace")


def batch_rows(
    batch: DecodedFrames | DecodedRecords,
) -> Iterator[tuple[int, bytes, tuple[bytes | None, tuple[tuple[str, bytes], ...], int] | None]]:
    """(offset, value, (key, headers, timestamp_ms) or None on a raw topic) per record."""
    from replog.records import DecodedRecords

    if isinstance(batch, DecodedRecords):
        meta = zip(batch.keys, batch.headers, batch.timestamps, strict=True)
        return zip(batch.offsets, batch.values, meta, strict=True)
    return zip(batch.offsets, batch.values, repeat(None))


def cmd_consume(args: argparse.Namespace, out: TextIO) -> int:

    limit = args.max_records
    if limit is not None and limit < 0:
        raise UsageError("--max-records must be >= 0")
    if args.follow and args.until_latest:
        raise UsageError("--follow and --until-latest exclude each other")
    with cli_client(args) as client:
        from_time_ms = None if args.from_time is None else time_ms_arg(args.from_time)
        (offs,) = client.list_offsets(args.topic, [args.partition], timestamp_ms=from_time_ms)
        start: str = args.start
        if offs.offset_for_timestamp is not None:
            offset = offs.offset_for_timestamp
        elif start == "earliest":
            offset = offs.earliest
        elif start == "latest":
            offset = offs.latest
        elif start.isdigit():
            offset = int(start)
        else:
            raise UsageError(f"--from must be earliest, latest or an offset, got {start!r}")
        shown = 0
        if limit == 0:
            return 0
        if args.follow:
            consumer = client.consumer(args.topic, args.partition, offset)
            try:
                for batch in consumer.batches():
                    for o, v, m in batch_rows(batch):
                        print(format_record(o, v, args.format, args.partition, m), file=out)
                        shown += 1
                        if limit is not None and shown >= limit:
                            return 0
                    out.flush()
            finally:
                consumer.close()
            return 0
        end = offs.latest  # without --follow: what is committed now
        total = max(end - offset, 0)
        if limit is not None:
            total = min(total, limit)
        progress = Progress(
            sys.stderr, "consumed", enabled=progress_enabled(args), total_records=total
        )
        try:
            while offset < end:
                res = client.fetch(args.topic, args.partition, offset)
                batch_records = batch_bytes = 0
                for o, v, m in batch_rows(res.records):
                    if o >= end:
                        return 0
                    print(format_record(o, v, args.format, args.partition, m), file=out)
                    shown += 1
                    batch_records += 1
                    batch_bytes += len(v)
                    if limit is not None and shown >= limit:
                        return 0
                progress.update(batch_records, batch_bytes)
                if res.next_offset <= offset:
                    break
                offset = res.next_offset
        finally:
            out.flush()
            progress.finish()
    return 0


def cmd_partition(args: argparse.Namespace, out: TextIO) -> int:

    where = f"{args.topic}/{args.partition}"
    with cli_client(args) as client:
        if args.partition_command == "reassign":
            replicas, target = client.reassign_partition(args.topic, args.partition, args.replicas)
            moving = ",".join(map(str, target)) if target else "nothing (already there)"
            print(f"{where}: replicas {','.join(map(str, replicas))}, moving to {moving}", file=out)
            return 0
        leader = client.transfer_leadership(args.topic, args.partition, args.to)
    print(f"{where}: leadership handed to node {leader}", file=out)
    return 0


def node_ids(text: str) -> list[int]:
    """`2,3,4` -> [2, 3, 4] (argparse type)."""
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of ids") from None
    if not ids or min(ids) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: node ids are positive integers")
    return ids


def cmd_offsets(args: argparse.Namespace, out: TextIO) -> int:

    with cli_client(args) as client:
        offsets = client.list_offsets(args.topic)
        if args.output == "json":
            rows = [
                {
                    "partition": o.partition,
                    "earliest": o.earliest,
                    "latest": o.latest,
                    "log_end_offset": o.log_end_offset,
                }
                for o in offsets
            ]
            print_json({"topic": args.topic, "partitions": rows}, out)
            return 0
        print("partition\tearliest\tlatest\tlog_end", file=out)
        for o in offsets:
            print(f"{o.partition}\t{o.earliest}\t{o.latest}\t{o.log_end_offset}", file=out)
    return 0


def cmd_group(args: argparse.Namespace, out: TextIO) -> int:

    with cli_client(args) as client:
        return cli_groups.run(args, client, out)


def cmd_node(args: argparse.Namespace, out: TextIO) -> int:

    with cli_client(args) as client:
        return cli_nodes.run(args, client, out)


def cmd_console(args: argparse.Namespace, out: TextIO) -> int:
    from replog.console.server import ConsoleUsageError
    from replog.console.server import run as run_console

    try:
        return run_console(args, out)
    except ConsoleUsageError as err:
        raise UsageError(str(err)) from None


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    from replog.storage.verify import main as verify_main
    from replog.storage.verify import verify_data_dir

    if args.output == "text":
        return verify_main(args.data_dirs, out)
    dirs: list[dict[str, object]] = []
    for arg in args.data_dirs:
        if not Path(arg).is_dir():
            raise UsageError(f"{arg} is not a directory")
        report = verify_data_dir(Path(arg))
        dirs.append(
            {
                "data_dir": arg,
                "ok": report.ok,
                "partitions": report.partitions,
                "segments": report.segments,
                "records": report.records,
                "bytes_checked": report.bytes_checked,
                "findings": [
                    {"severity": f.severity, "path": str(f.path), "detail": f.detail}
                    for f in report.findings
                ],
            }
        )
    ok = all(d["ok"] for d in dirs)
    print_json({"ok": ok, "data_dirs": dirs}, out)
    return 0 if ok else EXIT_ERROR


def cmd_dev_cluster(args: argparse.Namespace, out: TextIO) -> int:
    import signal
    import threading

    from replog.devcluster import DevCluster, Supervisor

    if not 1 <= args.nodes <= 5:
        raise UsageError("--nodes must be in [1, 5]")
    cluster = DevCluster(
        Path(args.data_dir),
        args.nodes,
        extra_args=["--flush", args.flush],
        tls=not args.plaintext,
        acl=not args.plaintext,  # users and ACLs too; the printed certificate: the operator's
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def say(line: str) -> None:
        print(line, file=out, flush=True)

    try:
        cluster.start()
        for node_id, node in cluster.members.items():
            assert node.proc is not None
            say(f"node {node_id}: {node.address}  pid {node.proc.pid}  (log: {node.log_file})")
        if cluster.client_tls is not None:
            t = cluster.client_tls
            say(
                "TLS and ACLs on; for clients, the operator's certificate (super-user "
                f"User:admin): export REPLOG_TLS_CA={t.ca_file} "
                f"REPLOG_TLS_CERT={t.cert_file} REPLOG_TLS_KEY={t.key_file}"
            )
        say(f"bootstrap: {cluster.bootstrap}   (Ctrl-C stops the cluster)")
        say("kill -9 a node's pid to try a failover: it is restarted (same data dir and ports)")
        supervisor = Supervisor(cluster, say)
        while not stop.wait(0.5):
            supervisor.check()
            if not supervisor.any_up:
                say("every node died too often; stopping")
                return EXIT_ERROR
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


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


def cmd_token(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    import hashlib

    if not args.principal.startswith("User:") or len(args.principal) <= len("User:"):
        raise UsageError("--principal must be User:<name>")
    token = stdin.readline().strip()
    if not token:
        raise UsageError("give the token on stdin")
    print(f"{args.principal} sha256:{hashlib.sha256(token.encode()).hexdigest()}", file=out)
    return 0


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


def cli_client(args: argparse.Namespace) -> Client:
    """The client of a command, from its `--address`, deadlines, TLS and token options."""
    from replog.client import Client

    return Client(
        args.address,
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


def run(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out = sys.stdout
    try:
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "topic":
            return cmd_topic(args, out)
        if args.command == "produce":
            return cmd_produce(args, sys.stdin.buffer, out)
        if args.command == "consume":
            return cmd_consume(args, out)
        if args.command == "offsets":
            return cmd_offsets(args, out)
        if args.command == "partition":
            return cmd_partition(args, out)
        if args.command == "group":
            return cmd_group(args, out)
        if args.command == "node":
            return cmd_node(args, out)
        if args.command == "dev-cluster":
            return cmd_dev_cluster(args, out)
        if args.command == "verify":
            return cmd_verify(args, out)
        if args.command == "console":
            return cmd_console(args, out)
        if args.command == "certs":
            return cmd_certs(args, out)
        if args.command == "acl":
            return cmd_acl(args, out)
        if args.command == "token":
            return cmd_token(args, sys.stdin, out)
        if args.command == "completion":
            from replog.cli_completion import bash_script, zsh_script

            script = bash_script if args.shell == "bash" else zsh_script
            out.write(script(parser))
            return 0
        parser.error(f"unknown command {args.command}")
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
    return 0


def main() -> None:
    sys.exit(run())
