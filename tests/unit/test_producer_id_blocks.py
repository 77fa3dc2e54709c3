"""Blocks of anonymous producer ids (`control/producer_ids.py`): the block math, the checks
of a leader's answer, and the node's keeper with fake metadata and peers (no leader, a
leader elsewhere, a leader of an earlier release, a leader whose address is not known yet)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from replog.errors import InternalError, LeaderUnknownError
from replog.server.control.producer_ids import (
    BLOCK_BASE,
    BLOCK_IDS,
    ProducerIds,
    block_of,
    checked_block,
    refuse_reservation,
)
from replog.server.peering.peers import Peers
from replog.v1 import log_pb2

DEADLINE_S = 30.0


def run(fn: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    def test() -> None:
        asyncio.run(asyncio.wait_for(fn(), DEADLINE_S))

    test.__name__ = fn.__name__
    return test


def test_blocks_are_disjoint_from_offset_ids_and_from_each_other() -> None:
    assert block_of(0) == range(BLOCK_BASE, BLOCK_BASE + BLOCK_IDS)
    assert block_of(7).start == block_of(6).stop
    assert block_of(10**12).stop - 1 < 2**63 - 1  # offsets for ever fit
    assert BLOCK_BASE > 10**12 + 1  # an offset's own id (offset + 1) is below every block


def test_a_leaders_answer_is_checked() -> None:
    assert checked_block(block_of(3).start, BLOCK_IDS) == block_of(3)
    assert checked_block(42, 0) == range(42, 43)  # an earlier release: one id
    for first, count in [
        (block_of(3).start + 1, BLOCK_IDS),  # not a block's start
        (block_of(3).start, BLOCK_IDS - 1),  # not a block's size
        (5, BLOCK_IDS),  # below the blocks
        (0, 0),  # id 0 is no producer
        (2**63 - 1, 0),  # past the largest id
    ]:
        with pytest.raises(InternalError):
            checked_block(first, count)


def test_a_client_may_not_reserve() -> None:
    refuse_reservation(log_pb2.InitProducerRequest())
    with pytest.raises(Exception, match="reserve_block"):
        refuse_reservation(log_pb2.InitProducerRequest(reserve_block=True))


class _Image:
    def init_producer(self, name: str) -> None:
        pass


class _Metadata:
    def __init__(self) -> None:
        self.image = _Image()
        self.offset = 100
        self.proposals = 0

    async def propose(self, make: Callable[[Any], Any], timeout_s: float) -> tuple[Any, int]:
        make(self.image)
        self.proposals += 1
        self.offset += 1
        return None, self.offset


class _Router:
    def __init__(self) -> None:
        self.leader: int | None = None

    def metadata_leader(self) -> int:
        if self.leader is None:
            raise LeaderUnknownError("no metadata leader")
        return self.leader


class _Stub:
    def __init__(self, answer: Callable[[log_pb2.InitProducerRequest], Any]) -> None:
        self.answer = answer
        self.requests: list[log_pb2.InitProducerRequest] = []

    def InitProducer(self, request: log_pb2.InitProducerRequest, **_: Any) -> Awaitable[Any]:
        self.requests.append(request)

        async def reply() -> Any:
            return self.answer(request)

        return reply()


class _Peers:
    node_id = 1

    def __init__(self, stub: _Stub) -> None:
        self.stub = stub

    def log(self, node_id: int) -> _Stub:
        return self.stub


def _ids(
    answer: Callable[[log_pb2.InitProducerRequest], Any] = lambda r: None,
    timeout_s: float = 5.0,
) -> tuple[ProducerIds, _Router, _Metadata, _Stub]:
    router, metadata, stub = _Router(), _Metadata(), _Stub(answer)
    ids = ProducerIds(router, metadata, _Peers(stub), timeout_s=timeout_s)  # type: ignore[arg-type]
    return ids, router, metadata, stub


@run
async def test_the_leader_hands_out_its_block_and_reserves_the_next_at_half() -> None:
    ids, router, metadata, _ = _ids()
    router.leader = 1  # this node
    keeper = asyncio.create_task(ids.keep_reserved())
    try:
        got = [(await ids.init(""))[0] for _ in range(BLOCK_IDS // 2 + 1)]
        assert got == list(block_of(101)[: len(got)])  # one command, then ids in order
        while ids.reservations < 2:  # past half: the spare block, ahead of need
            await asyncio.sleep(0.01)
        rest = [(await ids.init(""))[0] for _ in range(BLOCK_IDS)]
        assert rest[BLOCK_IDS // 2 - 2] == block_of(101).stop - 1
        assert rest[BLOCK_IDS // 2 - 1] == block_of(102).start  # then the spare
        assert metadata.proposals <= 3 and len(set(got + rest)) == len(got + rest)
    finally:
        keeper.cancel()


@run
async def test_without_a_metadata_leader_a_caller_waits_then_gets_leader_unknown() -> None:
    ids, router, _, _ = _ids(timeout_s=0.2)
    keeper = asyncio.create_task(ids.keep_reserved())
    try:
        with pytest.raises(LeaderUnknownError):
            await ids.init("")
        ids.timeout_s = DEADLINE_S  # (the keeper's backoff is no longer within 0.2 s)
        waiting = asyncio.create_task(ids.init(""))
        await asyncio.sleep(0)
        router.leader = 1  # elected: the keeper's next try reserves
        assert (await waiting)[0] == block_of(101).start
    finally:
        keeper.cancel()


@run
async def test_a_block_from_the_leader_elsewhere_and_one_id_from_an_older_leader() -> None:
    answers = iter(
        [
            log_pb2.InitProducerResponse(producer_id=block_of(9).start, block_ids=BLOCK_IDS),
            log_pb2.InitProducerResponse(producer_id=77),  # an earlier release: one id
            log_pb2.InitProducerResponse(producer_id=78),
        ]
    )
    ids, router, metadata, stub = _ids(lambda _request: next(answers))
    router.leader = 2
    keeper = asyncio.create_task(ids.keep_reserved())
    try:
        first = [(await ids.init(""))[0] for _ in range(BLOCK_IDS)]
        assert first == list(block_of(9))
        assert (await ids.init(""))[0] == 77 and (await ids.init(""))[0] == 78
        assert all(r.reserve_block for r in stub.requests) and metadata.proposals == 0
    finally:
        keeper.cancel()


@run
async def test_a_cancelled_caller_takes_no_id() -> None:
    ids, router, _, _ = _ids()
    keeper = asyncio.create_task(ids.keep_reserved())
    try:
        waiting = asyncio.create_task(ids.init(""))
        await asyncio.sleep(0.05)
        waiting.cancel()  # a client's deadline, while no block is in hand
        router.leader = 1
        assert (await ids.init(""))[0] == block_of(101).start  # the first id, unused
    finally:
        keeper.cancel()


class _Book:
    """An address book that knows no node yet (a node restarted, its roster still old)."""

    def __init__(self) -> None:
        self.known: dict[int, str] = {}

    def address(self, node_id: int | None) -> str | None:
        return self.known.get(node_id) if node_id is not None else None

    def dial_address(self, node_id: int) -> str:
        return self.known[node_id]

    def nodes(self) -> list[tuple[int, str]]:
        return sorted(self.known.items())


def test_a_peer_whose_address_is_unknown_is_leader_unknown_not_a_key_error() -> None:
    dialed: list[str] = []
    book = _Book()
    peers = Peers(1, book, dial=lambda address: dialed.append(address) or object())  # type: ignore[arg-type, func-returns-value]
    for stub in (peers.log, peers.admin, peers.acls, peers.channel):
        with pytest.raises(LeaderUnknownError, match="does not know where node 3 is"):
            stub(3)
    assert dialed == []
    book.known[3] = "127.0.0.1:1"
    peers.channel(3)
    assert dialed == ["127.0.0.1:1"]


class _Channel:
    """A channel whose InitProducer answers `answer` (what a LogStub calls)."""

    def __init__(self, answer: log_pb2.InitProducerResponse) -> None:
        self.answer = answer

    def unary_unary(self, method: str, **_: Any) -> Callable[..., Awaitable[Any]]:
        async def call(request: Any, **__: Any) -> Any:
            return self.answer

        return call

    stream_stream = unary_stream = stream_unary = unary_unary  # (the stub's other calls)


@run
async def test_the_keeper_outlives_a_leader_whose_address_is_not_known_yet() -> None:
    """The real `Peers` over an address book that does not know the metadata leader yet (a
    restarted node whose roster has not caught up): its KeyError once ended the keeper,
    and with it the node."""
    answer = log_pb2.InitProducerResponse(producer_id=block_of(4).start, block_ids=BLOCK_IDS)
    book = _Book()
    peers = Peers(1, book, dial=lambda _address: _Channel(answer))  # type: ignore[arg-type, return-value]
    router, metadata = _Router(), _Metadata()
    ids = ProducerIds(router, metadata, peers, timeout_s=DEADLINE_S)
    router.leader = 2
    keeper = asyncio.create_task(ids.keep_reserved())
    try:
        waiting = asyncio.create_task(ids.init(""))
        await asyncio.sleep(0.3)  # a few failed tries (backoff 0.1 s, doubling)
        assert not keeper.done() and not waiting.done()
        book.known[2] = "127.0.0.1:1"
        assert (await waiting)[0] == block_of(4).start
        assert metadata.proposals == 0
    finally:
        keeper.cancel()
