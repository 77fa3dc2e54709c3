"""Replication messages of the core (`replog.replication.messages`) <-> protobuf `Envelope`s.

The one place that knows both shapes; see `proto/replog/v1/replication.proto`.
"""

from __future__ import annotations

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
from replog.v1 import replication_pb2 as pb


def to_envelope(topic: str, partition: int, from_id: int, message: Message) -> pb.Envelope:
    env = pb.Envelope(topic=topic, partition=partition, from_id=from_id)
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
            rec.boundaries.extend(
                pb.EpochBoundary(epoch=b.epoch, start_offset=b.start_offset)
                for b in result.boundaries
            )
        elif isinstance(result, Diverging):
            resp.diverging.epoch = result.epoch
            resp.diverging.end_offset = result.end_offset
        elif isinstance(result, StartAt):
            resp.start_at.offset = result.offset
            resp.start_at.history.extend(
                pb.EpochBoundary(epoch=b.epoch, start_offset=b.start_offset) for b in result.history
            )
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


def from_envelope(env: pb.Envelope) -> Message:
    kind = env.WhichOneof("message")
    if kind == "fetch_request":
        r = env.fetch_request
        return FetchRequest(r.epoch, r.replica_id, r.fetch_offset, r.last_fetched_epoch)
    if kind == "fetch_response":
        f = env.fetch_response
        which = f.WhichOneof("result")
        result: Records | Diverging | Fenced | StartAt
        if which == "records":
            rec = f.records
            result = Records(
                rec.start_offset,
                rec.end_offset,
                tuple(EpochStart(b.epoch, b.start_offset) for b in rec.boundaries),
                rec.high_watermark,
                rec.frames,
            )
        elif which == "diverging":
            result = Diverging(f.diverging.epoch, f.diverging.end_offset)
        elif which == "start_at":
            result = StartAt(
                f.start_at.offset,
                tuple(EpochStart(b.epoch, b.start_offset) for b in f.start_at.history),
            )
        elif which == "fenced":
            leader = f.fenced.leader_id if f.fenced.HasField("leader_id") else None
            result = Fenced(f.fenced.epoch, leader)
        else:
            raise ValueError("a ReplicaFetchResponse without a result")
        return FetchResponse(f.epoch, f.leader_id, f.fetch_offset, f.last_fetched_epoch, result)
    if kind == "vote_request":
        v = env.vote_request
        return VoteRequest(v.epoch, v.candidate_id, v.last_epoch, v.log_end_offset, v.pre_vote)
    if kind == "vote_response":
        answer = env.vote_response
        return VoteResponse(answer.epoch, answer.voter_id, answer.granted, answer.pre_vote)
    if kind == "begin_epoch":
        return BeginEpoch(env.begin_epoch.epoch, env.begin_epoch.leader_id)
    if kind == "timeout_now":
        t = env.timeout_now
        return TimeoutNow(t.epoch, t.leader_id)
    raise ValueError(f"an Envelope without a message ({kind})")
