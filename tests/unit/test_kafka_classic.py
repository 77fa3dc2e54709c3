"""The classic consumer-group protocol's rules (replog/server/kafka_edge/classic.py), driven
without sockets or clocks: joins, the leader's sync, leaves, session / rebalance / sync
timeouts from `expire`, stale generations, and the bounds a client cannot push past."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from replog.kafka.errors import ErrorCode as E
from replog.kafka.protocol import ApiKey
from replog.server.kafka_edge import classic
from replog.server.kafka_edge.apis import SUPPORTED
from replog.server.kafka_edge.classic import (
    ClassicGroups,
    ClassicLimits,
    JoinReply,
    Parked,
    SyncReply,
)

G = "orders"
SESSION_MS = 10_000
REBALANCE_MS = 30_000
_ids = itertools.count()


def join(
    groups: ClassicGroups,
    member_id: str = "",
    now_ms: int = 0,
    *,
    protocols: classic.Protocols = (("range", b"sub"),),
    v4: bool = False,
    session_ms: int = SESSION_MS,
    group: str = G,
) -> JoinReply | Parked:
    return groups.join(
        group,
        member_id,
        client_id="c",
        client_host="/127.0.0.1",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=REBALANCE_MS,
        protocol_type="consumer",
        protocols=protocols,
        require_known_member_id=v4,
        fresh_member_id=f"m{next(_ids)}",
        now_ms=now_ms,
    )


def delivered(groups: ClassicGroups) -> dict[str, Any]:
    return {d.member_id: d.reply for d in groups.take_outbox()}


def sync(
    groups: ClassicGroups, member_id: str, generation: int, now_ms: int = 0, **assignments: bytes
) -> SyncReply | Parked:
    return groups.sync(
        G,
        member_id,
        generation,
        protocol_type=None,
        protocol_name=None,
        assignments=assignments.items(),
        now_ms=now_ms,
    )


def stable_pair(groups: ClassicGroups) -> tuple[str, str, int]:
    """A Stable group of two members: (leader, follower, generation)."""
    first = join(groups)
    assert isinstance(first, Parked)
    delivered(groups)
    second = join(groups, now_ms=1)
    assert isinstance(second, Parked)
    assert groups.heartbeat(G, first.member_id, 1, 2) == E.REBALANCE_IN_PROGRESS
    again = join(groups, first.member_id, 3)
    assert isinstance(again, Parked)
    replies = delivered(groups)
    leader, follower = first.member_id, second.member_id
    generation = replies[leader].generation
    assert isinstance(sync(groups, follower, generation, 4), Parked)
    assert isinstance(sync(groups, leader, generation, 4, **{leader: b"A", follower: b"B"}), Parked)
    delivered(groups)
    return leader, follower, generation


def test_a_v4_first_join_gets_its_member_id_then_joins_with_it_as_leader() -> None:
    groups = ClassicGroups(ClassicLimits())
    first = join(groups, v4=True)
    assert isinstance(first, JoinReply) and first.error == E.MEMBER_ID_REQUIRED
    assert first.member_id and groups.groups[G].state == classic.EMPTY
    again = join(groups, first.member_id, 5, v4=True)
    assert again == Parked(first.member_id)
    (reply,) = delivered(groups).values()
    assert reply.error == E.NONE and reply.generation == 1
    assert reply.leader == first.member_id and reply.protocol_name == "range"
    assert reply.members == ((first.member_id, b"sub"),)  # the leader sees every member
    assert groups.groups[G].state == classic.COMPLETING


def test_a_second_member_rebalances_the_group_and_the_leader_assigns_both() -> None:
    groups = ClassicGroups(ClassicLimits())
    first = join(groups)
    assert isinstance(first, Parked)
    delivered(groups)
    second = join(groups, now_ms=1)
    assert isinstance(second, Parked)
    assert delivered(groups) == {}  # waits for the first member to rejoin
    assert groups.groups[G].state == classic.PREPARING
    assert groups.heartbeat(G, first.member_id, 1, 2) == E.REBALANCE_IN_PROGRESS
    join(groups, first.member_id, 3)
    replies = delivered(groups)
    leader, follower = replies[first.member_id], replies[second.member_id]
    assert leader.generation == follower.generation == 2
    assert {m for m, _ in leader.members} == {first.member_id, second.member_id}
    assert follower.members == () and follower.leader == first.member_id
    # The follower's sync waits for the leader's; the leader's hands out both.
    assert isinstance(sync(groups, second.member_id, 2, 4), Parked)
    got = sync(groups, first.member_id, 2, 4, **{first.member_id: b"A", second.member_id: b"B"})
    assert isinstance(got, Parked)
    out = delivered(groups)
    assert out[first.member_id].assignment == b"A" and out[second.member_id].assignment == b"B"
    assert groups.groups[G].state == classic.STABLE
    assert sync(groups, second.member_id, 2, 5) == SyncReply(E.NONE, "consumer", "range", b"B")
    assert groups.heartbeat(G, second.member_id, 2, 6) == E.NONE


def test_stale_generations_and_unknown_members_are_refused() -> None:
    groups = ClassicGroups(ClassicLimits())
    _leader, follower, generation = stable_pair(groups)
    assert groups.heartbeat(G, follower, generation - 1, 10) == E.ILLEGAL_GENERATION
    assert sync(groups, follower, generation - 1, 10) == SyncReply(E.ILLEGAL_GENERATION)
    assert groups.check_commit(G, follower, generation - 1) == E.ILLEGAL_GENERATION
    assert groups.check_commit(G, follower, generation) == E.NONE
    assert groups.check_commit(G, "nobody", generation) == E.UNKNOWN_MEMBER_ID
    assert groups.heartbeat(G, "nobody", generation, 10) == E.UNKNOWN_MEMBER_ID
    assert join(groups, "nobody", 10) == JoinReply(E.UNKNOWN_MEMBER_ID, "nobody")
    assert groups.check_commit("other", "", -1) is None  # not a classic group: replog's rules
    assert groups.check_commit("other", "m", 3) == E.UNKNOWN_MEMBER_ID


def test_a_commit_while_the_assignment_is_being_completed_is_rebalance_in_progress() -> None:
    groups = ClassicGroups(ClassicLimits())
    first = join(groups)
    assert isinstance(first, Parked)
    assert groups.groups[G].state == classic.COMPLETING
    assert groups.check_commit(G, first.member_id, 1) == E.REBALANCE_IN_PROGRESS


def test_a_leaving_member_rebalances_the_rest_and_the_last_one_ends_the_group() -> None:
    groups = ClassicGroups(ClassicLimits())
    leader, follower, generation = stable_pair(groups)
    assert groups.leave(G, [leader, "nobody"], 10) == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert groups.heartbeat(G, follower, generation, 11) == E.REBALANCE_IN_PROGRESS
    assert isinstance(join(groups, follower, 12), Parked)
    (reply,) = delivered(groups).values()
    assert reply.leader == follower and reply.generation == generation + 1
    assert groups.leave(G, [follower], 13) == [E.NONE]
    assert G not in groups.groups and groups.bytes_held == 0


def test_a_silent_member_is_removed_when_its_session_expires() -> None:
    groups = ClassicGroups(ClassicLimits())
    leader, follower, generation = stable_pair(groups)
    assert groups.heartbeat(G, leader, generation, 9_000) == E.NONE
    assert groups.expire(10_003) == []  # the follower's session ends at 4 + 10_000
    assert groups.next_deadline_ms() is not None
    assert groups.expire(10_005) == [(G, follower, "session_timeout")]
    assert groups.heartbeat(G, leader, generation, 10_006) == E.REBALANCE_IN_PROGRESS


def test_a_member_that_does_not_rejoin_in_the_rebalance_timeout_is_dropped() -> None:
    groups = ClassicGroups(ClassicLimits())
    leader, follower, generation = stable_pair(groups)
    # The follower rejoins with a new subscription; the leader never rejoins.
    assert isinstance(join(groups, follower, 100, protocols=(("range", b"new"),)), Parked)
    for t in range(100, 30_100, 3000):  # the waiting follower's session is kept alive
        assert groups.heartbeat(G, leader, generation, t) == E.REBALANCE_IN_PROGRESS
    assert groups.expire(30_099) == []
    assert groups.expire(30_100) == [(G, leader, "rebalance_timeout")]
    (reply,) = delivered(groups).values()
    assert reply.leader == follower and reply.generation == generation + 1


def test_a_leader_that_never_syncs_sends_the_group_back_to_rebalance() -> None:
    groups = ClassicGroups(ClassicLimits())
    first = join(groups)
    assert isinstance(first, Parked)
    delivered(groups)
    second = join(groups, now_ms=1)
    assert isinstance(second, Parked)
    join(groups, first.member_id, 2)
    delivered(groups)
    assert isinstance(sync(groups, second.member_id, 2, 3), Parked)
    for t in range(3, REBALANCE_MS, 3000):  # the leader heartbeats, but never syncs
        assert groups.heartbeat(G, first.member_id, 2, t) == E.NONE
        assert groups.expire(t) == []
    removed = groups.expire(2 + REBALANCE_MS)
    assert removed == [(G, first.member_id, "sync_timeout")]
    assert delivered(groups)[second.member_id] == SyncReply(E.REBALANCE_IN_PROGRESS)


def test_a_pending_member_id_expires_unused() -> None:
    groups = ClassicGroups(ClassicLimits())
    first = join(groups, v4=True)
    assert isinstance(first, JoinReply)
    assert groups.expire(SESSION_MS) == [(G, first.member_id, "pending_timeout")]
    assert G not in groups.groups


def test_a_moved_coordinator_answers_parked_requests_not_coordinator() -> None:
    groups = ClassicGroups(ClassicLimits())
    leader, _follower, _generation = stable_pair(groups)
    assert isinstance(join(groups, leader, 10), Parked)  # a leader's rejoin rebalances
    groups.drop(G)
    assert delivered(groups)[leader] == JoinReply(E.NOT_COORDINATOR, leader)
    assert groups.bytes_held == 0 and groups.next_deadline_ms() is not None
    assert groups.expire(10**9) == []  # its deadlines are stale now


def test_members_protocols_and_session_timeouts_are_checked() -> None:
    groups = ClassicGroups(ClassicLimits())
    assert join(groups, session_ms=10).error == E.INVALID_SESSION_TIMEOUT  # type: ignore[union-attr]
    first = join(groups, protocols=(("range", b""), ("roundrobin", b"")))
    assert isinstance(first, Parked)
    other = join(groups, protocols=(("sticky", b""),))
    assert isinstance(other, JoinReply) and other.error == E.INCONSISTENT_GROUP_PROTOCOL
    # The vote: each member names its first common protocol; the most named wins.
    both = join(groups, protocols=(("roundrobin", b"x"), ("range", b"y")))
    assert isinstance(both, Parked)
    join(groups, first.member_id, 1, protocols=(("roundrobin", b""), ("range", b"")))
    assert {r.protocol_name for r in delivered(groups).values()} == {"roundrobin"}


def test_members_groups_and_bytes_are_bounded() -> None:
    limits = ClassicLimits(groups_max=2, members_max=2, member_bytes_max=100, bytes_max=250)
    groups = ClassicGroups(limits)
    assert isinstance(join(groups), Parked)
    assert isinstance(join(groups, v4=True), JoinReply)  # pending: counts as a member
    full = join(groups)
    assert isinstance(full, JoinReply) and full.error == E.GROUP_MAX_SIZE_REACHED
    big = join(groups, group="big", protocols=(("range", b"x" * 100),))
    assert isinstance(big, JoinReply) and big.error == E.INVALID_REQUEST
    assert "big" not in groups.groups
    assert isinstance(join(groups, group="g2", protocols=(("range", b"x" * 90),)), Parked)
    assert isinstance(join(groups, group="g2", protocols=(("range", b"x" * 90),)), Parked)
    over = join(groups, group="g2b", protocols=(("range", b"x" * 90),))
    assert isinstance(over, JoinReply) and over.error == E.GROUP_MAX_SIZE_REACHED  # groups_max
    assert groups.bytes_held <= limits.bytes_max
    assert set(groups.groups) == {G, "g2"}


def test_the_listener_advertises_the_group_versions_the_clients_send() -> None:
    """What librdkafka 2.16 (JoinGroup v5, SyncGroup v3, Heartbeat v3, LeaveGroup v1),
    kafka-python 3.0.12 (JoinGroup v7) and aiokafka 0.14 (JoinGroup v5, SyncGroup v3,
    LeaveGroup v1) sent, seen in their protocol logs against the listener. (librdkafka's
    admin ListGroups / DescribeGroups run in tests/integration/test_kafka_groups.py.)"""
    sent = {
        ApiKey.JOIN_GROUP: (5, 7),
        ApiKey.SYNC_GROUP: (3, 3),
        ApiKey.HEARTBEAT: (3, 3),
        ApiKey.LEAVE_GROUP: (1, 1),
    }
    for api, (lo, hi) in sent.items():
        served = SUPPORTED[api]
        assert served[0] <= lo and hi <= served[1], api


@pytest.mark.parametrize("version", range(0, 10))
def test_join_answers_encode_at_every_advertised_version(version: int) -> None:
    from replog.kafka import protocol
    from replog.kafka.protocol import RequestHeader
    from replog.server.kafka_edge.classic_groups import join_body

    header = RequestHeader(ApiKey.JOIN_GROUP, version, 1, "c")
    for reply in (
        JoinReply(E.MEMBER_ID_REQUIRED, "m1"),
        JoinReply(E.NONE, "m", 3, "consumer", "range", "m", (("m", b"s"),)),
    ):
        frame = protocol.encode_response(header, join_body(version, reply), any_version=True)
        _, body = protocol.decode_response(ApiKey.JOIN_GROUP, version, frame[4:])
        assert body["member_id"] == reply.member_id and body["error_code"] == reply.error


@pytest.mark.parametrize("version", range(0, 6))
def test_sync_answers_encode_at_every_advertised_version(version: int) -> None:
    from replog.kafka import protocol
    from replog.kafka.protocol import RequestHeader
    from replog.server.kafka_edge.classic_groups import sync_body

    header = RequestHeader(ApiKey.SYNC_GROUP, version, 1, "c")
    for reply in (SyncReply(E.REBALANCE_IN_PROGRESS), SyncReply(E.NONE, "consumer", "range", b"a")):
        frame = protocol.encode_response(header, sync_body(version, reply), any_version=True)
        _, body = protocol.decode_response(ApiKey.SYNC_GROUP, version, frame[4:])
        assert body["assignment"] == reply.assignment and body["error_code"] == reply.error


def test_a_failing_timer_pass_is_fatal_not_silent() -> None:
    """The one timer that expires sessions must not stop quietly: what its pass raises goes
    to the node's supervisor (which stops the process), or is raised without one."""
    import types

    from replog.server.kafka_edge.classic_groups import ClassicCoordinator

    stub: Any = types.SimpleNamespace(now_ms=lambda: 1_000)
    seen: list[BaseException] = []
    coordinator = ClassicCoordinator(stub, ClassicLimits(), seen.append)

    def broken(_now: int) -> list[tuple[str, str, str]]:
        raise RuntimeError("a bug in expire")

    coordinator.state.expire = broken  # type: ignore[method-assign]
    coordinator._tick()
    assert [str(e) for e in seen] == ["a bug in expire"]
    coordinator.on_fatal = None
    with pytest.raises(RuntimeError):
        coordinator._tick()
