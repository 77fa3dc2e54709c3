"""Server-side partition assignment of a consumer group: sticky, balanced per topic.

Pure: no I/O, no clock. `assign` takes each member's subscription, each topic's partition
count and what each member holds now, and returns each member's target:

* every partition of a subscribed topic goes to exactly one member subscribed to it;
* per topic, the members subscribed to it get `n // k` or `n // k + 1` of its `n`
  partitions (`k` members); the extra ones go to the members that hold most of the topic
  already, then to those with the fewest partitions so far (so that many one-partition
  topics spread over the group), then by member id;
* sticky: a member keeps what it holds, up to its share; only the partitions that must move
  for balance (or whose member left) move. With cooperative reconciliation (`state`), a
  member that joins takes partitions only from members above their new share.

Deterministic: the same input always gives the same output (members and partitions are
walked in sorted order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

TopicPartition = tuple[str, int]


def assign(
    subscriptions: Mapping[str, Sequence[str]],
    partitions: Mapping[str, int],
    current: Mapping[str, Set[TopicPartition]],
) -> dict[str, frozenset[TopicPartition]]:
    """Each member's target (see the module docstring). `partitions` lacks a topic (or
    has 0) when it does not exist: nobody gets anything of it."""
    out: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts})
    for topic in topics:
        count = partitions.get(topic, 0)
        if count <= 0:
            continue
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        base, extra = divmod(count, len(members))
        owned = {
            m: sorted(p for t, p in current.get(m, ()) if t == topic and 0 <= p < count)
            for m in members
        }
        order = sorted(members, key=lambda m: (-len(owned[m]), len(out[m]), m))
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
        taken: set[int] = set()
        mine: dict[str, list[int]] = {m: [] for m in members}
        for m in members:  # keep what is held, up to the share (a partition listed twice:
            for p in owned[m]:  # the first member by id keeps it)
                if len(mine[m]) >= quota[m]:
                    break
                if p not in taken:
                    taken.add(p)
                    mine[m].append(p)
        free = iter(p for p in range(count) if p not in taken)
        for m in order:
            while len(mine[m]) < quota[m]:
                mine[m].append(next(free))
        for m in members:
            out[m].update((topic, p) for p in mine[m])
    return {m: frozenset(tps) for m, tps in out.items()}
