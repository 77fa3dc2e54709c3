"""Every replication message survives the trip through its protobuf envelope unchanged."""

from __future__ import annotations

import pytest

from replog import frames
from replog.replication.epochs import EpochStart
from replog.replication.messages import (
    BeginEpoch,
    Diverging,
    Fenced,
    FetchRequest,
    FetchResponse,
    Message,
    Records,
    StartAt,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from replog.server.peering.replication_codec import (
    EPOCH_MAX,
    ImpossibleMessage,
    from_envelope,
    to_envelope,
)
from replog.v1 import replication_pb2 as pb

MESSAGES: list[Message] = [
    FetchRequest(epoch=3, replica_id=2, fetch_offset=41, last_fetched_epoch=2),
    FetchResponse(
        3, 1, 41, 2, Records(41, 43, (EpochStart(3, 42),), 40, frames.encode(41, [b"", b"x"]))
    ),
    FetchResponse(3, 1, 41, 2, Diverging(epoch=2, end_offset=39)),
    FetchResponse(3, 1, 41, 2, Fenced(epoch=4, leader_id=3)),
    FetchResponse(3, 1, 41, 2, Fenced(epoch=4, leader_id=None)),
    FetchResponse(3, 1, 0, 0, StartAt(offset=500, history=(EpochStart(1, 0), EpochStart(3, 250)))),
    FetchResponse(3, 1, 0, 0, StartAt(offset=7, history=())),
    VoteRequest(epoch=5, candidate_id=2, last_epoch=4, log_end_offset=100),
    VoteResponse(epoch=5, voter_id=3, granted=True),
    BeginEpoch(epoch=5, leader_id=2),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_a_message_decodes_to_what_was_encoded(message: Message) -> None:
    sender = _sender(message)
    env = to_envelope("orders", 7, sender, message)
    wire = pb.Envelope.FromString(env.SerializeToString())
    assert (wire.topic, wire.partition, wire.from_id) == ("orders", 7, sender)
    assert from_envelope(wire) == message


def _sender(message: Message) -> int:
    """The node that sends `message` (the codec refuses it from anyone else)."""
    if isinstance(message, FetchRequest):
        return message.replica_id
    if isinstance(message, FetchResponse | BeginEpoch):
        return message.leader_id
    if isinstance(message, VoteRequest):
        return message.candidate_id
    assert isinstance(message, VoteResponse)
    return message.voter_id


U64_MAX = 2**64 - 1


def _vote(epoch: int, candidate: int = 2, sender: int = 2, last_epoch: int = 0) -> pb.Envelope:
    return pb.Envelope(
        topic="orders",
        partition=0,
        from_id=sender,
        vote_request=pb.VoteRequest(
            epoch=epoch, candidate_id=candidate, last_epoch=last_epoch, log_end_offset=0
        ),
    )


@pytest.mark.parametrize(
    "envelope",
    [
        _vote(U64_MAX),
        _vote(EPOCH_MAX + 1),
        _vote(5, candidate=3),  # a candidate that is not the sender
        _vote(5, last_epoch=6),  # a last record in a future epoch
        pb.Envelope(
            from_id=1,
            fetch_request=pb.ReplicaFetchRequest(epoch=1, replica_id=1, fetch_offset=U64_MAX),
        ),
        pb.Envelope(from_id=1, begin_epoch=pb.BeginEpoch(epoch=U64_MAX, leader_id=1)),
        pb.Envelope(from_id=1, vote_response=pb.VoteResponse(epoch=U64_MAX, voter_id=1)),
        pb.Envelope(from_id=2, vote_response=pb.VoteResponse(epoch=3, voter_id=1)),
        pb.Envelope(from_id=1),  # no message at all
    ],
    ids=[
        "epoch 2^64-1",
        "epoch 2^31",
        "candidate is not the sender",
        "last_epoch after epoch",
        "fetch offset 2^64-1",
        "begin epoch 2^64-1",
        "vote response epoch 2^64-1",
        "voter is not the sender",
        "empty",
    ],
)
def test_an_impossible_envelope_is_refused_before_it_becomes_a_message(
    envelope: pb.Envelope,
) -> None:
    with pytest.raises(ImpossibleMessage):
        from_envelope(envelope)


def _records(start: int, end: int, data: bytes, fetch_offset: int | None = None) -> pb.Envelope:
    env = pb.Envelope(from_id=1)
    r = env.fetch_response
    r.epoch, r.leader_id, r.last_fetched_epoch = 2, 1, 1
    r.fetch_offset = start if fetch_offset is None else fetch_offset
    r.records.start_offset, r.records.end_offset, r.records.frames = start, end, data
    return env


@pytest.mark.parametrize(
    "envelope",
    [
        _records(5, 7, frames.encode(5, [b"a", b"b", b"c"])),  # more records than claimed
        _records(5, 6, frames.encode(6, [b"a"])),  # frames at another offset
        _records(5, 9, frames.encode(6, [b"a"]) + frames.encode(6, [b"b"])),  # not ascending
        _records(5, 9, frames.encode(4, [b"a"]) + frames.encode(6, [b"b"])),  # before start
        _records(5, 6, frames.encode(5, [b"a"])[:-1]),  # a torn frame
        _records(5, 6, frames.encode(5, [b"a"]), fetch_offset=4),  # not where it was asked
        _records(7, 6, b""),  # end before start
    ],
    ids=["count", "offset", "repeated", "before", "torn", "fetch offset", "backwards"],
)
def test_records_must_be_exactly_what_they_claim(envelope: pb.Envelope) -> None:
    with pytest.raises(ImpossibleMessage):
        from_envelope(envelope)


def test_records_of_a_compacted_range_carry_offset_gaps_and_may_end_in_one() -> None:
    data = frames.encode(5, [b"a"]) + frames.encode(8, [b"b", b"c"])
    message = from_envelope(_records(5, 12, data))
    assert isinstance(message, FetchResponse) and isinstance(message.result, Records)
    assert (message.result.start_offset, message.result.end_offset) == (5, 12)
    assert message.result.frames == data
    gap = from_envelope(_records(5, 12, b""))  # nothing at all in the range: a gap
    assert isinstance(gap, FetchResponse) and isinstance(gap.result, Records)
    assert gap.result.end_offset == 12


def test_a_records_answer_with_matching_frames_is_accepted() -> None:
    message = from_envelope(_records(5, 7, frames.encode(5, [b"a", b"b"])))
    assert isinstance(message, FetchResponse) and isinstance(message.result, Records)
    assert (message.result.start_offset, message.result.end_offset) == (5, 7)


def test_frames_changed_on_the_way_are_refused_by_their_crc32c() -> None:
    data = frames.encode(41, [b"value-a", b"value-b"])
    message = FetchResponse(3, 1, 41, 2, Records(41, 43, (), 40, data))
    env = to_envelope("orders", 0, 1, message)
    assert env.fetch_response.records.HasField("frames_crc32c")
    assert from_envelope(pb.Envelope.FromString(env.SerializeToString())) == message
    for position in (len(data) - 1, 20, 12):  # a value byte, a value byte, a header byte
        bad = bytearray(data)
        bad[position] ^= 0x04
        env.fetch_response.records.frames = bytes(bad)
        with pytest.raises(ImpossibleMessage, match="CRC32C"):
            from_envelope(env)
    env.fetch_response.records.ClearField("frames_crc32c")  # an older sender: not checked
    env.fetch_response.records.frames = data
    assert from_envelope(env) == message


def test_a_timeout_now_round_trips_and_must_come_from_the_leader_it_names() -> None:
    message = TimeoutNow(epoch=4, leader_id=2)
    assert from_envelope(to_envelope("orders", 0, 2, message)) == message
    with pytest.raises(ImpossibleMessage):
        from_envelope(to_envelope("orders", 0, 3, message))
