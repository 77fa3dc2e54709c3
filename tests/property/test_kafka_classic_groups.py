"""Kafka's classic group protocol (replog/server/kafka_edge/classic.py) as a state machine:
members join (both ways of getting an id), rejoin with a new subscription, sync (the
leader with assignments), heartbeat with the right or a stale generation, leave, and time
passes. After every step the group's state agrees with its members and the bytes held; an
answer is only ever delivered to a request that waits; and once everyone goes silent,
every waiting request is answered and the group ends (no wait outlives the deadlines)."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from replog.kafka.errors import ErrorCode as E
from replog.server.kafka_edge import classic
from replog.server.kafka_edge.classic import ClassicGroups, ClassicLimits, JoinReply, Parked

G = "g"
SESSION_MS = 1000
REBALANCE_MS = 3000


class ClassicMembership(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.groups = ClassicGroups(ClassicLimits(members_max=6))
        self.now = 0
        self.next_id = 0
        self.known: dict[str, int] = {}  # member id -> the generation it was last told
        self.waiting: set[tuple[str, str]] = set()  # (member id, "join" | "sync")

    def _join(self, member_id: str, v4: bool, subscription: bytes) -> None:
        self.next_id += 1
        got = self.groups.join(
            G,
            member_id,
            client_id="c",
            client_host="h",
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS,
            protocol_type="consumer",
            protocols=(("range", subscription),),
            require_known_member_id=v4,
            fresh_member_id=f"m{self.next_id}",
            now_ms=self.now,
        )
        if isinstance(got, Parked):
            self.known.setdefault(got.member_id, -1)
            self.waiting.add((got.member_id, "join"))
        elif got.error == E.MEMBER_ID_REQUIRED:
            self._join(got.member_id, v4, subscription)
        elif got.error == E.NONE:
            self.known[got.member_id] = got.generation
        self._collect()

    def _collect(self) -> None:
        for d in self.groups.take_outbox():
            kind = "join" if isinstance(d.reply, JoinReply) else "sync"
            assert (d.member_id, kind) in self.waiting, d  # only to a request that waits
            self.waiting.discard((d.member_id, kind))
            if isinstance(d.reply, JoinReply) and d.reply.error == E.NONE:
                self.known[d.member_id] = d.reply.generation

    def _pick(self, data: st.DataObject) -> str | None:
        busy = {m for m, _kind in self.waiting}  # one request at a time per member
        idle = sorted(m for m in self.known if m not in busy)
        return data.draw(st.sampled_from(idle)) if idle else None

    @rule(v4=st.booleans())
    def new_member(self, v4: bool) -> None:
        self._join("", v4, b"s")

    @rule(data=st.data(), subscription=st.sampled_from([b"s", b"t"]))
    def rejoin(self, data: st.DataObject, subscription: bytes) -> None:
        m = self._pick(data)
        if m is not None:
            self._join(m, False, subscription)

    @rule(data=st.data(), stale=st.booleans())
    def sync(self, data: st.DataObject, stale: bool) -> None:
        m = self._pick(data)
        if m is None:
            return
        group = self.groups.groups.get(G)
        given = [(x, b"a-" + x.encode()) for x in group.members] if group else []
        got = self.groups.sync(
            G,
            m,
            self.known[m] - (1 if stale else 0),
            protocol_type=None,
            protocol_name=None,
            assignments=given,
            now_ms=self.now,
        )
        if isinstance(got, Parked):
            self.waiting.add((m, "sync"))
        self._collect()

    @rule(data=st.data(), stale=st.booleans())
    def heartbeat(self, data: st.DataObject, stale: bool) -> None:
        m = self._pick(data)
        if m is not None:
            code = self.groups.heartbeat(G, m, self.known[m] - (1 if stale else 0), self.now)
            assert code != E.NONE or not stale
            self._collect()

    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        m = self._pick(data)
        if m is not None:
            self.groups.leave(G, [m], self.now)
            del self.known[m]
            self._collect()

    @rule(ms=st.integers(1, 2 * REBALANCE_MS))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        self.groups.expire(self.now)
        self._collect()

    @rule()
    def everyone_goes_silent(self) -> None:
        for _ in range(6):
            self.now += 2 * REBALANCE_MS
            self.groups.expire(self.now)
            self._collect()
        assert self.waiting == set()  # every wait ended by a deadline
        assert G not in self.groups.groups and self.groups.bytes_held == 0
        self.known.clear()

    @invariant()
    def state_agrees_with_members(self) -> None:
        held = 0
        for group in self.groups.groups.values():
            assert (group.state == classic.EMPTY) == (not group.members)
            assert len(group.members) + len(group.pending) <= self.groups.limits.members_max
            if group.state in (classic.COMPLETING, classic.STABLE):
                assert group.leader in group.members
                assert not any(m.joining for m in group.members.values())
            if group.state != classic.COMPLETING:
                assert not any(m.syncing for m in group.members.values())
            if group.state in (classic.PREPARING, classic.COMPLETING):
                assert group.phase_deadline_ms is not None
            held += sum(m.held_bytes for m in group.members.values())
        assert held == self.groups.bytes_held


TestClassicMembership = ClassicMembership.TestCase
