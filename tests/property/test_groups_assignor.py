"""The group assignor against its promises: complete, exclusive, balanced per topic, sticky."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from replog.server.groups.assignor import TopicPartition, assign

TOPICS = ["a", "b", "c", "d"]

members = st.lists(
    st.sampled_from([f"m{i}" for i in range(8)]), min_size=1, max_size=8, unique=True
)


@st.composite
def inputs(
    draw: st.DrawFn,
) -> tuple[dict[str, list[str]], dict[str, int], dict[str, set[TopicPartition]]]:
    names = draw(members)
    subs = {
        m: draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4, unique=True))
        for m in names
    }
    counts = {t: draw(st.integers(0, 12)) for t in TOPICS if draw(st.booleans())}
    current = {
        m: set(draw(st.lists(st.tuples(st.sampled_from(TOPICS), st.integers(-1, 14)), max_size=10)))
        for m in names
    }
    return subs, counts, current


@given(inputs())
def test_every_partition_of_a_subscribed_topic_goes_to_exactly_one_subscriber(
    data: tuple[dict[str, list[str]], dict[str, int], dict[str, set[TopicPartition]]],
) -> None:
    subs, counts, current = data
    out = assign(subs, counts, current)
    assert set(out) == set(subs)
    owners: Counter[TopicPartition] = Counter(tp for tps in out.values() for tp in tps)
    subscribed = {t for ts in subs.values() for t in ts}
    expected = {(t, p) for t in subscribed for p in range(counts.get(t, 0))}
    assert set(owners) == expected
    assert all(n == 1 for n in owners.values())
    for m, tps in out.items():
        assert all(t in subs[m] for t, _p in tps), "only subscribed topics"


@given(inputs())
def test_each_topic_is_balanced_among_its_subscribers(
    data: tuple[dict[str, list[str]], dict[str, int], dict[str, set[TopicPartition]]],
) -> None:
    subs, counts, current = data
    out = assign(subs, counts, current)
    for t in TOPICS:
        shares = [sum(1 for tt, _ in out[m] if tt == t) for m in subs if t in subs[m]]
        if shares:
            assert max(shares) - min(shares) <= 1


@given(inputs())
def test_members_keep_what_they_hold_up_to_their_share(
    data: tuple[dict[str, list[str]], dict[str, int], dict[str, set[TopicPartition]]],
) -> None:
    subs, counts, current = data
    out = assign(subs, counts, current)
    claimed: set[TopicPartition] = set()
    for m in sorted(subs):  # a partition held twice belongs to the first member by id
        for t in subs[m]:
            n = counts.get(t, 0)
            if n <= 0:
                continue
            k = sum(1 for mm in subs if t in subs[mm])
            held = sorted(p for tt, p in current[m] if tt == t and 0 <= p < n)
            mine = [p for p in held if (t, p) not in claimed]
            kept = {p for tt, p in out[m] if tt == t} & set(mine)
            assert len(kept) >= min(len(mine), n // k)
            claimed.update((t, p) for p in kept)


@given(inputs())
def test_the_same_input_gives_the_same_assignment(
    data: tuple[dict[str, list[str]], dict[str, int], dict[str, set[TopicPartition]]],
) -> None:
    subs, counts, current = data
    assert assign(subs, counts, current) == assign(dict(reversed(subs.items())), counts, current)


def test_a_member_joining_takes_only_the_partitions_balance_requires() -> None:
    subs = {"m1": ["a"], "m2": ["a"], "m3": ["a"]}
    before = assign(subs, {"a": 12}, {})
    assert sorted(len(v) for v in before.values()) == [4, 4, 4]
    after = assign({**subs, "m4": ["a"]}, {"a": 12}, before)
    moved = [tp for m in subs for tp in before[m] - after[m]]
    assert len(moved) == 3
    assert set(moved) == set(after["m4"])
    assert all(len(before[m] - after[m]) == 1 for m in subs)


def test_single_partition_topics_spread_over_the_members() -> None:
    topics = [f"t{i}" for i in range(10)]
    out = assign({"m1": topics, "m2": topics}, dict.fromkeys(topics, 1), {})
    assert sorted(len(v) for v in out.values()) == [5, 5]


def test_a_topic_that_does_not_exist_assigns_nothing() -> None:
    out = assign({"m1": ["ghost"], "m2": ["a"]}, {"a": 2}, {"m1": {("ghost", 0)}})
    assert out == {"m1": frozenset(), "m2": frozenset({("a", 0), ("a", 1)})}
