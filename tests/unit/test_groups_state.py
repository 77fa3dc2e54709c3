"""A coordinator shard's groups (pure): fencing of commits, offsets from records, retention,
limits, and the records' format."""

from __future__ import annotations

import pytest

from replog.errors import (
    GroupNotEmptyError,
    IllegalGenerationError,
    PartitionNotAssignedError,
    TooManyGroupsError,
    TooManyMembersError,
    UnknownGroupError,
    UnknownMemberError,
)
from replog.server.groups import records
from replog.server.groups.state import EMPTY, RECONCILING, STABLE, Groups, GroupsLimits, Member

DAY_MS = 24 * 3600 * 1000


def counts(topic: str) -> int:
    return {"orders": 4, "audit": 1}.get(topic, 0)


def member(name: str, topics: tuple[str, ...] = ("orders",), session_ms: int = 1000) -> Member:
    return Member(name, "client", "host", topics, session_ms, 5000, 0)


def commit(
    group: str, *offsets: tuple[str, int, int], time_ms: int = 1, topic_id: int = 7
) -> records.Commit:
    return records.Commit(
        group,
        time_ms,
        tuple(records.OffsetEntry(t, topic_id, p, o, "meta", time_ms) for t, p, o in offsets),
    )


def settle(groups: Groups, now: int = 0) -> dict[str, set[tuple[str, int]]]:
    """Every member reports what it was told until nothing moves; what each consumes."""
    told: dict[str, set[tuple[str, int]]] = {}
    group = groups.groups["g"]
    for _ in range(4):
        for mid in sorted(group.members):
            answer = groups.heartbeat("g", mid, told.get(mid, set()), now, counts)
            told[mid] = set(answer.partitions)
    return told


def test_a_second_member_gets_partitions_only_after_the_first_releases_them() -> None:
    groups = Groups(GroupsLimits())
    first = groups.join("g", member("a"), 0, 0, counts)
    assert len(first.partitions) == 4 and not first.reconciling
    second = groups.join("g", member("b"), 0, 0, counts)
    assert second.partitions == () and second.reconciling  # "a" still holds all four
    assert second.generation == first.generation + 1
    assert groups.groups["g"].state == RECONCILING
    # "a" hears of the new generation: it is told to keep two; it still reports four.
    a = groups.heartbeat("g", "a", set(first.partitions), 0, counts)
    assert len(a.partitions) == 2
    assert groups.heartbeat("g", "b", set(), 0, counts).partitions == ()
    # It releases the other two: only now are they handed to "b".
    groups.heartbeat("g", "a", set(a.partitions), 0, counts)
    b = groups.heartbeat("g", "b", set(), 0, counts)
    assert set(b.partitions) | set(a.partitions) == {("orders", p) for p in range(4)}
    assert groups.groups["g"].state == STABLE


def test_a_member_that_stops_heartbeating_loses_its_partitions_after_its_session() -> None:
    groups = Groups(GroupsLimits())
    groups.join("g", member("a", session_ms=1000), 0, 0, counts)
    groups.join("g", member("b", session_ms=1000), 0, 0, counts)
    settle(groups)
    groups.heartbeat("g", "b", groups.groups["g"].members["b"].held, 900, counts)
    assert groups.expire(1000, 1000, counts) == []
    removed = groups.expire(1001, 1001, counts)
    assert [(r.member_id, r.why) for r in removed] == [("a", "session_timeout")]
    told = settle(groups, 1001)
    assert told == {"b": {("orders", p) for p in range(4)}}
    with pytest.raises(UnknownMemberError):
        groups.heartbeat("g", "a", set(), 1002, counts)


def test_a_member_that_keeps_a_revoked_partition_past_its_rebalance_timeout_is_removed() -> None:
    groups = Groups(GroupsLimits())
    first = groups.join("g", member("a"), 0, 0, counts)
    groups.join("g", member("b"), 0, 0, counts)
    for now in range(0, 5001, 500):  # "a" heartbeats but never lets go of anything
        groups.heartbeat("g", "a", set(first.partitions), now, counts)
        groups.heartbeat("g", "b", set(), now, counts)
    assert groups.expire(5000, 5000, counts) == []
    groups.heartbeat("g", "b", set(), 5001, counts)
    removed = groups.expire(5001, 5001, counts)
    assert [(r.member_id, r.why) for r in removed] == [("a", "rebalance_timeout")]


def test_a_removed_member_cannot_commit_over_its_successor() -> None:
    groups = Groups(GroupsLimits())
    groups.join("g", member("zombie"), 0, 0, counts)
    told = settle(groups)
    generation = groups.groups["g"].members["zombie"].generation
    groups.check_commit("g", "zombie", generation, told["zombie"])  # while a member: fine
    groups.join("g", member("b"), 0, 0, counts)
    groups.expire(2000, 2000, counts)  # both silent: removed
    with pytest.raises(UnknownMemberError):
        groups.check_commit("g", "zombie", generation, [("orders", 0)])


def test_commits_are_fenced_by_generation_and_by_what_the_member_holds() -> None:
    groups = Groups(GroupsLimits())
    groups.join("g", member("a"), 0, 0, counts)
    groups.join("g", member("b"), 0, 0, counts)
    told = settle(groups)
    a = groups.groups["g"].members["a"]
    with pytest.raises(IllegalGenerationError) as info:
        groups.check_commit("g", "a", a.generation + 5, told["a"])
    assert info.value.generation == a.generation
    with pytest.raises(PartitionNotAssignedError):
        groups.check_commit("g", "a", a.generation, told["b"])
    # The generation before the current one is accepted (its answer may cross the commit).
    groups.join("g", member("c"), 0, 0, counts)
    before = a.generation
    groups.heartbeat("g", "a", told["a"], 0, counts)
    assert a.generation > before
    groups.check_commit("g", "a", before, a.held)


def test_a_commit_without_member_is_refused_while_the_group_has_members() -> None:
    groups = Groups(GroupsLimits())
    groups.check_commit("g", "", -1, [("orders", 0)])  # no group yet: fine
    groups.join("g", member("a"), 0, 0, counts)
    with pytest.raises(GroupNotEmptyError):
        groups.check_commit("g", "", -1, [("orders", 0)])
    with pytest.raises(GroupNotEmptyError):
        groups.check_delete("g")
    groups.leave("g", "a", 0, 0, counts)
    assert "g" not in groups.groups  # no members, no offsets: forgotten
    with pytest.raises(UnknownGroupError):
        groups.check_delete("g")


def test_offsets_follow_the_records_and_only_count_for_the_topic_they_were_committed_for() -> None:
    groups = Groups(GroupsLimits())
    groups.apply(commit("g", ("orders", 0, 10), ("orders", 1, 20)), 0)
    groups.apply(commit("g", ("orders", 0, 15)), 0)
    ids = {"orders": 7}.get
    got = groups.committed("g", [], lambda t: ids(t) or 0)
    assert {tp: c.offset for tp, c in got.items()} == {("orders", 0): 15, ("orders", 1): 20}
    # The topic was deleted and created again (a new topic_id): its old offsets do not count.
    assert groups.committed("g", [("orders", 0)], lambda t: 8) == {}
    groups.apply(records.DeleteGroup("g", 5, "deleted"), 0)
    assert "g" not in groups.groups


def test_an_empty_group_expires_after_retention_counted_from_its_last_commit_or_member() -> None:
    groups = Groups(GroupsLimits())
    groups.apply(commit("g", ("orders", 0, 10), time_ms=1000), wall_ms=1000)
    assert groups.groups["g"].state == EMPTY
    assert groups.expired_groups(1000 + DAY_MS, DAY_MS) == []
    assert groups.expired_groups(1001 + DAY_MS, DAY_MS) == ["g"]
    # A member that was there until later keeps the group alive from when it left.
    groups.join("g", member("a"), 0, 2000, counts)
    assert groups.expired_groups(5 * DAY_MS, DAY_MS) == []
    groups.leave("g", "a", 0, 3 * DAY_MS, counts)
    assert groups.expired_groups(4 * DAY_MS, DAY_MS) == []
    assert groups.expired_groups(4 * DAY_MS + 1, DAY_MS) == ["g"]


def test_groups_whose_newest_record_is_old_are_listed_for_a_refresh() -> None:
    groups = Groups(GroupsLimits())
    groups.apply(commit("old", ("orders", 0, 1), time_ms=100), 0)
    groups.apply(commit("new", ("orders", 0, 1), time_ms=900), 0)
    assert groups.stale_records(1000, 500) == ["old"]


def test_groups_and_members_are_bounded() -> None:
    groups = Groups(GroupsLimits(groups_max=1, members_max=2))
    groups.join("g", member("a"), 0, 0, counts)
    groups.join("g", member("b"), 0, 0, counts)
    with pytest.raises(TooManyMembersError) as members:
        groups.join("g", member("c"), 0, 0, counts)
    assert members.value.limit == "group_members_max"
    with pytest.raises(TooManyGroupsError):
        groups.join("h", member("d"), 0, 0, counts)
    with pytest.raises(TooManyGroupsError):
        groups.check_commit("h", "", -1, [("orders", 0)])


def test_a_new_topic_partition_reaches_the_group_at_the_next_heartbeat() -> None:
    sizes = {"orders": 1}
    groups = Groups(GroupsLimits())
    answer = groups.join("g", member("a"), 0, 0, lambda t: sizes.get(t, 0))
    assert answer.partitions == (("orders", 0),)
    sizes["orders"] = 2
    answer = groups.heartbeat("g", "a", set(answer.partitions), 0, lambda t: sizes.get(t, 0))
    assert answer.partitions == (("orders", 0), ("orders", 1))
    assert answer.generation == 2


def test_records_round_trip_and_garbage_is_recognised() -> None:
    for record in (
        commit("g", ("orders", 3, 99)),
        records.DeleteGroup("g", 5, "expired"),
        records.SnapshotEnd(40, 5),
    ):
        assert records.decode(records.encode(record)) == record
        assert records.decode(records.encode(record, snapshot=12)) == record
    for bad in (
        b"\xff",
        b"[]",
        b'{"kind": "commit", "version": 2, "group": "g"}',
        b'{"kind": "commit", "version": 1, "group": "g", "time_ms": 1, "offsets": [{}]}',
        b'{"kind": "merge", "version": 1, "group": "g"}',
        b'{"kind": "delete_group", "version": 1, "group": "g", "time_ms": -1, "reason": "x"}',
    ):
        with pytest.raises(records.UnknownRecordError):
            records.decode(bad)


def test_the_last_record_names_where_a_load_may_start() -> None:
    assert records.load_pointer(records.encode(records.SnapshotEnd(40, 5), snapshot=12)) == 40
    assert records.load_pointer(records.encode(commit("g", ("orders", 0, 1)), snapshot=12)) == 12
    assert records.load_pointer(records.encode(commit("g", ("orders", 0, 1)))) is None
    for bad in (b"\xff", b"[]", b'{"snapshot": -1}', b'{"snapshot": "x"}'):
        assert records.load_pointer(bad) is None


def test_live_offsets_restate_the_current_topics_offsets_as_committed() -> None:
    groups = Groups(GroupsLimits())
    groups.apply(commit("g", ("orders", 0, 10), ("audit", 0, 3), time_ms=100), 0)
    live = groups.live_offsets("g", {"orders": 7}.get)  # type: ignore[arg-type]
    assert [(o.topic, o.partition, o.offset, o.commit_time_ms) for o in live] == [
        ("orders", 0, 10, 100)
    ]
