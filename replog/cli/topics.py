"""`replog topic`, `replog partition` and `replog offsets`: topics and their partitions.

replog topic create NAME [-p N] [--replication-factor N] [--format raw|envelope]
replog topic list|describe [-o json]
replog topic delete NAME
replog topic alter NAME [--partitions N] [--config k=v]... [--delete-config k]...
    (grow only; keyed records go elsewhere after; configs: `topic_configs`)
replog topic configs NAME
replog partition transfer-leader TOPIC PARTITION [--to NODE]
replog partition reassign TOPIC PARTITION --replicas 2,3,4
replog offsets TOPIC [-o json]
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

from replog.cli import topic_configs
from replog.cli.common import (
    Subparsers,
    UsageError,
    add_output_argument,
    cli_client,
    client_parser,
    command_group,
    node_ids,
    print_json,
    print_rows,
)

if TYPE_CHECKING:
    from replog.client import PartitionInfo

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
}


def add_parsers(sub: Subparsers) -> None:
    _add_topic(sub)
    _add_partition(sub)
    offsets = client_parser(sub, "offsets", "show earliest, committed (HW) and end offsets")
    offsets.add_argument("topic")
    add_output_argument(offsets, JSON_KEYS["offsets"])
    offsets.set_defaults(run=cmd_offsets)


def _add_topic(sub: Subparsers) -> None:
    tsub = command_group(sub, "topic", cmd_topic, "manage topics", "Manage topics.")
    create = client_parser(tsub, "create", "create a topic")
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
    topic_configs.add_config_argument(create)
    topic_configs.add_describe_parser(client_parser(tsub, "configs", "show a topic's configs"))
    add_output_argument(client_parser(tsub, "list", "list topics"), JSON_KEYS["topic list"])
    describe = client_parser(tsub, "describe", "show a topic's partitions and offsets")
    describe.add_argument("name")
    add_output_argument(describe, JSON_KEYS["topic describe"])
    delete = client_parser(tsub, "delete", "delete a topic and its data")
    delete.add_argument("name")
    alter = client_parser(tsub, "alter", "grow a topic, change its configs")
    alter.add_argument("name")
    alter.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="grow to N partitions (never fewer); keyed records of later sends may land "
        "in other partitions: murmur2(key) %% N changes with N",
    )
    topic_configs.add_alter_arguments(alter)


def _add_partition(sub: Subparsers) -> None:
    psub = command_group(
        sub, "partition", cmd_partition, "operate on one partition", "Operate on one partition."
    )
    transfer = client_parser(
        psub, "transfer-leader", "hand a partition's leadership to another of its voters"
    )
    transfer.add_argument("topic")
    transfer.add_argument("partition", type=int)
    transfer.add_argument(
        "--to", type=int, default=0, help="the node to hand over to (default: the freshest)"
    )
    reassign = client_parser(
        psub, "reassign", "move a partition's replicas to other nodes (docs/operations.md)"
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


def cmd_topic(args: argparse.Namespace, out: TextIO) -> int:

    with cli_client(args) as client:
        if args.topic_command == "create":
            client.create_topic(
                args.name,
                args.partitions,
                args.replication_factor,
                format=args.format,
                timestamp_type=args.timestamp_type,
                configs=dict(args.config),
            )
            print(f"created topic {args.name} with {args.partitions} partition(s)", file=out)
        elif args.topic_command == "list":
            topics = sorted(client.list_topics().items())
            rows: list[dict[str, object]] = [
                {"name": name, "partitions": count} for name, count in topics
            ]
            print_rows(out, args.output, "topics", rows, None)
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
        elif args.topic_command == "configs":
            topic_configs.describe(client, args, out)
        elif args.topic_command == "alter":
            if args.partitions is None and not (args.config or args.delete_config):
                raise UsageError("topic alter: give --partitions, --config or --delete-config")
            if args.config or args.delete_config:
                topic_configs.alter(client, args, out)
            if args.partitions is not None:
                count = client.create_partitions(args.name, args.partitions)
                print(f"topic {args.name} has {count} partition(s)", file=out)
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


def cmd_offsets(args: argparse.Namespace, out: TextIO) -> int:

    with cli_client(args) as client:
        rows: list[dict[str, object]] = [
            {
                "partition": o.partition,
                "earliest": o.earliest,
                "latest": o.latest,
                "log_end_offset": o.log_end_offset,
            }
            for o in client.list_offsets(args.topic)
        ]
    header = "partition\tearliest\tlatest\tlog_end"
    print_rows(out, args.output, "partitions", rows, header, {"topic": args.topic})
    return 0
