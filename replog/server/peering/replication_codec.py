"""Replication messages of the core (`replog.replication.messages`) <-> protobuf `Envelope`s.

The one place that knows both shapes; see `proto/replog/v1/replication.proto`.

The wire is hostile, even from a member: `from_envelope` range-checks every number before
it becomes a core message (the core does arithmetic on them, persists epochs and asserts
its invariants) and raises `ImpossibleMessage` (a `ValueError`) for anything no correct
node sends:

    epochs             0 <= epoch <= EPOCH_MAX (2^31 - 1, Kafka's int32 leader epochs)
    offsets            0 <= offset <= OFFSET_MAX (2^62: room for any sum of two)
    node ids           id <= NODE_ID_MAX, and the sender's own id where the message
                       names its sender (replica_id, candidate_id, voter_id, leader_id)
    last epochs        last_fetched_epoch, last_epoch <= epoch (nobody holds a future epoch)
    records            frames match frames_crc32c (when sent: a follower never appends bytes
                       that changed on the way); start_offset == fetch_offset <= end_offset;
                       boundaries strictly
                       increasing in epoch (<= epoch) and inside [start, end); frames are
                       whole, with offsets strictly ascending inside [start, end): a
                       range the leader's log cleaner compacted has gaps (none of its
                       offsets is missing from the leader's log but for those the cleaner
                       dropped), and may end before `end` (the leader holds nothing
                       between its last frame and `end`)
    diverging          epoch <= last_fetched_epoch
    memberships        offsets strictly increasing (inside [start, end) in records,
                       below the offset in start_at), node ids in range, each a valid
                       membership (a voter, no duplicate, no replica in both sets)
"""

from __future__ import annotations

from collections.abc import Iterable

import google_crc32c

from replog import frames
from replog.replication.epochs import EpochStart
from replog.replication.membership import Membership, MembershipEntry
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
from replog.replication.state import EPOCH_MAX, NODE_ID_MAX, OFFSET_MAX
from replog.v1 import replication_pb2 as pb


def to_envelope(
    topic: str, partition: int, from_id: int, message: Message, topic_id: int = 0
) -> pb.Envelope:
    env = pb.Envelope(topic=topic, partition=partition, from_id=from_id, topic_id=topic_id)
    if isinstance(message, FetchRequest):
        env.fetch_request.CopyFrom(
            pb.ReplicaFetchRequest(
                epoch=message.epoch,
                replica_id=message.replica_id,
                fetch_offset=message.fetch_offset,
                last_fetched_epoch=message.last_fetched_epoch,
            )
        )
    elif isinstance(message, FetchResponse):
        resp = env.fetch_response
        resp.epoch = message.epoch
        resp.leader_id = message.leader_id
        resp.fetch_offset = message.fetch_offset
        resp.last_fetched_epoch = message.last_fetched_epoch
        result = message.result
        if isinstance(result, Records):
            rec = resp.records
            rec.start_offset = result.start_offset
            rec.end_offset = result.end_offset
            rec.high_watermark = result.high_watermark
            rec.frames = result.frames
            if result.frames:
                rec.frames_crc32c = google_crc32c.value(result.frames)
            rec.boundaries.extend(
                pb.EpochBoundary(epoch=b.epoch, start_offset=b.start_offset)
                for b in result.boundaries
            )
            rec.memberships.extend(map(_membership_entry, result.memberships))
        elif isinstance(result, Diverging):
            resp.diverging.epoch = result.epoch
            resp.diverging.end_offset = result.end_offset
        elif isinstance(result, StartAt):
            resp.start_at.offset = result.offset
            resp.start_at.history.extend(
                pb.EpochBoundary(epoch=b.epoch, start_offset=b.start_offset) for b in result.history
            )
            resp.start_at.memberships.extend(map(_membership_entry, result.memberships))
        else:
            resp.fenced.epoch = result.epoch
            if result.leader_id is not None:
                resp.fenced.leader_id = result.leader_id
    elif isinstance(message, VoteRequest):
        env.vote_request.CopyFrom(
            pb.VoteRequest(
                epoch=message.epoch,
                candidate_id=message.candidate_id,
                last_epoch=message.last_epoch,
                log_end_offset=message.log_end_offset,
                pre_vote=message.pre_vote,
            )
        )
        if message.membership_offset >= 0:
            env.vote_request.membership_offset = message.membership_offset
    elif isinstance(message, VoteResponse):
        env.vote_response.CopyFrom(
            pb.VoteResponse(
                epoch=message.epoch,
                voter_id=message.voter_id,
                granted=message.granted,
                pre_vote=message.pre_vote,
            )
        )
    elif isinstance(message, TimeoutNow):
        env.timeout_now.CopyFrom(pb.TimeoutNow(epoch=message.epoch, leader_id=message.leader_id))
    else:
        env.begin_epoch.CopyFrom(pb.BeginEpoch(epoch=message.epoch, leader_id=message.leader_id))
    return env


def _membership_entry(entry: MembershipEntry) -> pb.MembershipEntry:
    m = entry.membership
    return pb.MembershipEntry(offset=entry.offset, voters=m.voters, observers=m.observers)


class ImpossibleMessage(ValueError):
    """An envelope no correct node sends; dropped (and logged) by the transport."""


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise ImpossibleMessage(what)


def _epoch(value: int, what: str) -> int:
    _check(0 <= value <= EPOCH_MAX, f"{what} {value} out of range")
    return value


def _offset(value: int, what: str) -> int:
    _check(0 <= value <= OFFSET_MAX, f"{what} {value} out of range")
    return value


def _sender(value: int, sender: int, what: str) -> int:
    _check(value == sender, f"{what} {value} is not the sender {sender}")
    return value


def _history(entries: Iterable[pb.EpochBoundary], epoch_max: int) -> tuple[EpochStart, ...]:
    out: list[EpochStart] = []
    for b in entries:
        e, start = _epoch(b.epoch, "boundary epoch"), _offset(b.start_offset, "boundary offset")
        _check(e <= epoch_max, f"boundary epoch {e} after the message's epoch {epoch_max}")
        if out:
            _check(e > out[-1].epoch and start >= out[-1].start_offset, "boundaries out of order")
        out.append(EpochStart(e, start))
    return tuple(out)


def _memberships(
    entries: Iterable[pb.MembershipEntry], start: int, end: int
) -> tuple[MembershipEntry, ...]:
    out: list[MembershipEntry] = []
    for e in entries:
        offset = _offset(e.offset, "membership offset")
        _check(start <= offset < end, "a membership outside its range")
        _check(not out or offset > out[-1].offset, "memberships out of order")
        _check(all(i <= NODE_ID_MAX for i in (*e.voters, *e.observers)), "member id out of range")
        membership = Membership(tuple(e.voters), tuple(e.observers))
        _check(membership.problem() is None, f"invalid membership {membership}")
        out.append(MembershipEntry(offset, membership))
    return tuple(out)


def from_envelope(env: pb.Envelope) -> Message:
    """The core message of `env`, checked (see the module docstring); `ImpossibleMessage`
    for anything out of range."""
    sender = env.from_id
    _check(sender <= NODE_ID_MAX, f"sender id {sender} out of range")
    kind = env.WhichOneof("message")
    if kind == "fetch_request":
        r = env.fetch_request
        epoch = _epoch(r.epoch, "epoch")
        last = _epoch(r.last_fetched_epoch, "last_fetched_epoch")
        _check(last <= epoch, "last_fetched_epoch after epoch")
        return FetchRequest(
            epoch,
            _sender(r.replica_id, sender, "replica_id"),
            _offset(r.fetch_offset, "fetch_offset"),
            last,
        )
    if kind == "fetch_response":
        return _fetch_response(env.fetch_response, sender)
    if kind == "vote_request":
        v = env.vote_request
        epoch = _epoch(v.epoch, "epoch")
        last = _epoch(v.last_epoch, "last_epoch")
        _check(last <= epoch, "last_epoch after epoch")
        return VoteRequest(
            epoch,
            _sender(v.candidate_id, sender, "candidate_id"),
            last,
            _offset(v.log_end_offset, "log_end_offset"),
            v.pre_vote,
            _offset(v.membership_offset, "membership_offset")
            if v.HasField("membership_offset")
            else -1,
        )
    if kind == "vote_response":
        answer = env.vote_response
        return VoteResponse(
            _epoch(answer.epoch, "epoch"),
            _sender(answer.voter_id, sender, "voter_id"),
            answer.granted,
            answer.pre_vote,
        )
    if kind == "begin_epoch":
        b = env.begin_epoch
        return BeginEpoch(_epoch(b.epoch, "epoch"), _sender(b.leader_id, sender, "leader_id"))
    if kind == "timeout_now":
        t = env.timeout_now
        return TimeoutNow(_epoch(t.epoch, "epoch"), _sender(t.leader_id, sender, "leader_id"))
    raise ImpossibleMessage(f"an Envelope without a message ({kind})")


def _fetch_response(f: pb.ReplicaFetchResponse, sender: int) -> FetchResponse:
    epoch = _epoch(f.epoch, "epoch")
    fetch_offset = _offset(f.fetch_offset, "fetch_offset")
    last = _epoch(f.last_fetched_epoch, "last_fetched_epoch")
    which = f.WhichOneof("result")
    result: Records | Diverging | Fenced | StartAt
    if which == "records":
        result = _records(f.records, epoch, fetch_offset)
    elif which == "diverging":
        d_epoch = _epoch(f.diverging.epoch, "diverging epoch")
        _check(d_epoch <= last, "diverging epoch after last_fetched_epoch")
        result = Diverging(d_epoch, _offset(f.diverging.end_offset, "diverging end_offset"))
    elif which == "start_at":
        offset = _offset(f.start_at.offset, "start_at offset")
        result = StartAt(
            offset,
            _history(f.start_at.history, epoch),
            _memberships(f.start_at.memberships, 0, offset),
        )
    elif which == "fenced":
        leader = f.fenced.leader_id if f.fenced.HasField("leader_id") else None
        _check(leader is None or leader <= NODE_ID_MAX, "fenced leader_id out of range")
        result = Fenced(_epoch(f.fenced.epoch, "fenced epoch"), leader)
    else:
        raise ImpossibleMessage("a ReplicaFetchResponse without a result")
    return FetchResponse(
        epoch, _sender(f.leader_id, sender, "leader_id"), fetch_offset, last, result
    )


def _records(rec: pb.ReplicaFetchResponse.Records, epoch: int, fetch_offset: int) -> Records:
    start = _offset(rec.start_offset, "start_offset")
    end = _offset(rec.end_offset, "end_offset")
    _check(start == fetch_offset and start <= end, "records not at the fetch offset")
    boundaries = _history(rec.boundaries, epoch)
    _check(
        all(start <= b.start_offset < end for b in boundaries),
        "a boundary outside the records",
    )
    if rec.HasField("frames_crc32c"):
        crc = google_crc32c.value(rec.frames) if rec.frames else 0
        _check(crc == rec.frames_crc32c, "frames do not match their CRC32C")
    try:  # (offset gaps: a range the leader's cleaner compacted, `storage/cleaner.py`)
        frames.scan_ascending(rec.frames, start, end)
    except frames.FrameError as exc:
        raise ImpossibleMessage(f"frames: {exc}") from None
    return Records(
        start,
        end,
        boundaries,
        _offset(rec.high_watermark, "high_watermark"),
        rec.frames,
        _memberships(rec.memberships, start, end),
    )
