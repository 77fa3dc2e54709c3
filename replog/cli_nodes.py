"""`replog node`: the cluster's nodes from the command line (part of `replog.cli`).

    replog node list [-o json]                  id, address, replicas hosted, partitions led
    replog node decommission ID [--dry-run] [--wait] [-o json]
                                                move every replica off node ID

`decommission` plans, for every partition with a replica on node ID (internal topics
included), the same replica list with ID replaced, in its place, by the node not already a
replica that hosts the fewest replicas (counting the moves planned before it; lowest id on
a tie), and asks for each move (`ReassignPartition`: the partition's leader carries it out,
docs/operations.md). With `--dry-run` it prints the plan and changes nothing; with `--wait`
it returns once no partition lists node ID any more (exit 1 if that has not happened within
`--wait-s`). Then the node can leave the cluster (docs/operations.md, Scale).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from replog.client import Client
    from replog.v1 import admin_pb2

JSON_KEYS = {
    "node list": '{"nodes": [{"id", "address", "replicas", "leaders"}]} sorted by id',
    "node decommission": '{"node", "dry_run", "moves": [{"topic", "partition", "replicas": '
    '[id], "target": [id]}], "done" (with --wait)}',
}
WAIT_POLL_S = 0.5

ClientParser = Callable[..., argparse.ArgumentParser]
AddOutput = Callable[[argparse.ArgumentParser, str], None]


@dataclass(frozen=True, slots=True)
class Move:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    target: tuple[int, ...]


def add_parser(sub: Any, client_parser: ClientParser, add_output: AddOutput) -> None:
    node = sub.add_parser(
        "node",
        help="the cluster's nodes: list, decommission",
        description="The cluster's nodes (docs/operations.md, Scale).",
    )
    nsub = node.add_subparsers(dest="node_command", required=True, metavar="ACTION")
    add_output(
        client_parser("list", "nodes, replicas hosted and partitions led", nsub), "node list"
    )
    decommission = client_parser(
        "decommission", "move every replica off a node (before it leaves the cluster)", nsub
    )
    decommission.add_argument("node_id", type=int)
    decommission.add_argument("--dry-run", action="store_true", help="print the plan only")
    decommission.add_argument(
        "--wait", action="store_true", help="return once no partition lists the node"
    )
    decommission.add_argument(
        "--wait-s", type=float, default=600.0, help="how long --wait waits (default 600)"
    )
    add_output(decommission, "node decommission")


def plan(meta: admin_pb2.Metadata, leaving: int) -> list[Move]:
    """Moves that take every replica off node `leaving` (pure: see the module doc)."""
    nodes = sorted(n.id for n in meta.nodes if n.id != leaving)
    load: Counter[int] = Counter({n: 0 for n in nodes})
    for topic in meta.topics:
        for part in topic.partitions:
            load.update(r for r in part.replicas if r in load)
    moves = []
    for topic in sorted(meta.topics, key=lambda t: t.name):
        for part in sorted(topic.partitions, key=lambda p: p.partition):
            replicas = tuple(part.replicas)
            if leaving not in replicas:
                continue
            free = [n for n in nodes if n not in replicas]
            if not free:
                raise ValueError(
                    f"{topic.name}/{part.partition} has a replica on every other node: "
                    f"nowhere to move node {leaving}'s"
                )
            new = min(free, key=lambda n: (load[n], n))
            load[new] += 1
            target = tuple(new if r == leaving else r for r in replicas)
            moves.append(Move(topic.name, part.partition, replicas, target))
    return moves


def run(args: argparse.Namespace, client: Client, out: TextIO) -> int:
    from replog.cli import UsageError, print_json

    meta = client.refresh_metadata()
    if args.node_command == "list":
        replicas: Counter[int] = Counter()
        leaders: Counter[int] = Counter()
        for topic in meta.topics:
            for part in topic.partitions:
                replicas.update(part.replicas)
                if part.leader_id > 0:
                    leaders[part.leader_id] += 1
        rows = [
            {"id": n.id, "address": n.address, "replicas": replicas[n.id], "leaders": leaders[n.id]}
            for n in sorted(meta.nodes, key=lambda n: n.id)
        ]
        if args.output == "json":
            print_json({"nodes": rows}, out)
            return 0
        print("id\taddress\treplicas\tleaders", file=out)
        for r in rows:
            print(f"{r['id']}\t{r['address']}\t{r['replicas']}\t{r['leaders']}", file=out)
        return 0
    leaving = args.node_id
    if leaving not in {n.id for n in meta.nodes}:
        raise UsageError(f"node {leaving} is not a member of the cluster")
    try:
        moves = plan(meta, leaving)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not args.dry_run:
        for m in moves:
            client.reassign_partition(m.topic, m.partition, m.target)
    done = None
    if args.wait and not args.dry_run:
        done = _wait_gone(client, leaving, args.wait_s)
    if args.output == "json":
        doc: dict[str, Any] = {
            "node": leaving,
            "dry_run": bool(args.dry_run),
            "moves": [
                {
                    "topic": m.topic,
                    "partition": m.partition,
                    "replicas": list(m.replicas),
                    "target": list(m.target),
                }
                for m in moves
            ],
        }
        if done is not None:
            doc["done"] = done
        print_json(doc, out)
    else:
        verb = "would move" if args.dry_run else "moving"
        for m in moves:
            print(
                f"{verb} {m.topic}/{m.partition}: {list(m.replicas)} -> {list(m.target)}", file=out
            )
        if not moves:
            print(f"node {leaving} holds no replica", file=out)
        if done is not None:
            print("done" if done else f"not done after {args.wait_s:g} s", file=out)
    return 1 if done is False else 0


def _wait_gone(client: Client, leaving: int, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        meta = client.refresh_metadata()
        if not any(leaving in p.replicas for t in meta.topics for p in t.partitions):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(WAIT_POLL_S)
