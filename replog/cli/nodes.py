"""`replog node`: the cluster's nodes from the command line (part of `replog.cli`).

    replog node list [-o json]                  id, address, replicas hosted, partitions led,
                                                role in the metadata quorum, rack, state
    replog node add ID ADDRESS [--peer-address HOST:PORT] [--no-spread] [--wait] [-o json]
                                                make node ID a member, then spread replicas
    replog node remove ID [--wait] [-o json]    end node ID's membership (hosting nothing)
    replog node decommission ID [--dry-run] [--wait] [-o json]
                                                move every replica off node ID

`add` records the node as a member (`AddNode`): every node reaches it at once, without a
restart, and it joins the metadata quorum (observer, then voter among the first five members
by id, once caught up). Then, unless `--no-spread`, it moves replicas of user topics onto
it (`spread`): partitions in name order, each moving its replica on the most loaded of its
nodes to the new node while that node holds at least two replicas more than the new one,
until the new node holds the cluster's average (rounded down). With racks (`--rack` on
every node, as `GetMetadata` reports them), a replica moves only where its partition keeps
spanning as many racks as before. The new replica takes the moved one's place in the
list, so the new node also becomes preferred leader of some partitions, and leader
balancing hands them over.

`decommission` plans, for every partition with a replica on node ID (internal topics
included), the same replica list with ID replaced, in its place, by the node not already a
replica that hosts the fewest replicas (counting the moves planned before it; lowest id on
a tie), and asks for each move (`ReassignPartition`: the partition's leader carries it out,
docs/operations.md). With `--dry-run` it prints the plan and changes nothing. `remove` then
ends the membership (`RemoveNode`, refused with NODE_NOT_EMPTY while a replica is left).

`--wait` returns once the moves are done (add, decommission) or the node is out of the
metadata quorum (remove); exit 1 if that has not happened within `--wait-s`.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from replog.cli.common import (
    Subparsers,
    UsageError,
    add_output_argument,
    cli_client,
    client_parser,
    client_tls,
    command_group,
    print_json,
)

if TYPE_CHECKING:
    from replog.client import Client
    from replog.v1 import admin_pb2

JSON_KEYS = {
    "node list": '{"nodes": [{"id", "address", "replicas", "leaders", "metadata": "voter"|'
    '"observer"|"", "rack", "state": "up"|"not-ready"|"down"|"unknown"}]} sorted by id',
    "node add": '{"node", "nodes": [{"id", "address"}], "moves": [{"topic", "partition", '
    '"replicas": [id], "target": [id]}], "done" (with --wait)}',
    "node remove": '{"node", "nodes": [{"id", "address"}], "done" (with --wait)}',
    "node decommission": '{"node", "dry_run", "moves": [{"topic", "partition", "replicas": '
    '[id], "target": [id]}], "done" (with --wait)}',
}
WAIT_POLL_S = 0.5
PROBE_THREADS_MAX = 8


@dataclass(frozen=True, slots=True)
class Move:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    target: tuple[int, ...]


def add_parser(sub: Subparsers) -> None:
    nsub = command_group(
        sub,
        "node",
        cmd_node,
        "the cluster's nodes: list, add, remove, decommission",
        "The cluster's nodes (docs/operations.md, Scale).",
    )
    add_output_argument(
        client_parser(nsub, "list", "nodes, replicas hosted and partitions led"),
        JSON_KEYS["node list"],
    )
    add = client_parser(nsub, "add", "make a node a member of the cluster (no restart)")
    add.add_argument("node_id", type=int)
    add.add_argument("node_address", metavar="ADDRESS", help="host:port clients connect to")
    add.add_argument(
        "--peer-address", default="", help="host:port of its peer listener, if it has one"
    )
    add.add_argument(
        "--no-spread", action="store_true", help="move no replicas onto it (see the module doc)"
    )
    _wait_arguments(add, "return once the replicas moved onto it are there")
    add_output_argument(add, JSON_KEYS["node add"])
    remove = client_parser(nsub, "remove", "end a node's membership (it must host nothing)")
    remove.add_argument("node_id", type=int)
    _wait_arguments(remove, "return once it has left the metadata quorum")
    add_output_argument(remove, JSON_KEYS["node remove"])
    decommission = client_parser(
        nsub, "decommission", "move every replica off a node (before it leaves the cluster)"
    )
    decommission.add_argument("node_id", type=int)
    decommission.add_argument("--dry-run", action="store_true", help="print the plan only")
    _wait_arguments(decommission, "return once no partition lists the node")
    add_output_argument(decommission, JSON_KEYS["node decommission"])


def _wait_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--wait", action="store_true", help=what)
    parser.add_argument(
        "--wait-s", type=float, default=600.0, help="how long --wait waits (default 600)"
    )


def _load(meta: admin_pb2.Metadata, nodes: list[int]) -> Counter[int]:
    load: Counter[int] = Counter({n: 0 for n in nodes})
    for topic in meta.topics:
        for part in topic.partitions:
            load.update(r for r in part.replicas if r in load)
    return load


def spread(meta: admin_pb2.Metadata, new: int) -> list[Move]:
    """Moves that bring replicas of user topics onto node `new` (pure: see the module doc)."""
    nodes = sorted({n.id for n in meta.nodes} | {new})
    load = _load(meta, nodes)
    rack = {n.id: n.rack for n in meta.nodes}
    racked = len(set(rack.values())) > 1 and all(rack.get(n) for n in nodes)

    def keeps_racks(replicas: tuple[int, ...], donor: int) -> bool:
        """Replacing `donor` by `new` spans as many racks as before (racks known)."""
        if not racked:
            return True
        after = {rack[r] for r in replicas if r != donor} | {rack[new]}
        return len(after) >= len({rack[r] for r in replicas})

    fair = sum(load.values()) // len(nodes)
    moves: list[Move] = []
    for topic in sorted(meta.topics, key=lambda t: t.name):
        if topic.name.startswith("__"):
            continue  # internal topics (consumer offsets) stay where they are
        for part in sorted(topic.partitions, key=lambda p: p.partition):
            replicas = tuple(part.replicas)
            if load[new] >= fair:
                return moves
            if new in replicas or not replicas:
                continue
            donors = [r for r in replicas if keeps_racks(replicas, r)]
            if not donors:
                continue
            donor = max(donors, key=lambda r: (load[r], -r))
            if load[donor] < load[new] + 2:
                continue
            load[donor] -= 1
            load[new] += 1
            target = tuple(new if r == donor else r for r in replicas)
            moves.append(Move(topic.name, part.partition, replicas, target))
    return moves


def plan(meta: admin_pb2.Metadata, leaving: int) -> list[Move]:
    """Moves that take every replica off node `leaving` (pure: see the module doc)."""
    nodes = sorted(n.id for n in meta.nodes if n.id != leaving)
    load = _load(meta, nodes)
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


def cmd_node(args: argparse.Namespace, out: TextIO) -> int:
    with cli_client(args) as client:
        return run(args, client, out)


def run(args: argparse.Namespace, client: Client, out: TextIO) -> int:

    if args.node_command == "add":
        return _add(args, client, out)
    if args.node_command == "remove":
        return _remove(args, client, out)
    meta = client.refresh_metadata()
    if args.node_command == "list":
        return _list(args, meta, out, node_states(args, meta))
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
        done = _wait_until(client, args.wait_s, lambda meta: not _hosts(meta, leaving))
    doc: dict[str, Any] = {"node": leaving, "dry_run": bool(args.dry_run)}
    _print_moves(args, doc, moves, done, out, f"node {leaving} holds no replica")
    return 1 if done is False else 0


def node_states(args: argparse.Namespace, meta: admin_pb2.Metadata) -> dict[int, str]:
    """Each node's state, asked of the node itself in parallel (the console's probe: its
    readiness health check, within 2 s): `up` (serving, every replica caught up),
    `not-ready` (answers, but catching up or shutting down), `down` (no answer), `unknown`
    (no address known yet)."""
    from replog.console.cluster import DOWN, READY, Prober

    prober = Prober(client_tls(args), args.token)
    names = {READY: "up", DOWN: "down"}
    try:
        with ThreadPoolExecutor(PROBE_THREADS_MAX) as pool:
            known = [n for n in meta.nodes if n.address]
            found = pool.map(lambda n: prober.probe(n.address)[0], known)
            states = {
                n.id: names.get(state, "not-ready") for n, state in zip(known, found, strict=True)
            }
    finally:
        prober.close()
    return {n.id: states.get(n.id, "unknown") for n in meta.nodes}


def _list(
    args: argparse.Namespace, meta: admin_pb2.Metadata, out: TextIO, states: dict[int, str]
) -> int:
    replicas: Counter[int] = Counter()
    leaders: Counter[int] = Counter()
    for topic in meta.topics:
        for part in topic.partitions:
            replicas.update(part.replicas)
            if part.leader_id >= 0:  # -1: no leader known (node ids start at 0)
                leaders[part.leader_id] += 1
    voters, observers = set(meta.metadata_voters), set(meta.metadata_observers)
    rows = [
        {
            "id": n.id,
            "address": n.address,
            "replicas": replicas[n.id],
            "leaders": leaders[n.id],
            "metadata": "voter" if n.id in voters else "observer" if n.id in observers else "",
            "rack": n.rack,
            "state": states.get(n.id, "unknown"),
        }
        for n in sorted(meta.nodes, key=lambda n: n.id)
    ]
    if args.output == "json":
        print_json({"nodes": rows}, out)
        return 0
    print("id\taddress\treplicas\tleaders\tmetadata\track\tstate", file=out)
    for r in rows:
        role, rack = r["metadata"] or "-", r["rack"] or "-"
        cells = (r["id"], r["address"], r["replicas"], r["leaders"], role, rack, r["state"])
        print("\t".join(map(str, cells)), file=out)
    return 0


def _add(args: argparse.Namespace, client: Client, out: TextIO) -> int:
    new = args.node_id
    nodes = client.add_node(new, args.node_address, args.peer_address)
    moves: list[Move] = []
    if not args.no_spread:
        moves = spread(client.refresh_metadata(), new)
        for m in moves:
            client.reassign_partition(m.topic, m.partition, m.target)
    done = None
    if args.wait:
        wanted = {(m.topic, m.partition): set(m.target) for m in moves}

        def arrived(meta: admin_pb2.Metadata) -> bool:
            there = {
                (t.name, p.partition): set(p.replicas) for t in meta.topics for p in t.partitions
            }
            in_quorum = new in meta.metadata_voters or new in meta.metadata_observers
            return in_quorum and all(there.get(k) == v for k, v in wanted.items())

        done = _wait_until(client, args.wait_s, arrived)
    doc: dict[str, Any] = {"node": new, "nodes": [{"id": i, "address": a} for i, a in nodes]}
    if args.output != "json":
        print(f"node {new} is a member: {', '.join(f'{i}={a}' for i, a in nodes)}", file=out)
    _print_moves(args, doc, moves, done, out, "no replica to move onto it")
    return 1 if done is False else 0


def _remove(args: argparse.Namespace, client: Client, out: TextIO) -> int:
    gone = args.node_id
    nodes = client.remove_node(gone)
    done = None
    if args.wait:
        # Asked of the members only: the node removed never hears of the record that took
        # it out of the quorum (its leader stopped sending to it), so its view stays old.
        members = ",".join(a for _i, a in nodes)
        with cli_client(args, members) as others:
            done = _wait_until(
                others,
                args.wait_s,
                lambda meta: (
                    meta.node_id != gone
                    and gone not in meta.metadata_voters
                    and gone not in meta.metadata_observers
                ),
            )
    if args.output == "json":
        doc: dict[str, Any] = {"node": gone, "nodes": [{"id": i, "address": a} for i, a in nodes]}
        if done is not None:
            doc["done"] = done
        print_json(doc, out)
    else:
        print(f"node {gone} is no longer a member: stop it once it left the quorum", file=out)
        if done is not None:
            print("done" if done else f"not done after {args.wait_s:g} s", file=out)
    return 1 if done is False else 0


def _print_moves(
    args: argparse.Namespace,
    doc: dict[str, Any],
    moves: list[Move],
    done: bool | None,
    out: TextIO,
    none: str,
) -> None:

    dry = bool(getattr(args, "dry_run", False))
    if args.output == "json":
        doc["moves"] = [
            {
                "topic": m.topic,
                "partition": m.partition,
                "replicas": list(m.replicas),
                "target": list(m.target),
            }
            for m in moves
        ]
        if done is not None:
            doc["done"] = done
        print_json(doc, out)
        return
    verb = "would move" if dry else "moving"
    for m in moves:
        print(f"{verb} {m.topic}/{m.partition}: {list(m.replicas)} -> {list(m.target)}", file=out)
    if not moves:
        print(none, file=out)
    if done is not None:
        print("done" if done else f"not done after {args.wait_s:g} s", file=out)


def _hosts(meta: admin_pb2.Metadata, node: int) -> bool:
    return any(node in p.replicas for t in meta.topics for p in t.partitions)


def _wait_until(
    client: Client, wait_s: float, condition: Callable[[admin_pb2.Metadata], bool]
) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        if condition(client.refresh_metadata()):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(WAIT_POLL_S)
