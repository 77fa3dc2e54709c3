"""Membership entries and the candidate's membership offset cross the wire unchanged, and
an impossible membership is refused before it reaches a replica."""

from __future__ import annotations

import pytest

from replog import frames
from replog.replication import Membership, MembershipEntry
from replog.replication.epochs import EpochStart
from replog.replication.messages import FetchResponse, Message, Records, StartAt, VoteRequest
from replog.server.peering.replication_codec import ImpossibleMessage, from_envelope, to_envelope

ENTRY = MembershipEntry(42, Membership((1, 2, 4), (3,)))
DATA = frames.encode(41, [b"", b"x"])


@pytest.mark.parametrize(
    "message",
    [
        FetchResponse(3, 1, 41, 2, Records(41, 43, (EpochStart(3, 42),), 40, DATA, (ENTRY,))),
        FetchResponse(3, 1, 0, 0, StartAt(500, (EpochStart(1, 0),), (ENTRY,))),
        VoteRequest(5, 2, 4, 100, False, 42),
        VoteRequest(5, 2, 4, 100, True, 0),
        VoteRequest(5, 2, 4, 100),  # no membership record: the field stays absent
    ],
    ids=["records", "start-at", "vote", "pre-vote-at-0", "vote-none"],
)
def test_membership_fields_decode_to_what_was_encoded(message: Message) -> None:
    sender = message.candidate_id if isinstance(message, VoteRequest) else 1
    envelope = to_envelope("t", 0, sender, message)
    assert from_envelope(envelope) == message
    if isinstance(message, VoteRequest) and message.membership_offset < 0:
        assert not envelope.vote_request.HasField("membership_offset")


@pytest.mark.parametrize(
    "entry",
    [
        MembershipEntry(44, Membership((1,), ())),  # outside the records [41, 43)
        MembershipEntry(42, Membership((), (3,))),  # no voter
        MembershipEntry(42, Membership((1, 2), (2,))),  # in both sets
        MembershipEntry(42, Membership((1, 1), ())),  # a duplicate
    ],
    ids=["outside", "no-voter", "both-sets", "duplicate"],
)
def test_an_impossible_membership_is_refused(entry: MembershipEntry) -> None:
    message = FetchResponse(3, 1, 41, 2, Records(41, 43, (), 40, DATA, (entry,)))
    with pytest.raises(ImpossibleMessage):
        from_envelope(to_envelope("t", 0, 1, message))


def test_a_start_at_membership_must_lie_below_the_offset_it_starts_at() -> None:
    message = FetchResponse(3, 1, 0, 0, StartAt(42, (), (ENTRY,)))
    with pytest.raises(ImpossibleMessage):
        from_envelope(to_envelope("t", 0, 1, message))
