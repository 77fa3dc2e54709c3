"""`replog group`: consumer groups from the command line (part of `replog.cli`).

    replog group list [-o json]
    replog group describe GROUP [-o json]       members, assignment, committed offsets, lag
    replog group reset-offsets GROUP (--to-earliest | --to-latest | --to-offset N | --to-time T)
                 [--topic T]... [--partition P]... [--dry-run] [-o json]
    replog group delete GROUP

`reset-offsets` commits offsets outside membership, so the group must be stopped (no
members: else GROUP_NOT_EMPTY, exit 1); without `--topic` it resets every topic the group
has offsets for; `--to-offset` is clamped into each partition's [earliest, latest];
`--to-time` (ISO 8601 or ms since the epoch) is each partition's first committed offset
whose record timestamp is >= it (ListOffsets by time; latest when none is). With
`--dry-run` it prints the plan and changes nothing.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

from replog.cli.common import (
    Subparsers,
    UsageError,
    add_output_argument,
    cli_client,
    client_parser,
    command_group,
    print_json,
    print_rows,
    time_ms_arg,
)

if TYPE_CHECKING:
    from replog.client import Client
    from replog.client.groups import GroupDescription

JSON_KEYS = {
    "group list": '{"groups": [{"group", "state", "members", "generation", "coordinator_id"}]} '
    "sorted by group",
    "group describe": '{"group", "state", "generation", "coordinator_id", "members": '
    '[{"member_id", "client_id", "client_host", "topics", "partitions": [{"topic", '
    '"partition"}], "target": [{"topic", "partition"}], "generation", "session_timeout_ms", '
    '"last_heartbeat_ms_ago"}], "partitions": [{"topic", "partition", "committed_offset" '
    '(-1: none), "metadata", "commit_time_ms", "high_watermark" (-1: unknown), "lag" (-1: '
    'unknown), "member_id" ("": none)}]}',
    "group reset-offsets": '{"group", "dry_run", "partitions": [{"topic", "partition", '
    '"current_offset" (-1: none), "new_offset"}]}',
}


def add_parser(sub: Subparsers) -> None:
    gsub = command_group(
        sub,
        "group",
        cmd_group,
        "consumer groups: list, describe, reset offsets, delete",
        "Consumer groups (docs/api.md, Consumer groups).",
    )
    add_output_argument(
        client_parser(gsub, "list", "list the cluster's groups"), JSON_KEYS["group list"]
    )
    describe = client_parser(
        gsub, "describe", "a group's members, assignment, committed offsets and lag"
    )
    describe.add_argument("group")
    add_output_argument(describe, JSON_KEYS["group describe"])
    reset = client_parser(
        gsub, "reset-offsets", "set a stopped group's committed offsets (it must have no members)"
    )
    reset.add_argument("group")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="each partition's log start")
    target.add_argument("--to-latest", action="store_true", help="each partition's HW")
    target.add_argument("--to-offset", type=int, help="this offset (clamped per partition)")
    target.add_argument(
        "--to-time",
        help="the first offset whose record timestamp is >= this time (ISO 8601 or ms)",
    )
    reset.add_argument(
        "--topic",
        action="append",
        default=[],
        help="a topic to reset (repeat; default: every topic the group has offsets for)",
    )
    reset.add_argument(
        "--partition", action="append", type=int, default=[], help="with one --topic: only these"
    )
    reset.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    add_output_argument(reset, JSON_KEYS["group reset-offsets"])
    delete = client_parser(gsub, "delete", "drop a stopped group's committed offsets")
    delete.add_argument("group")


def cmd_group(args: argparse.Namespace, out: TextIO) -> int:
    with cli_client(args) as client:
        return run(args, client, out)


def run(args: argparse.Namespace, client: Client, out: TextIO) -> int:

    command = args.group_command
    if command == "list":
        groups = sorted(client.list_groups(), key=lambda g: g.group)
        rows: list[dict[str, object]] = [
            {
                "group": g.group,
                "state": g.state,
                "members": g.members,
                "generation": g.generation,
                "coordinator_id": g.coordinator_id,
            }
            for g in groups
        ]
        header = "group\tstate\tmembers\tgeneration\tcoordinator"
        print_rows(out, args.output, "groups", rows, header)
    elif command == "describe":
        d = client.describe_group(args.group)
        if args.output == "json":
            print_json(describe_document(d), out)
        else:
            print_description(d, out)
    elif command == "reset-offsets":
        if args.partition and len(args.topic) != 1:
            raise UsageError("--partition needs exactly one --topic")
        plan = reset_plan(client, args)
        if not args.dry_run:
            client.commit_offsets(args.group, {(t, p): new for t, p, _cur, new in plan})
        if args.output == "json":
            rows = [
                {"topic": t, "partition": p, "current_offset": cur, "new_offset": new}
                for t, p, cur, new in plan
            ]
            print_json({"group": args.group, "dry_run": args.dry_run, "partitions": rows}, out)
            return 0
        print("topic\tpartition\tcurrent\tnew", file=out)
        for t, p, cur, new in plan:
            print(f"{t}\t{p}\t{cur}\t{new}", file=out)
        what = "would reset (dry run)" if args.dry_run else "reset"
        print(f"{what} {len(plan)} partition(s) of group {args.group}", file=out)
    elif command == "delete":
        client.delete_group(args.group)
        print(f"deleted group {args.group}", file=out)
    return 0


def reset_plan(client: Client, args: argparse.Namespace) -> list[tuple[str, int, int, int]]:
    """(topic, partition, current committed offset or -1, new offset) for each partition."""

    current = {(c.topic, c.partition): c.offset for c in client.committed_offsets(args.group)}
    topics = list(dict.fromkeys(args.topic)) or sorted({t for t, _p in current})
    if not topics:
        raise UsageError(f"group {args.group} has no offsets: name the topics with --topic")
    plan = []
    at_ms = None if args.to_time is None else time_ms_arg(args.to_time, "--to-time")
    for topic in topics:
        wanted = set(args.partition)
        for o in client.list_offsets(topic, timestamp_ms=at_ms):
            if wanted and o.partition not in wanted:
                continue
            if args.to_earliest:
                new = o.earliest
            elif args.to_latest:
                new = o.latest
            elif at_ms is not None:
                assert o.offset_for_timestamp is not None
                new = o.offset_for_timestamp
            else:
                new = min(max(args.to_offset, o.earliest), o.latest)
            plan.append((topic, o.partition, current.get((topic, o.partition), -1), new))
        missing = wanted - {p for t, p, _c, _n in plan if t == topic}
        if missing:
            raise UsageError(f"{topic} has no partition {sorted(missing)}")
    return plan


def describe_document(d: GroupDescription) -> dict[str, object]:
    def tps(items: tuple[tuple[str, int], ...]) -> list[dict[str, object]]:
        return [{"topic": t, "partition": p} for t, p in items]

    return {
        "group": d.group,
        "state": d.state,
        "generation": d.generation,
        "coordinator_id": d.coordinator_id,
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "topics": list(m.topics),
                "partitions": tps(m.partitions),
                "target": tps(m.target),
                "generation": m.generation,
                "session_timeout_ms": m.session_timeout_ms,
                "last_heartbeat_ms_ago": m.last_heartbeat_ms_ago,
            }
            for m in d.members
        ],
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "committed_offset": p.committed_offset,
                "metadata": p.metadata,
                "commit_time_ms": p.commit_time_ms,
                "high_watermark": p.high_watermark,
                "lag": p.lag,
                "member_id": p.member_id,
            }
            for p in d.partitions
        ],
    }


def print_description(d: GroupDescription, out: TextIO) -> None:
    print(
        f"group {d.group}  state {d.state}  generation {d.generation}  "
        f"coordinator {d.coordinator_id}  members {len(d.members)}",
        file=out,
    )
    if d.members:
        print("\nmember\tclient\thost\tpartitions\tlast_heartbeat_ms_ago", file=out)
        for m in d.members:
            held = ",".join(f"{t}/{p}" for t, p in m.partitions) or "-"
            print(
                f"{m.member_id}\t{m.client_id}\t{m.client_host}\t{held}\t{m.last_heartbeat_ms_ago}",
                file=out,
            )
    print("\ntopic\tpartition\tcommitted\thw\tlag\tmember", file=out)
    for p in d.partitions:
        committed = "-" if p.committed_offset < 0 else p.committed_offset
        hw = "?" if p.high_watermark < 0 else p.high_watermark
        lag = "?" if p.lag < 0 else p.lag
        print(f"{p.topic}\t{p.partition}\t{committed}\t{hw}\t{lag}\t{p.member_id or '-'}", file=out)
