"""Kafka's incremental fetch sessions (KIP-227, Fetch v7+): the node's bounded cache of
sessions, and how a Fetch request of a session becomes a full one and its response an
incremental one. Pure (a clock is passed in); the listener calls `open` before the
request is authorized and answered (so the ACLs and the handler see every partition of
the session, each time) and `answered` on its response.

    session_id  epoch   meaning
    0           -1      sessionless full fetch (no session; what librdkafka 2.x sends)
    0 or id      0      full fetch: close `id` (if any), open a new session; the response
                        names its id (0 when the cache has no room: sessionless)
    id          -1      close `id`; a sessionless full fetch
    id          n > 0   incremental: the request lists the partitions that changed (added
                        or a new fetch offset / max bytes), `forgotten_topics_data` those
                        to drop; the response lists only the partitions with records, an
                        error, or a high watermark / log start offset that changed since
                        the session last answered them

Errors, as Kafka answers them (top-level `error_code`, no partitions, session id 0): an
id the cache does not hold (never opened, evicted, or opened by another principal) is
FETCH_SESSION_ID_NOT_FOUND; an epoch other than the one the session expects next is
INVALID_FETCH_SESSION_EPOCH. The client then opens a new session with a full fetch.

Bounds: at most `sessions_max` sessions (Kafka's max.incremental.fetch.session.cache.slots)
and `partitions_max` partitions cached across them. A new session takes the least recently
used one's slot when that one has been idle `evict_idle_s` (Kafka's
min.incremental.fetch.session.eviction.ms) and no slot is free; otherwise it is not opened
(the full fetch is answered sessionless). A session that would grow past `partitions_max`
is closed and answered FETCH_SESSION_ID_NOT_FOUND.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from replog.kafka.errors import ErrorCode

Body = dict[str, Any]
Key = tuple[str, int]  # topic, partition
SESSION_VERSION_MIN: Final = 7  # Fetch v7 brought session ids and epochs
FINAL_EPOCH: Final = -1
INITIAL_EPOCH: Final = 0
NO_SESSION: Final = 0
SESSIONS_MAX: Final = 1000
PARTITIONS_MAX: Final = 100_000
EVICT_IDLE_S: Final = 120.0
INT32_MAX: Final = 2**31 - 1
UNANSWERED: Final = -2  # no answer carries it: the next one counts as a change


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch` (Kafka's: past INT32_MAX it goes back to 1, never 0)."""
    return 1 if epoch >= INT32_MAX else epoch + 1


@dataclass(slots=True)
class Cached:
    """A partition of a session: what the client last asked (its request's fields) and
    what the session last answered for it (UNANSWERED: nothing yet, or an error)."""

    request: Body
    high_watermark: int = UNANSWERED
    log_start_offset: int = UNANSWERED


@dataclass(slots=True)
class Session:
    session_id: int
    principal: str
    epoch: int  # the epoch the next incremental request must carry
    partitions: OrderedDict[Key, Cached] = field(default_factory=OrderedDict)
    used_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Opened:
    """A Fetch request made whole: `body` for the ACLs and the handler (every partition of
    the session), `session` (None: sessionless), `incremental`, and `refused`: the answer
    when the session is unknown or out of step (the body then names no partition)."""

    body: Body
    session: Session | None = None
    incremental: bool = False
    refused: Body | None = None


def _refused(body: Body, code: ErrorCode) -> Opened:
    """The request with no partition (nothing is read), answered `code` alone."""
    answer = {"throttle_time_ms": 0, "error_code": code, "session_id": NO_SESSION}
    return Opened(body | {"topics": []}, refused=answer | {"responses": []})


def _partitions(body: Body) -> list[tuple[Key, Body]]:
    return [((t["topic"], p["partition"]), p) for t in body["topics"] for p in t["partitions"]]


def _as_topics(items: list[tuple[Key, Body]]) -> list[Body]:
    topics: list[Body] = []
    for (topic, _), p in items:
        if not topics or topics[-1]["topic"] != topic:
            topics.append({"topic": topic, "partitions": []})
        topics[-1]["partitions"].append(p)
    return topics


class FetchSessions:
    def __init__(
        self,
        clock: Callable[[], float],
        *,
        sessions_max: int = SESSIONS_MAX,
        partitions_max: int = PARTITIONS_MAX,
        evict_idle_s: float = EVICT_IDLE_S,
        rng: random.Random | None = None,
    ) -> None:
        assert sessions_max >= 0 and partitions_max >= 0 and evict_idle_s >= 0
        self.clock = clock
        self.sessions_max = sessions_max
        self.partitions_max = partitions_max
        self.evict_idle_s = evict_idle_s
        self.rng = rng or random.Random()
        self.sessions: OrderedDict[int, Session] = OrderedDict()  # least recently used first
        self.partitions = 0  # cached across the sessions
        self.evictions = 0

    def open(self, principal: str, version: int, body: Body) -> Opened:
        """The request of `principal` made whole (see the module docstring)."""
        if version < SESSION_VERSION_MIN:
            return Opened(body)
        session_id, epoch = body["session_id"], body["session_epoch"]
        if epoch in (FINAL_EPOCH, INITIAL_EPOCH):
            if session_id != NO_SESSION:
                self._close(session_id, principal)
            if epoch == FINAL_EPOCH:
                return Opened(body)
            return Opened(body, self._new(principal, _partitions(body)))
        session = self.sessions.get(session_id)
        if session is None or session.principal != principal:
            return _refused(body, ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if epoch != session.epoch:
            return _refused(body, ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        for t in body.get("forgotten_topics_data") or []:
            for index in t["partitions"]:
                if session.partitions.pop((t["topic"], index), None) is not None:
                    self.partitions -= 1
        for key, p in _partitions(body):
            cached = session.partitions.get(key)
            if cached is None:
                session.partitions[key] = Cached(p)
                self.partitions += 1
            else:
                cached.request = p
        if self.partitions > self.partitions_max:
            self._drop(session)
            return _refused(body, ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        session.epoch = next_epoch(epoch)
        self._touch(session)
        whole = [(key, c.request) for key, c in session.partitions.items()]
        return Opened(body | {"topics": _as_topics(whole)}, session, incremental=True)

    def answered(self, opened: Opened, response: Body) -> Body:
        """The response to send: the refusal; or with the session's id, and (incremental)
        only the partitions that changed; the session remembers what it answered."""
        if opened.refused is not None:
            return opened.refused
        session = opened.session
        if session is None:
            return response | {"session_id": NO_SESSION}
        kept: list[Body] = []
        for t in response["responses"]:
            changed = []
            for p in t["partitions"]:
                cached = session.partitions.get((t["topic"], p["partition_index"]))
                if cached is None:
                    changed.append(p)  # answered, but not (any longer) in the session
                    continue
                moved = (cached.high_watermark, cached.log_start_offset) != (
                    p["high_watermark"],
                    p["log_start_offset"],
                )
                cached.high_watermark = p["high_watermark"]
                cached.log_start_offset = p["log_start_offset"]
                if p["error_code"]:  # answered again once the error is gone
                    cached.high_watermark = cached.log_start_offset = UNANSWERED
                if not opened.incremental or moved or p["records"] or p["error_code"]:
                    changed.append(p)
            if changed:
                kept.append(t | {"partitions": changed})
        open_id = session.session_id if self.sessions.get(session.session_id) is session else 0
        return response | {"session_id": open_id, "responses": kept}

    # -- the cache --------------------------------------------------------------------------

    def _new(self, principal: str, items: list[tuple[Key, Body]]) -> Session | None:
        """A new session of `items` (None: no room; the fetch is answered sessionless)."""
        unique = OrderedDict((key, Cached(p)) for key, p in items)
        if self.partitions + len(unique) > self.partitions_max:
            return None
        if len(self.sessions) >= self.sessions_max and not self._evict_one():
            return None
        session_id = NO_SESSION
        while session_id == NO_SESSION or session_id in self.sessions:
            session_id = self.rng.randint(1, INT32_MAX)
        session = Session(session_id, principal, next_epoch(INITIAL_EPOCH), unique)
        self.sessions[session_id] = session
        self.partitions += len(unique)
        self._touch(session)
        return session

    def _evict_one(self) -> bool:
        if not self.sessions:
            return False
        oldest = next(iter(self.sessions.values()))
        if self.clock() - oldest.used_s < self.evict_idle_s:
            return False
        self._drop(oldest)
        self.evictions += 1
        return True

    def _close(self, session_id: int, principal: str) -> None:
        session = self.sessions.get(session_id)
        if session is not None and session.principal == principal:
            self._drop(session)

    def _drop(self, session: Session) -> None:
        if self.sessions.pop(session.session_id, None) is session:
            self.partitions -= len(session.partitions)
        assert self.partitions >= 0, "cached partitions counted below zero"

    def _touch(self, session: Session) -> None:
        session.used_s = self.clock()
        self.sessions.move_to_end(session.session_id)
