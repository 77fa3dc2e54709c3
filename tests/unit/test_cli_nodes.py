"""`replog node decommission`'s plan and `replog node add`'s spread (replog.cli.nodes, pure),
and `node list`'s state of a node that does not answer."""

from __future__ import annotations

import argparse
import socket

import pytest

from replog.cli.nodes import Move, node_states, plan, spread
from replog.v1 import admin_pb2


def metadata(assignments: dict[str, list[list[int]]], nodes: int = 4) -> admin_pb2.Metadata:
    meta = admin_pb2.Metadata(
        nodes=[admin_pb2.Node(id=i, address=f"h:{i}") for i in range(1, nodes + 1)]
    )
    for name, parts in assignments.items():
        topic = meta.topics.add(name=name)
        for p, replicas in enumerate(parts):
            topic.partitions.append(admin_pb2.PartitionMetadata(partition=p, replicas=replicas))
    return meta


def test_each_replica_on_the_node_goes_in_its_place_to_the_least_loaded_other_node() -> None:
    meta = metadata(
        {
            "b": [[4, 1, 2], [2, 3, 4], [1, 2, 3]],
            "a": [[3, 4, 1]],
        }
    )
    moves = plan(meta, 4)
    assert [(m.topic, m.partition) for m in moves] == [("a", 0), ("b", 0), ("b", 1)]
    for m in moves:
        assert 4 not in m.target and len(set(m.target)) == len(m.target) == 3
        # the same positions: the preferred leader's place is kept by its replacement
        assert [r for r in m.replicas if r != 4] == [r for r in m.target if r in m.replicas]
    assert moves[0].target == (3, 2, 1)  # node 2 hosts the fewest (3) of those free
    assert moves[1].target[0] == 3  # b/0: 3 is the only node free of it
    assert plan(meta, 9) == []  # a node with no replica: nothing to move


def test_a_partition_on_every_other_node_cannot_be_moved() -> None:
    with pytest.raises(ValueError, match="nowhere to move"):
        plan(metadata({"t": [[1, 2, 3, 4]]}), 4)


# -- `replog node add`'s spread (nodes.spread, pure) ---------------------------------------


def _loads(meta: admin_pb2.Metadata, moves: list[Move]) -> dict[int, int]:
    target = {(m.topic, m.partition): m.target for m in moves}
    load = {n.id: 0 for n in meta.nodes}
    for topic in meta.topics:
        for part in topic.partitions:
            for r in target.get((topic.name, part.partition), tuple(part.replicas)):
                load[r] += 1
    return load


def test_a_new_node_takes_the_average_from_the_most_loaded_and_internal_topics_stay() -> None:
    parts = [[1 + (p + k) % 3 for k in range(3)] for p in range(12)]
    meta = metadata({"t": parts, "__consumer_offsets": [[1, 2, 3]] * 4}, nodes=4)
    moves = spread(meta, 4)
    assert all(m.topic == "t" for m in moves)
    load = _loads(meta, moves)
    assert load[4] == (12 * 3 + 4 * 3) // 4  # the average, rounded down
    assert max(load.values()) - min(load.values()) <= 2
    for m in moves:
        # one replica replaced, in its place; the others stay
        changed = [(a, b) for a, b in zip(m.replicas, m.target, strict=True) if a != b]
        assert len(changed) == 1 and changed[0][1] == 4
    assert spread(meta, 4)[:1] == moves[:1]  # deterministic
    assert spread(metadata({"t": [[1, 2, 3]]}, nodes=4), 4) == []  # too little to move


def test_with_racks_a_move_never_narrows_a_partitions_racks() -> None:
    """Node 1 (rack b) is the most loaded, and the only rack-b replica of t/0-2: without
    racks, moving its replica to node 5 (rack a) would leave those partitions in one rack."""
    racks = {1: "b", 2: "b", 3: "a", 4: "a", 5: "a"}
    parts = [[1, 3, 4]] * 3 + [[1, 2, 3]] * 3 + [[1, 2, 4]] * 3

    def narrowed(moves: list[Move]) -> int:
        return sum(
            len({racks[r] for r in m.target}) < len({racks[r] for r in m.replicas}) for m in moves
        )

    assert narrowed(spread(metadata({"t": parts}, nodes=5), 5)) == 3  # racks unknown
    meta = metadata({"t": parts}, nodes=5)
    for node in meta.nodes:
        node.rack = racks[node.id]
    moves = spread(meta, 5)
    assert len(moves) == 5 and narrowed(moves) == 0


# -- `replog node list`'s state column (each node probed on 127.0.0.1) ---------------------------


def test_a_node_that_does_not_answer_is_down_and_one_without_address_unknown() -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens on it
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    meta = admin_pb2.Metadata(
        nodes=[admin_pb2.Node(id=1, address=f"127.0.0.1:{closed}"), admin_pb2.Node(id=2)]
    )
    no_tls = {k: None for k in ("tls_ca", "tls_cert", "tls_key", "tls_server_name", "token")}
    assert node_states(argparse.Namespace(**no_tls), meta) == {1: "down", 2: "unknown"}
