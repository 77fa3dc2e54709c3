"""Placement: which nodes get the replicas of a new topic's partitions.

Pure: a function of the topic's name, its size and the cluster's nodes (and racks), so
that the metadata leader's choice is reproducible and testable without a cluster.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence


def assign(
    name: str,
    partitions: int,
    replication_factor: int,
    nodes: Sequence[int],
    racks: Mapping[int, str] | None = None,
) -> tuple[tuple[int, ...], ...]:
    """Spread replicas evenly: partition p starts at node (p + crc32(name)) % n.

    With `racks` (node -> rack, "" unknown) naming two racks or more, the nodes are taken
    in a ring that alternates racks (each rack's nodes by id, racks by name), and each
    partition takes, from its start on the ring, first nodes of racks it has no replica in
    yet, then any: its replicas span min(replication_factor, racks) racks."""
    ordered = sorted(nodes)
    n = len(ordered)
    seed = zlib.crc32(name.encode())
    rack_of = {node: (racks or {}).get(node, "") for node in ordered}
    if len(set(rack_of.values())) < 2:
        return tuple(
            tuple(ordered[(p + seed + k) % n] for k in range(replication_factor))
            for p in range(partitions)
        )
    by_rack: dict[str, list[int]] = {}
    for node in ordered:
        by_rack.setdefault(rack_of[node], []).append(node)
    groups = [by_rack[r] for r in sorted(by_rack)]
    ring = [g[i] for i in range(max(map(len, groups))) for g in groups if i < len(g)]
    out = []
    for p in range(partitions):
        start = (p + seed) % n
        around = [ring[(start + k) % n] for k in range(n)]
        chosen: list[int] = []
        used: set[str] = set()
        for node in around:
            if len(chosen) < replication_factor and rack_of[node] not in used:
                chosen.append(node)
                used.add(rack_of[node])
        for node in around:
            if len(chosen) < replication_factor and node not in chosen:
                chosen.append(node)
        out.append(tuple(chosen))
    return tuple(out)
