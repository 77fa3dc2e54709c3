"""Every replication message survives the trip through its protobuf envelope unchanged."""

from __future__ import annotations

import pytest

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
    VoteRequest,
    VoteResponse,
)
from replog.server.replication_codec import from_envelope, to_envelope
from replog.v1 import replication_pb2 as pb

MESSAGES: list[Message] = [
    FetchRequest(epoch=3, replica_id=2, fetch_offset=41, last_fetched_epoch=2),
    FetchResponse(
        3, 1, 41, 2, Records(41, 43, (EpochStart(3, 42),), 40, b"\x00" * 12 + b"\x00" * 13)
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
    env = to_envelope("orders", 7, 2, message)
    wire = pb.Envelope.FromString(env.SerializeToString())
    assert (wire.topic, wire.partition, wire.from_id) == ("orders", 7, 2)
    assert from_envelope(wire) == message
