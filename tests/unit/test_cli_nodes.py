"""`replog node decommission`'s plan (cli_nodes.plan, pure)."""

from __future__ import annotations

import pytest

from replog.cli_nodes import plan
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
