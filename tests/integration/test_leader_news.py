"""Leader news over real gRPC (two nodes' LeaderNews in one process, 127.0.0.1): a node that
first hears of a peer sends it its whole directory; a change reaches the peer; news for a peer
that is down waits and arrives once it is up; a restarted peer (new incarnation) gets the
whole directory again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc

from replog.devcluster import free_port
from replog.server.meta.metadata import CreateTopic, MetadataImage
from replog.server.peering.leader_directory import Entry, LeaderDirectory
from replog.server.peering.leader_news import LeaderNews
from replog.server.peering.replication_transport import ReplicationService
from replog.v1 import replication_pb2_grpc

DEADLINE_S = 30.0
ASSIGNMENT = tuple((1, 2) for _ in range(8))


def _image() -> MetadataImage:
    image = MetadataImage()
    image.apply(0, CreateTopic("t", len(ASSIGNMENT), ASSIGNMENT))
    return image


class _Node:
    def __init__(self, node_id: int, ports: dict[int, int]) -> None:
        self.node_id = node_id
        self.ports = ports
        self.image = _image()
        self.channels: dict[int, grpc.aio.Channel] = {}
        self.news = LeaderNews(node_id, LeaderDirectory(self.image), self._channel)
        self.server: grpc.aio.Server | None = None

    def _channel(self, peer: int) -> grpc.aio.Channel:
        if peer not in self.channels:
            self.channels[peer] = grpc.aio.insecure_channel(f"127.0.0.1:{self.ports[peer]}")
        return self.channels[peer]

    async def listen(self) -> None:
        self.server = grpc.aio.server()
        service = ReplicationService(lambda *_: None, None, None, self.news)
        replication_pb2_grpc.add_ReplicationServicer_to_server(service, self.server)  # type: ignore[no-untyped-call]
        self.server.add_insecure_port(f"127.0.0.1:{self.ports[self.node_id]}")
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(None)
            self.server = None  # (freed while the loop runs: grpc's __del__ needs it)
        await self.news.close()
        for channel in self.channels.values():
            await channel.close(None)

    def leader(self, partition: int) -> tuple[int, int] | None:
        return self.news.directory.leader(self.image.topics["t"], partition)


def _spawn(coro: Any, name: str) -> asyncio.Task[None]:
    return asyncio.create_task(coro, name=name)


async def _until(check: Callable[[], bool]) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "not within the deadline"
        await asyncio.sleep(0.01)


def test_news_reaches_a_peer_also_one_that_was_down_and_a_restarted_one_gets_everything() -> None:
    async def main() -> None:
        ports = {1: free_port(), 2: free_port()}
        one, two = _Node(1, ports), _Node(2, ports)
        one.news.led("t", 0, 0, 3)  # known before the peer is: it goes in the whole copy
        await one.listen()
        one.news.start(_spawn, [2])  # node 2 is down: the hello waits, with a backoff
        await asyncio.sleep(0.3)
        one.news.led("t", 0, 1, 4)  # news while node 2 is down
        await two.listen()
        two.news.start(_spawn, [1])
        await _until(lambda: two.leader(0) == (3, 1) and two.leader(1) == (4, 1))
        two.news.led("t", 0, 2, 5)  # and the other way
        await _until(lambda: one.leader(2) == (5, 2))
        sent = one.news.messages_sent
        one.news.led("t", 0, 3, 6)
        await _until(lambda: two.leader(3) == (6, 1))
        assert one.news.messages_sent == sent + 1  # one change: one message

        await two.stop()  # node 2 restarts with an empty directory
        two = _Node(2, ports)
        await two.listen()
        two.news.start(_spawn, [1])
        await _until(lambda: [two.leader(p) for p in range(3)] == [(3, 1), (4, 1), (5, 2)])
        assert two.leader(3) == (6, 1)
        assert two.news.directory.merge([Entry("t", 0, 3, 6, 2)]) == []  # an equal epoch
        await two.stop()
        await one.stop()

    asyncio.run(main())
