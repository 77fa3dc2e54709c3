"""The Groups calls are built once, as data, for both twins (`group_rpcs`)."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from replog.client import group_rpcs as rpcs
from replog.client.aio_groups import AsyncGroupCalls
from replog.client.group_rpcs import GroupRpc
from replog.client.groups import GroupCalls
from replog.client.retry import RetryPolicy
from replog.errors import DeadlineExceededError, NotCoordinatorError, UnavailableError
from replog.v1 import groups_pb2


class Settings:
    timeout_s = 30.0
    attempt_timeout_s = 2.0
    retry = RetryPolicy()


class Recording(GroupCalls):
    def run(self, rpc: GroupRpc[Any]) -> Any:
        self.sent = rpc
        return "sent"


class AsyncRecording(AsyncGroupCalls):
    async def run(self, rpc: GroupRpc[Any]) -> Any:
        self.sent = rpc
        return "sent"


def test_both_twins_offer_every_call_with_the_builders_signature() -> None:
    calls, acalls = GroupCalls(Settings()), AsyncGroupCalls(Settings())
    for name in ("find_coordinator", "join", "heartbeat", "leave", "commit", "committed"):
        sync, aio = getattr(calls, name), getattr(acalls, name)
        assert inspect.signature(sync) == inspect.signature(aio)
        assert sync.__doc__ == aio.__doc__ == getattr(rpcs, name).__doc__


def test_a_twin_runs_what_the_builder_made_blocking_or_awaited() -> None:
    calls, acalls = Recording(Settings()), AsyncRecording(Settings())
    assert calls.commit("g", {("t", 0): 5}, "m", 3) == "sent"
    assert asyncio.run(acalls.commit("g", {("t", 0): 5}, "m", 3)) == "sent"
    assert calls.sent.method == acalls.sent.method == "CommitOffsets"
    assert calls.sent.request == acalls.sent.request
    assert list(calls.sent.request.offsets) == [
        groups_pb2.OffsetCommit(topic="t", partition=0, offset=5, metadata="")
    ]


def test_join_waits_the_whole_timeout_and_is_never_sent_twice() -> None:
    calls = GroupCalls(Settings())
    join = rpcs.join(calls, "g", ["a", "b"], session_timeout_ms=9000, client_id="c")
    assert (join.group, join.method, calls.timeout_of(join)) == ("g", "JoinGroup", 30.0)
    assert not join.retry_dead
    late = DeadlineExceededError("late")
    assert calls.failed(join, late, "n1:1") is late  # outcome unknown: raised as it is
    reply = groups_pb2.JoinGroupResponse(member_id="m1", generation=4, session_timeout_ms=9000)
    answer, session_ms = join.read(reply)
    assert (answer.member_id, answer.generation, session_ms) == ("m1", 4, 9000)


def test_a_heartbeat_without_answer_is_retried_and_follows_the_coordinator() -> None:
    calls = GroupCalls(Settings())
    beat = rpcs.heartbeat(calls, "g", "m1", 4, [("t", 1)], RetryPolicy(attempts_max=2), 0.5)
    assert calls.timeout_of(beat) == 0.5 and calls.policy_of(beat).attempts_max == 2
    assert isinstance(calls.failed(beat, DeadlineExceededError("late"), "n1:1"), UnavailableError)
    follow = calls.follow(beat)
    assert follow(NotCoordinatorError("moved", leader_address="n2:1"))
    assert calls.coordinators == {"g": "n2:1"}
    assert not follow(NotCoordinatorError("moved", leader_address="n2:1"))  # no news
    follow(UnavailableError("gone"))
    assert calls.coordinators == {}  # asks FindCoordinator again


def test_find_coordinator_goes_to_any_node_and_remembers_the_answer() -> None:
    calls = GroupCalls(Settings())
    find = rpcs.find_coordinator(calls, "g")
    assert find.group is None
    assert find.read(groups_pb2.FindCoordinatorResponse(address="n3:1")) == "n3:1"
    assert calls.coordinators == {"g": "n3:1"}


def test_the_producers_share_their_defaults() -> None:
    from replog.client.aio_producer import AsyncProducer
    from replog.client.produce_rules import ASYNC_PRODUCER_DEFAULTS, AsyncProducerOptions
    from replog.client.producer import Producer

    params = inspect.signature(Producer).parameters
    assert {k: params[k].default for k in ASYNC_PRODUCER_DEFAULTS} == ASYNC_PRODUCER_DEFAULTS
    assert set(AsyncProducerOptions.__annotations__) <= set(params)
    assert AsyncProducer.send_and_wait.__annotations__["options"] == "Unpack[rules.SendOptions]"


def test_a_misspelt_send_option_is_a_type_error_in_asyncio() -> None:
    from replog.client.produce_rules import SEND_OPTIONS, check_keywords

    check_keywords({"key": b"k", "on_delivery": None}, SEND_OPTIONS, "send")
    try:
        check_keywords({"keys": b"k"}, SEND_OPTIONS, "send")
    except TypeError as err:
        assert "'keys'" in str(err)
    else:
        raise AssertionError("a misspelt option passed")


def test_a_shared_call_shows_its_own_signature_without_the_twin() -> None:
    from replog.client import Client
    from replog.client.aio import AsyncClient

    async def aio_signature() -> str:
        async with AsyncClient("127.0.0.1:1") as aio:
            return str(inspect.signature(aio.list_offsets))

    sync = Client("127.0.0.1:1")
    assert str(inspect.signature(sync.list_offsets)) == asyncio.run(aio_signature())
    assert list(inspect.signature(sync.fetch).parameters) == [
        "topic",
        "partition",
        "offset",
        "max_bytes",
        "max_wait_ms",
    ]
    sync.close()
