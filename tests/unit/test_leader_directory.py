"""The leader directory's merge rules, the news pages and the metadata answers built on it."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from replog.errors import InvalidArgumentError
from replog.server.control.answers import NO_LEADER, MetadataAnswers
from replog.server.meta.metadata import CreatePartitions, CreateTopic, DeleteTopic, MetadataImage
from replog.server.peering import leader_news
from replog.server.peering.leader_directory import Entry, LeaderDirectory, check_entry
from replog.server.peering.leader_news import LeaderNews, from_wire, to_wire
from replog.server.peering.replication_transport import NODE_ID_HEADER, ReplicationService
from replog.v1 import replication_pb2 as pb

TWO = ((1, 2), (2, 3), (3, 1), (1, 3))  # 4 partitions, rf 2, on nodes 1-3


def _image_with(name: str = "orders", offset: int = 0) -> MetadataImage:
    image = MetadataImage()
    image.apply(offset, CreateTopic(name, len(TWO), TWO))
    return image


def test_a_higher_epoch_replaces_the_leader_and_a_lower_or_equal_one_never_does() -> None:
    image = _image_with()
    meta = image.topics["orders"]
    directory = LeaderDirectory(image)
    assert directory.leader(meta, 0) is None

    assert directory.merge([Entry("orders", 0, 0, 5, 1)])
    assert directory.leader(meta, 0) == (5, 1)
    version = directory.version(meta)

    assert directory.merge([Entry("orders", 0, 0, 4, 2), Entry("orders", 0, 0, 5, 2)]) == []
    assert directory.leader(meta, 0) == (5, 1)
    assert directory.version(meta) == version  # nothing changed: caches stay

    assert directory.merge([Entry("orders", 0, 0, 7, 2)]) == [Entry("orders", 0, 0, 7, 2)]
    assert directory.leader(meta, 0) == (7, 2)
    assert directory.version(meta) > version


def test_entries_of_a_deleted_topic_or_an_older_incarnation_are_dropped() -> None:
    image = _image_with()
    directory = LeaderDirectory(image)
    directory.merge([Entry("orders", 0, p, 3, TWO[p][0]) for p in range(4)])
    assert len(directory) == 4

    image.apply(1, DeleteTopic("orders"))
    assert directory.merge([Entry("orders", 0, 1, 9, 2)]) == []  # the topic is gone
    assert len(directory) == 0  # and what was held of it

    image.apply(2, CreateTopic("orders", 4, TWO))  # the same name again: topic_id 2
    again = image.topics["orders"]
    assert directory.merge([Entry("orders", 0, 0, 9, 1)]) == []  # the old incarnation's
    assert directory.leader(again, 0) is None
    assert directory.merge([Entry("orders", 2, 0, 1, 1)])
    assert directory.leader(again, 0) == (1, 1)
    assert directory.dropped >= 6


def test_news_of_a_topic_not_applied_here_yet_waits_and_is_bounded() -> None:
    image = _image_with()
    directory = LeaderDirectory(image, early_entries_max=3)
    # "fresh" will be created at offset 5: this node has applied up to offset 0 only
    assert directory.merge([Entry("fresh", 5, p, 1, 1) for p in range(4)]) == [
        Entry("fresh", 5, p, 1, 1) for p in range(3)
    ]
    assert len(directory) == 3  # the fourth is over the bound: dropped
    image.apply(5, CreateTopic("fresh", 4, TWO))
    fresh = image.topics["fresh"]
    assert directory.leader(fresh, 2) == (1, 1)
    assert directory.version(fresh) == 3

    # a partition CreatePartitions adds, heard of before it is applied here
    assert directory.merge([Entry("fresh", 5, 5, 2, 3)])
    assert directory.leader(fresh, 5) is None
    image.apply(6, CreatePartitions("fresh", 5, 6, ((3, 1), (3, 2))))
    assert directory.leader(image.topics["fresh"], 5) == (2, 3)


def test_an_early_entry_of_an_incarnation_the_image_went_past_is_dropped() -> None:
    image = _image_with()
    directory = LeaderDirectory(image)
    directory.merge([Entry("gone", 3, 0, 1, 1)])  # created at 3 (not applied here yet)
    image.apply(4, CreateTopic("gone", 4, TWO))  # ... but it was deleted and made again at 4
    assert len(directory) == 0
    assert directory.leader(image.topics["gone"], 0) is None


@pytest.mark.parametrize(
    "entry",
    [
        Entry("", 0, 0, 1, 1),
        Entry("x" * 250, 0, 0, 1, 1),
        Entry("t", 0, 10**6, 1, 1),
        Entry("t", 0, 0, 2**40, 1),
        Entry("t", 0, 0, 1, 0),
        Entry("t", 2**63, 0, 1, 1),
    ],
)
def test_an_impossible_entry_is_an_invalid_argument(entry: Entry) -> None:
    with pytest.raises(InvalidArgumentError):
        check_entry(entry)
    with pytest.raises(InvalidArgumentError):
        from_wire(pb.LeaderNews(entries=[to_wire(Entry("t", 0, 0, 1, 1)), to_wire(entry)]))


def test_a_message_of_too_many_entries_is_refused_whole() -> None:
    many = [to_wire(Entry("t", 0, p, 1, 1)) for p in range(leader_news.RECEIVED_ENTRIES_MAX + 1)]
    with pytest.raises(InvalidArgumentError):
        from_wire(pb.LeaderNews(entries=many))


def _news(image: MetadataImage, node_id: int = 1) -> LeaderNews:
    def nowhere(_peer: int) -> Any:
        raise KeyError(_peer)

    return LeaderNews(node_id, LeaderDirectory(image), nowhere, incarnation=77)


def test_a_new_incarnation_of_a_peer_gets_the_whole_directory_in_bounded_pages() -> None:
    image = MetadataImage()
    image.apply(0, CreateTopic("big", 3000, tuple((1, 2) for _ in range(3000))))
    news = _news(image)
    news.add(2)  # not started: no task, the pages are taken by hand
    news.directory.merge([Entry("big", 0, p, 2, 2) for p in range(3000)])
    peer = news._peers[2]

    ack = news.receive(2, pb.LeaderNews(incarnation=1234))  # the peer's first message
    assert ack.incarnation == 77
    assert len(peer.full) == 3000
    sizes = []
    while peer.full:
        page, from_full = peer.take()
        assert from_full == len(page)
        message = pb.LeaderNews(entries=[to_wire(e) for e in page], incarnation=77)
        assert len(page) <= leader_news.PAGE_ENTRIES_MAX
        assert message.ByteSize() <= leader_news.PAGE_BYTES_MAX + 64
        sizes.append(len(page))
        del peer.full[:from_full]
    assert sum(sizes) == 3000 and len(sizes) == 3

    news.receive(2, pb.LeaderNews(incarnation=1234))  # the same incarnation: no copy again
    assert peer.full == []


def test_a_leader_change_is_queued_once_per_peer_and_an_undelivered_one_waits_again() -> None:
    image = _image_with()
    news = _news(image)
    news.add(2)
    news.add(3)
    news.led("orders", 0, 0, 4)
    news.led("orders", 0, 0, 4)  # the same epoch again: not news
    for peer in (2, 3):
        assert list(news._peers[peer].pending.values()) == [Entry("orders", 0, 0, 4, 1)]

    peer = news._peers[2]
    page, from_full = peer.take()
    assert (page, from_full, peer.pending) == ([Entry("orders", 0, 0, 4, 1)], 0, {})
    news.led("orders", 0, 0, 6)  # newer news while the page was out
    peer.put_back(page, from_full)
    assert list(peer.pending.values()) == [Entry("orders", 0, 0, 6, 1)]

    assert news.receive(3, pb.LeaderNews(entries=[to_wire(Entry("orders", 0, 1, 9, 3))])).accepted
    assert news.directory.leader(image.topics["orders"], 1) == (9, 3)
    assert len(news._peers[2].pending) == 1  # heard news is not passed on


class _NoReplicas:
    def replica(self, _meta: Any, _p: int) -> None:
        return None


def test_get_metadata_answers_the_heard_leader_of_a_partition_not_hosted_here() -> None:
    image = _image_with()
    directory = LeaderDirectory(image)
    answers = MetadataAnswers(image, _NoReplicas(), 4, directory)  # type: ignore[arg-type]
    meta = image.topics["orders"]

    first = answers.topic(meta)
    assert [p.leader_id for p in first.partitions] == [NO_LEADER] * 4
    assert answers.topic(meta) is first and answers.reused == 1  # nothing new: the same answer

    directory.merge([Entry("orders", 0, 0, 3, 2), Entry("orders", 0, 1, 2, 3)])
    directory.merge([Entry("orders", 0, 2, 1, 2)])  # node 2 is no replica of partition 2
    second = answers.topic(meta)
    assert [(p.leader_id, p.epoch) for p in second.partitions] == [
        (2, 3),
        (3, 2),
        (NO_LEADER, 0),
        (NO_LEADER, 0),
    ]
    assert answers.built == 2
    assert answers.topic(meta) is second


class _Aborted(Exception):
    pass


class _Context:
    """A servicer context: invocation metadata in, the abort's status code out."""

    def __init__(self, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.metadata = metadata
        self.code: Any = None

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    async def abort(self, code: Any, _details: str, _trailing: Any = None) -> None:
        self.code = code
        raise _Aborted


def _share(service: Any, request: pb.LeaderNews, context: _Context) -> Any:
    async def call() -> Any:
        try:
            return await service.ShareLeaders(request, context)
        except _Aborted:
            return None

    return asyncio.run(call())


def test_share_leaders_takes_news_only_from_an_authenticated_peer() -> None:
    image = _image_with()
    news = _news(image, node_id=4)
    news.add(2)
    good = pb.LeaderNews(entries=[to_wire(Entry("orders", 0, 0, 3, 2))], incarnation=9)

    # TLS: the certificate must name a member
    service = ReplicationService(lambda *_: None, lambda _ctx: None, None, news)
    context = _Context()
    assert _share(service, good, context) is None
    assert context.code is grpc.StatusCode.PERMISSION_DENIED
    assert len(news.directory) == 0

    # plaintext: the node id header is believed; without it the call is refused
    service = ReplicationService(lambda *_: None, None, None, news)
    context = _Context()
    assert _share(service, good, context) is None
    assert context.code is grpc.StatusCode.INVALID_ARGUMENT

    bad = pb.LeaderNews(entries=[to_wire(Entry("orders", 0, 0, 3, 0))])  # leader id 0
    context = _Context(((NODE_ID_HEADER, "2"),))
    assert _share(service, bad, context) is None
    assert context.code is grpc.StatusCode.INVALID_ARGUMENT
    assert len(news.directory) == 0  # nothing of a refused message is kept

    ack = _share(service, good, _Context(((NODE_ID_HEADER, "2"),)))
    assert (ack.accepted, ack.incarnation) == (1, 77)
    assert news.directory.leader(image.topics["orders"], 0) == (3, 2)
    assert len(news._peers[2].full) == 1  # a new incarnation of node 2: it gets a copy
