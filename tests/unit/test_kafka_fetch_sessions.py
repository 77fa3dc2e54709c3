"""Incremental fetch sessions (KIP-227, kafka_edge/fetch_sessions.py): a full fetch opens a
session, an incremental one is made whole for the ACLs and the handler and its response
cut to what changed; unknown ids and out-of-step epochs are answered as Kafka answers
them; the cache is bounded (sessions, partitions) and evicts only idle sessions."""

from __future__ import annotations

from typing import Any

from replog.kafka.errors import ErrorCode
from replog.server.kafka_edge import fetch_sessions as fs

Body = dict[str, Any]
ALICE, BOB = "User:alice", "User:bob"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def part(p: int, offset: int = 0) -> Body:
    return {"partition": p, "fetch_offset": offset, "log_start_offset": -1}


def request(session_id: int, epoch: int, parts: dict[str, list[Body]], **kw: Any) -> Body:
    topics = [{"topic": t, "partitions": ps} for t, ps in parts.items()]
    body = {"session_id": session_id, "session_epoch": epoch, "topics": topics}
    return body | {"forgotten_topics_data": []} | kw


def answer(opened: fs.Opened, changes: dict[tuple[str, int], Body] | None = None) -> Body:
    """What the handler answers for the whole request: hw 10 everywhere, unless `changes`."""
    responses = []
    for t in opened.body["topics"]:
        parts = []
        for p in t["partitions"]:
            out = {"partition_index": p["partition"], "error_code": 0, "high_watermark": 10}
            out |= {"log_start_offset": 0, "records": b""}
            parts.append(out | (changes or {}).get((t["topic"], p["partition"]), {}))
        responses.append({"topic": t["topic"], "partitions": parts})
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}


def answered_keys(body: Body) -> list[tuple[str, int]]:
    return [(t["topic"], p["partition_index"]) for t in body["responses"] for p in t["partitions"]]


def test_a_full_fetch_opens_a_session_whose_incremental_fetches_answer_only_changes() -> None:
    sessions = fs.FetchSessions(Clock())
    full = sessions.open(ALICE, 12, request(0, 0, {"a": [part(0), part(1)], "b": [part(0)]}))
    first = sessions.answered(full, answer(full))
    sid = first["session_id"]
    assert sid != 0 and answered_keys(first) == [("a", 0), ("a", 1), ("b", 0)]

    # nothing changed: the request names no partition, the handler sees all, none answered
    quiet = sessions.open(ALICE, 12, request(sid, 1, {}))
    assert quiet.refused is None and quiet.incremental
    assert [(t["topic"], len(t["partitions"])) for t in quiet.body["topics"]] == [
        ("a", 2),
        ("b", 1),
    ]
    assert answered_keys(sessions.answered(quiet, answer(quiet))) == []

    # a new HW, records, an error: answered; a new fetch offset is remembered
    moved = sessions.open(ALICE, 12, request(sid, 2, {"a": [part(1, 5)]}))
    offsets = {p["partition"]: p["fetch_offset"] for p in moved.body["topics"][0]["partitions"]}
    assert offsets == {0: 0, 1: 5}
    changes = {("a", 0): {"high_watermark": 11}, ("a", 1): {"records": b"batch"}}
    changes[("b", 0)] = {"error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER}
    got = sessions.answered(moved, answer(moved, changes))
    assert got["session_id"] == sid and answered_keys(got) == [("a", 0), ("a", 1), ("b", 0)]

    # forgotten partitions leave the session; added ones join it
    forget = [{"topic": "a", "partitions": [0, 1]}]
    fewer = sessions.open(
        ALICE, 12, request(sid, 3, {"c": [part(7)]}, forgotten_topics_data=forget)
    )
    assert [t["topic"] for t in fewer.body["topics"]] == ["b", "c"]
    assert answered_keys(sessions.answered(fewer, answer(fewer))) == [("b", 0), ("c", 7)]
    assert sessions.partitions == 2


def test_unknown_sessions_and_epochs_out_of_step_are_refused_as_kafka_refuses_them() -> None:
    sessions = fs.FetchSessions(Clock())
    full = sessions.open(ALICE, 12, request(0, 0, {"a": [part(0)]}))
    sid = sessions.answered(full, answer(full))["session_id"]

    def code(principal: str, session_id: int, epoch: int) -> int:
        opened = sessions.open(principal, 12, request(session_id, epoch, {"a": [part(0)]}))
        if opened.refused is None:
            return 0
        assert opened.body["topics"] == [], "a refused request reads nothing"
        refused = sessions.answered(opened, answer(opened))
        assert refused["session_id"] == 0 and refused["responses"] == []
        return int(refused["error_code"])

    assert code(ALICE, sid + 1, 1) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert code(BOB, sid, 1) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND  # not bob's session
    assert code(ALICE, sid, 2) == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert code(ALICE, sid, 1) == 0
    assert code(ALICE, sid, 1) == ErrorCode.INVALID_FETCH_SESSION_EPOCH  # a replay
    # epoch -1 closes it; the request itself is a sessionless full fetch
    closing = sessions.open(ALICE, 12, request(sid, -1, {"a": [part(0)]}))
    assert closing.session is None and closing.refused is None
    assert sessions.answered(closing, answer(closing))["session_id"] == 0
    assert code(ALICE, sid, 2) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert sessions.partitions == 0 and not sessions.sessions
    # before v7 there are no sessions: the request passes as it is
    old = request(0, 0, {"a": [part(0)]})
    assert sessions.open(ALICE, 6, old) == fs.Opened(old)


def test_the_cache_is_bounded_and_evicts_only_sessions_idle_long_enough() -> None:
    clock = Clock()
    sessions = fs.FetchSessions(clock, sessions_max=2, partitions_max=5, evict_idle_s=60)

    def open_full(parts: int) -> int:
        opened = sessions.open(ALICE, 12, request(0, 0, {"t": [part(p) for p in range(parts)]}))
        return int(sessions.answered(opened, answer(opened))["session_id"])

    first, second = open_full(1), open_full(1)
    assert first and second and first != second
    clock.now += 30
    assert open_full(1) == 0, "no slot: answered sessionless, nobody evicted"
    clock.now += 31  # the first (least recently used) has been idle 61 s
    third = open_full(1)
    assert third and sessions.evictions == 1 and first not in sessions.sessions
    evicted = sessions.open(ALICE, 12, request(first, 1, {}))
    assert evicted.refused is not None
    assert evicted.refused["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # partitions: a session that would hold more than is left is not opened...
    clock.now += 100
    assert open_full(4) == 0
    # ...and one that grows past the bound is closed
    grown = sessions.open(ALICE, 12, request(second, 1, {"u": [part(p) for p in range(4)]}))
    assert grown.refused is not None and second not in sessions.sessions
    assert sessions.partitions == 1  # the third's


def test_epochs_wrap_to_one_never_zero() -> None:
    assert fs.next_epoch(1) == 2 and fs.next_epoch(fs.INT32_MAX) == 1
