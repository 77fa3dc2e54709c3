"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups, DescribeGroups on the wire, and
the fence OffsetCommit asks of a classic group: the I/O around `classic.ClassicGroups`.

Where: a group's membership lives on the node that coordinates it, the leader of its
`__consumer_offsets` partition (`Coordinator.shard_for`, as FindCoordinator and
OffsetCommit pick it). Every request first asks `shard_for`: elsewhere it is answered
NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while loading, COORDINATOR_NOT_AVAILABLE
with no leader) and the client looks the coordinator up again. Each group remembers the
shard it was built under; a request that finds another shard (the coordinator moved and
came back) starts the group afresh, as Kafka's members rejoin a new coordinator; the
timer's sweep forgets groups whose shard ended.

A JoinGroup or SyncGroup that waits (`classic.Parked`) awaits a future that the deliveries
of the state machine complete; the state machine's deadlines bound every wait. One loop
timer (`call_later`, moved to the earliest deadline after each call) runs `expire`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Final

from replog.errors import ReplogError
from replog.kafka.errors import ErrorCode
from replog.server.groups import wire
from replog.server.groups.coordinator import Coordinator
from replog.server.groups.service import new_member_id
from replog.server.groups.shard import Shard
from replog.server.kafka_edge import classic
from replog.server.kafka_edge.classic import ClassicGroups, ClassicLimits, JoinReply, SyncReply
from replog.server.kafka_edge.errors import code_of
from replog.server.logs import log

_log = logging.getLogger("replog.server.kafka")

Body = dict[str, Any]
E = ErrorCode
CLIENT_HOST: ContextVar[str] = ContextVar("kafka_client_host", default="")
CLIENT_ID_CHARS_MAX: Final = 255
SWEEP_INTERVAL_MS: Final = 1000
CONSUMER: Final = "consumer"


class ClassicCoordinator:
    def __init__(
        self,
        coordinator: Coordinator,
        limits: ClassicLimits,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        """`on_fatal`: called with what the timer's pass raised (a bug: the node's
        supervisor stops the process; None: re-raised, for tests)."""
        self.on_fatal = on_fatal
        self.coordinator = coordinator
        self.now_ms = coordinator.now_ms
        self.state = ClassicGroups(limits)
        self.shards: dict[str, Shard] = {}  # the shard each group of `state` was built under
        self._waiters: dict[tuple[str, str, str], list[asyncio.Future[Any]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._swept_ms = 0

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- ownership, waiting, the timer -------------------------------------------------------

    async def _own(self, name: str) -> ErrorCode | None:
        """None when this node coordinates `name` (its group checked against the shard),
        else the code the client gets."""
        got = await self._shard(name)
        return got if isinstance(got, ErrorCode) else None

    async def _shard(self, name: str) -> Shard | ErrorCode:
        try:
            wire.group_name(name)
            shard = await self.coordinator.shard_for(name)
        except ReplogError as exc:
            return code_of(exc, coordinator=True)
        if self.shards.get(name) is not shard:
            self.state.drop(name)
            self._after()
            self.shards[name] = shard
        return shard

    def _after(self) -> None:
        """Hand out what the state machine delivered; forget dropped groups; move the timer."""
        for d in self.state.take_outbox():
            kind = "join" if isinstance(d.reply, JoinReply) else "sync"
            for fut in self._waiters.pop((d.group, d.member_id, kind), ()):
                if not fut.done():
                    fut.set_result(d.reply)
        for name in [n for n in self.shards if n not in self.state.groups]:
            del self.shards[name]
        self._reschedule()

    async def _wait(self, name: str, member_id: str, kind: str) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault((name, member_id, kind), []).append(fut)
        self._after()  # its answer may be among the deliveries of the call that parked it
        return await fut

    def _reschedule(self) -> None:
        at = self.state.next_deadline_ms()
        if at is not None and self.state.groups:
            at = min(at, self._swept_ms + SWEEP_INTERVAL_MS)
        if at == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = at
        if at is not None:
            delay_s = max(0, at - self.now_ms()) / 1000
            self._timer = asyncio.get_running_loop().call_later(delay_s, self._tick)

    def _tick(self) -> None:
        try:
            self._pass()
        except Exception as exc:  # crash loudly: a timer that stops would expire nobody
            if self.on_fatal is None:
                raise
            self.on_fatal(exc)

    def _pass(self) -> None:
        self._timer = self._timer_at = None
        now = self.now_ms()
        for group, member_id, why in self.state.expire(now):
            log(_log, "kafka.member_removed", group=group, member_id=member_id, why=why)
        if now - self._swept_ms >= SWEEP_INTERVAL_MS:
            self._swept_ms = now
            for name, shard in list(self.shards.items()):
                if not shard.current() or self.coordinator.shards.get(shard.partition) is not shard:
                    self.state.drop(name)
        self._after()

    # -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -----------------------------------------

    async def join_group(self, version: int, client_id: str | None, body: Body) -> Body:
        name, member_id = body["group_id"], body["member_id"]
        shard = await self._shard(name)
        if isinstance(shard, ErrorCode):
            return join_body(version, JoinReply(shard, member_id))
        replog_group = shard.groups.groups.get(name)
        if replog_group is not None and replog_group.members:  # replog's own consumers
            return join_body(version, JoinReply(E.INCONSISTENT_GROUP_PROTOCOL, member_id))
        session_ms = body["session_timeout_ms"]
        client = (client_id or "")[:CLIENT_ID_CHARS_MAX]
        got = self.state.join(
            name,
            member_id,
            client_id=client,
            client_host=CLIENT_HOST.get(),
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=body["rebalance_timeout_ms"] if version >= 1 else session_ms,
            protocol_type=body["protocol_type"],
            protocols=tuple((p["name"], p["metadata"]) for p in body["protocols"]),
            require_known_member_id=version >= 4,
            fresh_member_id=new_member_id(client),
            now_ms=self.now_ms(),
        )
        if isinstance(got, classic.Parked):
            got = await self._wait(name, got.member_id, "join")
        else:
            self._after()
        assert isinstance(got, JoinReply)
        return join_body(version, got)

    async def sync_group(self, version: int, body: Body) -> Body:
        name, member_id = body["group_id"], body["member_id"]
        code = await self._own(name)
        if code is not None:
            return sync_body(version, SyncReply(code))
        got = self.state.sync(
            name,
            member_id,
            body["generation_id"],
            protocol_type=body["protocol_type"] if version >= 5 else None,
            protocol_name=body["protocol_name"] if version >= 5 else None,
            assignments=((a["member_id"], a["assignment"]) for a in body["assignments"]),
            now_ms=self.now_ms(),
        )
        if isinstance(got, classic.Parked):
            got = await self._wait(name, member_id, "sync")
        else:
            self._after()
        assert isinstance(got, SyncReply)
        return sync_body(version, got)

    async def heartbeat(self, body: Body) -> Body:
        name = body["group_id"]
        code = await self._own(name)
        if code is None:
            code = self.state.heartbeat(
                name, body["member_id"], body["generation_id"], self.now_ms()
            )
            self._after()
        return {"error_code": code}

    async def leave_group(self, version: int, body: Body) -> Body:
        name = body["group_id"]
        ids = [body["member_id"]] if version <= 2 else [m["member_id"] for m in body["members"]]
        code = await self._own(name)
        codes = (
            [code] * len(ids) if code is not None else self.state.leave(name, ids, self.now_ms())
        )
        self._after()
        if version <= 2:
            return {"error_code": codes[0] if codes else E.NONE}
        if code is not None:
            return {"error_code": code, "members": []}
        members = [
            {"member_id": m["member_id"], "group_instance_id": m["group_instance_id"]}
            | {"error_code": c}
            for m, c in zip(body["members"], codes, strict=True)
        ]
        return {"error_code": E.NONE, "members": members}

    # -- OffsetCommit's fence ----------------------------------------------------------------

    async def check_commit(self, name: str, member_id: str, generation: int) -> ErrorCode | None:
        """Kafka's generation fence for a commit (`ClassicGroups.check_commit`), on the
        group's coordinator; None: not a classic member's commit (replog's rules apply)."""
        if not member_id and generation < 0 and name not in self.state.groups:
            return None
        code = await self._own(name)
        if code is not None:
            return code
        return self.state.check_commit(name, member_id, generation)

    # -- DeleteGroups ------------------------------------------------------------------------

    async def check_delete(self, name: str) -> ErrorCode | None:
        """None when group `name` may be deleted here as far as the classic protocol goes
        (coordinated here, no classic members), else the code the client gets."""
        code = await self._own(name)
        if code is not None:
            return code
        g = self.state.groups.get(name)
        return E.NON_EMPTY_GROUP if g is not None and g.members else None

    def forget(self, name: str) -> bool:
        """Drop the (empty) classic group `name`; whether there was one."""
        if name not in self.state.groups:
            return False
        self.state.drop(name)
        self._after()
        return True

    # -- ListGroups, DescribeGroups ----------------------------------------------------------

    def list_groups(self, version: int, body: Body) -> Body:
        """This node's groups (Kafka's admin clients ask every broker and merge): classic
        groups, and replog's groups coordinated here (protocol type "")."""
        states = {s.lower() for s in body["states_filter"]} if version >= 4 else set()
        types = {t.lower() for t in body["types_filter"]} if version >= 5 else set()
        listed: dict[str, Body] = {}
        for shard in self.coordinator.loaded_shards():
            for rg in shard.groups.groups.values():
                state = classic.EMPTY if not rg.members else classic.STABLE
                listed[rg.name] = {"group_id": rg.name, "protocol_type": "", "group_state": state}
        for name, g in self.state.groups.items():
            if name in self.shards and self.shards[name].current():
                listed[name] = {
                    "group_id": name,
                    "protocol_type": g.protocol_type or "",
                    "group_state": g.state,
                }
        groups = [
            entry | {"group_type": "classic"}
            for _, entry in sorted(listed.items())
            if (not states or entry["group_state"].lower() in states)
            and (not types or "classic" in types)
        ]
        return {"error_code": E.NONE, "groups": groups}

    async def describe_groups(self, version: int, body: Body) -> Body:
        return {"groups": [await self._describe(name) for name in body["groups"]]}

    async def _describe(self, name: str) -> Body:
        out: Body = {"group_id": name, "group_state": classic.DEAD, "protocol_type": ""}
        out |= {"protocol_data": "", "members": [], "authorized_operations": -2147483648}
        shard = await self._shard(name)
        if isinstance(shard, ErrorCode):
            return out | {"error_code": shard}
        g = self.state.groups.get(name)
        if g is None:
            replog_group = shard.groups.groups.get(name)
            if replog_group is not None:
                out["group_state"] = classic.STABLE if replog_group.members else classic.EMPTY
            self._after()
            return out | {"error_code": E.NONE}
        members = [
            {
                "member_id": m.member_id,
                "group_instance_id": None,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata(g.protocol_name),
                "member_assignment": m.assignment,
            }
            for m in g.members.values()
        ]
        return out | {
            "error_code": E.NONE,
            "group_state": g.state,
            "protocol_type": g.protocol_type or "",
            "protocol_data": g.protocol_name or "",
            "members": members,
        }


def join_body(version: int, r: JoinReply) -> Body:
    none_name = None if version >= 7 else ""
    return {
        "error_code": r.error,
        "generation_id": r.generation,
        "protocol_type": r.protocol_type,
        "protocol_name": r.protocol_name if r.protocol_name is not None else none_name,
        "leader": r.leader,
        "skip_assignment": False,
        "member_id": r.member_id,
        "members": [
            {"member_id": m, "group_instance_id": None, "metadata": meta} for m, meta in r.members
        ],
    }


def sync_body(version: int, r: SyncReply) -> Body:
    return {
        "error_code": r.error,
        "protocol_type": r.protocol_type,
        "protocol_name": r.protocol_name,
        "assignment": r.assignment,
    }


def peer_host(peername: object) -> str:
    """The client's host as DescribeGroups shows it (Kafka: "/127.0.0.1")."""
    with contextlib.suppress(TypeError, IndexError):
        return "/" + str(peername[0])  # type: ignore[index]
    return ""
