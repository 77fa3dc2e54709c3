"""Group membership as a state machine: members join, heartbeat (some of them releasing
late, some never), leave, go silent and expire; topics grow. After every step no partition
is held by two members, and once everyone reports what it was told, the group settles with
every partition consumed."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from replog.server.groups.assignor import TopicPartition
from replog.server.groups.state import STABLE, Groups, GroupsLimits, Member

SESSION_MS = 1000
REBALANCE_MS = 3000
TOPICS = ("a", "b")


class Membership(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.groups = Groups(GroupsLimits())
        self.now = 0
        self.counts = {"a": 3, "b": 1}
        self.told: dict[str, set[TopicPartition]] = {}  # what each live member was told
        self.generations: list[int] = [0]
        self.next_id = 0

    def count(self, topic: str) -> int:
        return self.counts.get(topic, 0)

    @property
    def group(self):  # type: ignore[no-untyped-def]
        return self.groups.groups.get("g")

    @rule(topics=st.sets(st.sampled_from(TOPICS), min_size=1))
    def join(self, topics: set[str]) -> None:
        self.next_id += 1
        member = Member(
            f"m{self.next_id}", "c", "h", tuple(sorted(topics)), SESSION_MS, REBALANCE_MS, 0
        )
        answer = self.groups.join("g", member, self.now, self.now, self.count)
        self.told[member.member_id] = set(answer.partitions)

    @rule(data=st.data(), release=st.booleans())
    def heartbeat(self, data: st.DataObject, release: bool) -> None:
        if not self.told:
            return
        mid = data.draw(st.sampled_from(sorted(self.told)))
        member = self.group.members[mid]
        # A member reports what it was told, plus (when slow to release) what it still holds.
        owned = set(self.told[mid]) | (set() if release else set(member.held))
        answer = self.groups.heartbeat("g", mid, owned, self.now, self.count)
        self.told[mid] = set(answer.partitions)

    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        if not self.told:
            return
        mid = data.draw(st.sampled_from(sorted(self.told)))
        self.groups.leave("g", mid, self.now, self.now, self.count)
        del self.told[mid]

    @rule(ms=st.integers(1, 4000))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        for removed in self.groups.expire(self.now, self.now, self.count):
            del self.told[removed.member_id]

    @rule(topic=st.sampled_from(TOPICS), more=st.integers(1, 3))
    def topic_grows(self, topic: str, more: int) -> None:
        self.counts[topic] += more

    @invariant()
    def no_partition_is_held_twice_and_holders_agree(self) -> None:
        group = self.group
        if group is None:
            assert not self.told
            return
        seen: dict[TopicPartition, str] = {}
        for m in group.members.values():
            for tp in m.held:
                assert tp not in seen, f"{tp} held by {seen.get(tp)} and {m.member_id}"
                seen[tp] = m.member_id
        assert seen == group.holders
        assert set(group.members) == set(self.told)

    @invariant()
    def a_member_is_told_only_what_it_holds(self) -> None:
        group = self.group
        for mid, told in self.told.items():
            assert told <= group.members[mid].held

    @invariant()
    def generations_never_go_back_while_the_group_exists(self) -> None:
        group = self.group  # (a group with no member and no offset is forgotten; member
        if group is None:  # ids never repeat, so a new one starting over fences nothing less)
            self.generations = [0]
            return
        assert group.generation >= self.generations[-1]
        self.generations.append(group.generation)

    def teardown(self) -> None:
        """Everyone left reports what it was told, twice: the group settles."""
        group = self.group
        if group is None or not group.members:
            return
        for _round in range(3):
            for mid in sorted(self.told):
                answer = self.groups.heartbeat("g", mid, self.told[mid], self.now, self.count)
                self.told[mid] = set(answer.partitions)
        assert group.state == STABLE
        subscribed = {t for m in group.members.values() for t in m.topics}
        everything = {(t, p) for t in subscribed for p in range(self.counts[t])}
        assert set().union(*self.told.values()) == everything


TestMembership = Membership.TestCase
