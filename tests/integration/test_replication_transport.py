"""Replication over real gRPC streams: three nodes (in one process) elect, commit, fail over."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from replog import frames
from replog.devcluster import free_port
from replog.replication import Acks, Message, ReplicaConfig, Role
from replog.replication.driver import ReplicaDriver
from replog.replication.messages import BeginEpoch
from replog.server.peering import replication_transport
from replog.server.peering.replication_transport import (
    PeerLinks,
    ReplicationService,
    same_incarnation,
)
from replog.storage import FlushPolicy, PartitionLog, StorageConfig
from replog.v1 import replication_pb2 as pb
from replog.v1 import replication_pb2_grpc

VOTERS = (1, 2, 3)
STORAGE = StorageConfig(segment_bytes_max=64 * 1024, flush=FlushPolicy.ALWAYS)
DEADLINE_S = 30.0
T = TypeVar("T")


class Node:
    def __init__(self, node_id: int, root: Path, topic_id: int = 0, quiet_ms: int = 0) -> None:
        self.node_id = node_id
        self.quiet_ms = quiet_ms  # quiescence (0: off), with the links' liveness
        self.service: ReplicationService | None = None
        self.root = root
        self.topic_id = topic_id  # the incarnation of topic "t" this node hosts
        self.port = 0
        self.server: grpc.aio.Server | None = None
        self.driver: ReplicaDriver | None = None
        self.links: PeerLinks | None = None
        self.log: PartitionLog | None = None

    def _route(
        self, topic: str, partition: int, topic_id: int
    ) -> Callable[[Message], Awaitable[None]] | None:
        if self.driver is None or topic != "t" or not same_incarnation(topic_id, self.topic_id):
            return None
        return self.driver.deliver

    async def listen(self) -> None:
        self.server = grpc.aio.server()
        self.service = ReplicationService(self._route)
        replication_pb2_grpc.add_ReplicationServicer_to_server(  # type: ignore[no-untyped-call]
            self.service, self.server
        )
        self.port = self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        await self.server.start()

    async def start(self, peers: dict[int, str]) -> None:
        self.links = PeerLinks(self.node_id, peers, silence_ms=1000)
        self.links.start()
        if self.quiet_ms and self.service is not None:
            self.service.liveness = self.links.liveness
        self.log = PartitionLog(self.root / f"node{self.node_id}", "t", 0, STORAGE)
        config = ReplicaConfig(
            self.node_id, VOTERS, election_timeout_ms_min=400, election_timeout_ms_max=800,
            fetch_wait_ms_max=100, fetch_retry_ms=300, begin_epoch_retry_ms=100,
            quiet_fetch_wait_ms=self.quiet_ms,
        )  # fmt: skip
        self.driver = ReplicaDriver(
            self.log, config, self.links.transport("t", 0, self.topic_id),
            rng=random.Random(self.node_id), tick_ms=20,
        )  # fmt: skip
        await self.driver.start()

    async def crash(self) -> None:
        assert self.server and self.driver and self.links and self.log
        await self.server.stop(None)
        await self.driver.close()
        await self.links.close()
        self.log.crash()
        self.server = self.driver = self.links = self.log = None


async def wait_for(condition: Callable[[], T | None]) -> T:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not (value := condition()):
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)
    return value


def leader_of(nodes: dict[int, Node]) -> int | None:
    leaders = [n for n, node in nodes.items() if node.driver and node.driver.role is Role.LEADER]
    return leaders[0] if len(leaders) == 1 else None


async def start_all(nodes: dict[int, Node]) -> dict[int, str]:
    """Every node listens, then starts replicating to the others; their addresses."""
    for node in nodes.values():
        await node.listen()
    peers = {n: f"127.0.0.1:{node.port}" for n, node in nodes.items()}
    for node in nodes.values():
        await node.start(peers)
    return peers


def values_of(log: PartitionLog, upto: int) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    while offset < upto:
        decoded = frames.decode(log.read_uncommitted(offset, 1 << 20, end_offset=upto))
        out += decoded.data_records().values
        offset = decoded.offsets[-1] + 1
    return out


def test_three_nodes_replicate_over_grpc_and_survive_a_leader_crash(tmp_path: Path) -> None:
    async def main() -> None:
        nodes = {n: Node(n, tmp_path) for n in VOTERS}
        peers = await start_all(nodes)
        try:
            first = await wait_for(lambda: leader_of(nodes))
            acked: list[bytes] = []
            for i in range(10):
                batch = [b"%d-%d" % (i, j) for j in range(100)]
                driver = nodes[first].driver
                assert driver is not None
                await driver.append(batch, Acks.ALL, DEADLINE_S)
                acked += batch
            await nodes[first].crash()
            others = {n: v for n, v in nodes.items() if n != first}
            second = await wait_for(lambda: leader_of(others))
            survivor = nodes[second]
            assert survivor.driver is not None and survivor.log is not None
            await survivor.driver.append([b"after"], Acks.ALL, DEADLINE_S)
            assert values_of(survivor.log, survivor.log.high_watermark) == [*acked, b"after"]
            await nodes[first].listen()  # same port: the peers' streams reconnect
            await nodes[first].start(peers)
            rejoined = nodes[first]
            leo = survivor.log.log_end_offset
            await wait_for(
                lambda: (rejoined.log is not None and rejoined.log.log_end_offset >= leo) or None
            )
            assert rejoined.log is not None
            assert values_of(rejoined.log, leo) == [*acked, b"after"]
        finally:
            for node in nodes.values():
                if node.server is not None:
                    await node.crash()

    asyncio.run(main())


def _sent(node: Node) -> tuple[int, int]:
    """(batches of envelopes, heartbeats) a node's links sent."""
    assert node.links is not None
    links = node.links._links.values()
    return sum(link.batches for link in links), sum(link.heartbeats for link in links)


def test_a_quiet_partition_sends_only_heartbeats_and_fails_over_when_its_leader_dies(
    tmp_path: Path,
) -> None:
    """Quiescence over real streams: once every replica holds the log and its HW, the
    links carry only node heartbeats (no fetch for the minute the leader would hold one);
    when the leader's process dies its followers' nodes notice the silence, wake the
    partition and elect a new leader long before that minute."""

    async def main() -> None:
        nodes = {n: Node(n, tmp_path, quiet_ms=60_000) for n in VOTERS}
        await start_all(nodes)
        try:
            first = await wait_for(lambda: leader_of(nodes))
            driver = nodes[first].driver
            assert driver is not None
            await driver.append([b"a"], Acks.ALL, DEADLINE_S)
            await wait_for(lambda: all(n.driver and n.driver.replica.quiet for n in nodes.values()))
            sent = {n: _sent(node) for n, node in nodes.items()}
            await asyncio.sleep(1.0)  # idle: heartbeats (4 per link a second), and at most
            # an exchange or two after a heartbeat came late on this loaded machine (a
            # wake); not quiet, the followers would fetch 10 times each in that second
            batches = sum(_sent(node)[0] - sent[n][0] for n, node in nodes.items())
            assert batches <= 6, f"{batches} replication messages from a quiet partition"
            assert all(_sent(node)[1] > sent[n][1] for n, node in nodes.items())
            await nodes[first].crash()
            others = {n: v for n, v in nodes.items() if n != first}
            second = await wait_for(lambda: leader_of(others))
            survivor = nodes[second]
            assert survivor.driver is not None and survivor.log is not None
            await survivor.driver.append([b"after"], Acks.ALL, DEADLINE_S)
            assert values_of(survivor.log, survivor.log.high_watermark) == [b"a", b"after"]
        finally:
            for node in nodes.values():
                if node.server is not None:
                    await node.crash()

    asyncio.run(main())


def test_a_replica_of_another_incarnation_of_the_topic_takes_no_message_from_this_one(
    tmp_path: Path,
) -> None:
    """Node 3 hosts a re-created topic "t" (topic_id 9) while nodes 1 and 2 still run the
    deleted one (topic_id 5): none of their votes, epochs or records reach node 3's log,
    and node 3's own messages do not disturb them."""

    async def main() -> None:
        nodes = {n: Node(n, tmp_path, topic_id=9 if n == 3 else 5) for n in VOTERS}
        await start_all(nodes)
        try:
            old = {n: v for n, v in nodes.items() if n != 3}
            first = await wait_for(lambda: leader_of(old))
            driver = nodes[first].driver
            assert driver is not None
            for i in range(5):
                await driver.append([b"old-%d" % i], Acks.ALL, DEADLINE_S)
            stale = nodes[3]
            assert stale.log is not None and stale.driver is not None
            assert stale.log.log_end_offset == 0, "no record of the deleted topic reached it"
            assert stale.driver.leader_id is None, "it never learned the old topic's leader"
            assert all(
                n.driver is not None and n.driver.leader_id == first for n in old.values()
            ), "node 3's campaigns for its own incarnation did not unseat the old leader"
        finally:
            for node in nodes.values():
                if node.server is not None:
                    await node.crash()

    asyncio.run(main())


def test_messages_are_taken_unless_both_sides_know_the_incarnation_and_it_differs() -> None:
    assert same_incarnation(5, 5)
    assert not same_incarnation(5, 9)
    assert same_incarnation(0, 9)  # a sender that predates topic ids
    assert same_incarnation(5, 0)  # a replica directory that predates them


def test_a_link_waiting_out_its_backoff_reconnects_once_the_peer_is_heard_from(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Node 1's link to node 2 failed while node 2 was down and waits out a backoff longer
    than this test's deadline; node 2 comes up and opens a stream to node 1 (with nothing
    to send yet): node 1's link reconnects at once, and the envelope queued after the break
    reaches node 2 (the failed stream's request reader does not take it and lose it)."""
    monkeypatch.setattr(replication_transport, "RECONNECT_BACKOFF_S", (60.0, 60.0))
    caplog.set_level(logging.DEBUG, logger="replog.replication")

    async def main() -> None:
        ports = {n: free_port() for n in (1, 2)}
        peers = {n: f"127.0.0.1:{p}" for n, p in ports.items()}
        received: dict[int, list[int]] = {1: [], 2: []}

        def router_of(node: int) -> Any:
            def route(topic: str, partition: int, topic_id: int) -> None:
                received[node].append(partition)  # and host nothing

            return route

        links = {n: PeerLinks(n, peers) for n in (1, 2)}
        servers: list[grpc.aio.Server] = []
        try:
            for n in (1, 2):
                if n == 2:  # node 2 comes up only once node 1's link to it has failed
                    await wait_for(lambda: any("broke" in r.getMessage() for r in caplog.records))
                server = grpc.aio.server()
                service = ReplicationService(router_of(n), on_peer=links[n].heard_from)
                replication_pb2_grpc.add_ReplicationServicer_to_server(service, server)  # type: ignore[no-untyped-call]
                server.add_insecure_port(peers[n])
                await server.start()
                servers.append(server)
                links[n].start()
            links[1].send(2, pb.Envelope(topic="t", partition=1, from_id=1))
            assert await wait_for(lambda: received[2] == [1] or None)
            assert received[1] == []  # node 1 knew node 2 was up from its stream alone
        finally:
            for link in links.values():
                await link.close()
            for server in servers:
                await server.stop(None)

    asyncio.run(main())


def test_envelopes_queued_together_travel_in_few_messages_in_order_a_large_one_alone() -> None:
    """600 envelopes queued for a peer before its link connects (the fetches of 600
    partitions two nodes share), one of them a 40 KiB fetch answer: they all arrive, in
    order, in a handful of gRPC messages (before: one message each), the large one alone
    (`BATCH_BYTES_MAX`)."""

    async def main() -> None:
        address = f"127.0.0.1:{free_port()}"
        received: list[int] = []

        async def deliver(message: Message) -> None:
            assert isinstance(message, BeginEpoch)

        def route(topic: str, partition: int, topic_id: int) -> Any:
            received.append(partition)
            return deliver

        server = grpc.aio.server()
        service = ReplicationService(route)
        replication_pb2_grpc.add_ReplicationServicer_to_server(service, server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(address)
        await server.start()
        links = PeerLinks(1, {2: address})
        try:
            for p in range(600):
                envelope = pb.Envelope(topic="t", partition=p, from_id=1)
                envelope.begin_epoch.epoch, envelope.begin_epoch.leader_id = 1, 1
                if p == 300:
                    envelope.fetch_response.records.frames = b"x" * 40_000  # (not delivered)
                links.send(2, envelope)
            links.start()
            await wait_for(lambda: len(received) == 600 or None)
            assert received == list(range(600))
            batches = links._links[2].batches
            assert 3 <= batches <= 10, batches  # 600 x ~20 B in 32 KiB batches + the large one
        finally:
            await links.close()
            await server.stop(None)

    asyncio.run(main())


def test_the_metadata_log_travels_on_its_own_lane_past_full_and_blocked_data_traffic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A data partition's traffic to a peer fills its queue (envelopes past it are dropped)
    and the peer handles none of it (its window fills and it stops reading that stream): the
    metadata log's (`__cluster`) envelopes queued after it, and sent while it is stuck, are
    neither dropped nor held, and arrive in order (before, one queue and one stream: the
    metadata log's votes were dropped with the rest and it lost its leader for good)."""
    monkeypatch.setattr(replication_transport, "QUEUE_ENVELOPES_MAX", 50)
    monkeypatch.setattr(replication_transport, "PENDING_DELIVERIES_MAX", 8)

    async def main() -> None:
        address = f"127.0.0.1:{free_port()}"
        stuck = asyncio.Event()  # never set: the data partition's replica handles nothing
        data: list[int] = []
        meta: list[int] = []

        async def hang(message: Message) -> None:
            await stuck.wait()

        def route(topic: str, partition: int, topic_id: int) -> Any:
            if topic == "__cluster":
                return lambda message: _note(meta, message)
            data.append(partition)
            return hang

        def envelope(topic: str, epoch: int) -> pb.Envelope:
            sent = pb.Envelope(topic=topic, partition=0, from_id=1)
            sent.begin_epoch.epoch, sent.begin_epoch.leader_id = epoch, 1
            return sent

        server = grpc.aio.server()
        replication_pb2_grpc.add_ReplicationServicer_to_server(ReplicationService(route), server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(address)
        await server.start()
        links = PeerLinks(1, {2: address})
        try:
            for epoch in range(1, 61):  # 10 more than the queue holds
                links.send(2, envelope("t", epoch))
            links.send(2, envelope("__cluster", 1))
            links.start()
            assert await wait_for(lambda: meta == [1] or None)
            await wait_for(lambda: len(data) == 50 or None)  # one batch: the window is full
            links.send(2, envelope("__cluster", 2))
            links.send(2, envelope("t", 99))
            assert await wait_for(lambda: meta == [1, 2] or None)
            assert links._links[2].dropped == 10
            assert links._priority[2].dropped == 0
            assert len(data) == 50  # the data stream is still held by its replica
        finally:
            stuck.set()
            await links.close()
            await server.stop(None)

    asyncio.run(main())


async def _note(into: list[int], message: Message) -> None:
    assert isinstance(message, BeginEpoch)
    into.append(message.epoch)
