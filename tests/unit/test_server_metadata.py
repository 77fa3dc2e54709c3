"""Metadata commands: typed and versioned, validated before they are proposed, applied
without failing; a command this node does not know stops it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from replog.errors import (
    InvalidArgumentError,
    InvalidTopicNameError,
    TopicExistsError,
    TopicNotFoundError,
)
from replog.replication import Acks, Message, ReplicaConfig
from replog.server.meta.command_codec import decode, encode
from replog.server.meta.metadata import (
    CreateTopic,
    DeleteTopic,
    MetadataImage,
    UnknownCommandError,
)
from replog.server.meta.metadata_log import MetadataLog
from replog.server.supervisor import Supervisor
from replog.storage import PartitionLog, StorageConfig


def test_commands_round_trip_with_their_kind_and_version() -> None:
    create = CreateTopic("orders", 2, ((1, 2), (2, 1)))
    body = json.loads(encode(create))
    assert (body["kind"], body["version"]) == ("create_topic", 1)
    assert decode(encode(create)) == create
    assert decode(encode(DeleteTopic("orders"))) == DeleteTopic("orders")


def test_the_untyped_commands_of_earlier_releases_still_decode() -> None:
    old = {"op": "create_topic", "name": "a", "partitions": 1, "assignment": [[1, 2, 3]]}
    assert decode(json.dumps(old).encode()) == CreateTopic("a", 1, ((1, 2, 3),))
    assert decode(b'{"op": "delete_topic", "name": "a"}') == DeleteTopic("a")


@pytest.mark.parametrize(
    "value",
    [
        b'{"kind": "create_topic", "version": 3, "name": "a"}',  # a newer version
        b'{"kind": "move_partition", "version": 1, "name": "a"}',  # a newer kind
        b'{"op": "rename_topic", "name": "a"}',
        b'{"kind": "create_topic", "version": 1, "name": "a", "partitions": 2,'
        b' "assignment": [[1]]}',  # malformed: one assignment for two partitions
        b'{"kind": "delete_topic", "version": true, "name": "a"}',
        b"[1, 2]",
        b"\xff",
    ],
)
def test_a_command_this_node_does_not_know_is_an_error_not_skipped(value: bytes) -> None:
    with pytest.raises(UnknownCommandError):
        decode(value)


def test_invalid_creates_are_refused_before_they_are_proposed() -> None:
    image = MetadataImage()
    with pytest.raises(InvalidTopicNameError):
        image.create_topic("a/b", 1, 1, [1])
    with pytest.raises(InvalidArgumentError):
        image.create_topic("__cluster", 1, 1, [1])
    with pytest.raises(InvalidArgumentError):
        image.create_topic("a", 0, 1, [1])
    with pytest.raises(InvalidArgumentError):
        image.create_topic("a", 1, 2, [1])
    image.apply(0, image.create_topic("a", 1, 1, [1]))
    with pytest.raises(TopicExistsError):
        image.create_topic("a", 1, 1, [1])
    with pytest.raises(TopicNotFoundError):
        image.delete_topic("b")


def test_applying_is_total_and_a_topic_is_identified_by_its_create_offset() -> None:
    image = MetadataImage()
    image.apply(0, None)  # a control record
    image.apply(1, CreateTopic("a", 1, ((1,),)))
    image.apply(2, CreateTopic("a", 3, ((1,), (1,), (1,))))  # lost a race: changes nothing
    assert (image.topics["a"].partitions, image.topics["a"].topic_id) == (1, 1)
    image.apply(3, DeleteTopic("a"))
    image.apply(4, DeleteTopic("a"))  # lost a race: changes nothing
    image.apply(5, CreateTopic("a", 2, ((1, 2), (2, 1))))
    assert (image.topics["a"].partitions, image.topics["a"].topic_id) == (2, 5)
    assert image.applied_offset == 6
    assert image.topics["a"].hosted_by(2) == [0, 1]


def test_assignment_spreads_replicas_over_every_node_preferred_leader_first() -> None:
    image = MetadataImage()
    command = image.create_topic("orders", 6, 3, [1, 2, 3])
    leaders = [replicas[0] for replicas in command.assignment]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]
    assert all(sorted(r) == [1, 2, 3] for r in command.assignment)


def test_a_node_that_meets_an_unknown_command_stops_applying_with_a_clear_error(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        failures: list[BaseException] = []
        supervisor = Supervisor(failures.append)
        plog = PartitionLog(tmp_path / "__cluster" / "partition_0", "__cluster", 0, StorageConfig())
        meta = MetadataLog(
            plog,
            ReplicaConfig(1, (1,), flush_always=False),
            NoPeers(),
            fetch_bytes_max=1 << 20,
            spawn=supervisor.spawn,
            on_applied=lambda: None,
        )
        await meta.start()
        await meta.driver.append([encode(CreateTopic("a", 1, ((1,),)))], Acks.ALL, 5)
        await meta.driver.append([b'{"kind": "split_topic", "version": 7}'], Acks.ALL, 5)
        with pytest.raises(UnknownCommandError, match=r"offset 2: .*split_topic"):
            await asyncio.wait_for(meta.run(), 30)
        assert list(meta.image.topics) == ["a"]  # everything before it was applied
        await meta.close()
        await supervisor.close()
        plog.close()
        assert failures == []

    asyncio.run(scenario())


class NoPeers:
    def send(self, to: int, message: Message) -> None:
        raise AssertionError("a replica set of one sends nothing")


def test_rack_aware_assignment_spans_as_many_racks_as_it_can() -> None:
    from replog.server.meta.metadata import assign

    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c"}
    for name in ("orders", "t", "x" * 200):
        for rf in (1, 2, 3, 4, 5):
            out = assign(name, 40, rf, list(racks), racks)
            for replicas in out:
                assert len(set(replicas)) == rf
                assert len({racks[n] for n in replicas}) == min(rf, 3), (name, rf, replicas)
            # every node leads (comes first) somewhere: leadership still spreads
            assert {r[0] for r in out} == set(racks)
    # unequal racks: one node alone in its rack is in every partition of rf=2 it can be
    lopsided = {1: "a", 2: "a", 3: "a", 4: "b"}
    for replicas in assign("t", 12, 2, list(lopsided), lopsided):
        assert {lopsided[n] for n in replicas} == {"a", "b"}


def test_without_racks_or_with_one_the_assignment_is_as_before() -> None:
    from replog.server.meta.metadata import assign

    plain = assign("orders", 12, 3, [1, 2, 3, 4])
    assert assign("orders", 12, 3, [1, 2, 3, 4], {}) == plain
    assert assign("orders", 12, 3, [1, 2, 3, 4], dict.fromkeys([1, 2, 3, 4], "a")) == plain
    assert assign("orders", 12, 3, [4, 3, 2, 1], {1: "", 2: ""}) == plain
