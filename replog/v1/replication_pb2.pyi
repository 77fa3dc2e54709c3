from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LeaderNews(_message.Message):
    __slots__ = ("entries", "incarnation")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[LeaderEntry]
    incarnation: int
    def __init__(self, entries: _Optional[_Iterable[_Union[LeaderEntry, _Mapping]]] = ..., incarnation: _Optional[int] = ...) -> None: ...

class LeaderEntry(_message.Message):
    __slots__ = ("topic", "topic_id", "partition", "epoch", "leader_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    topic_id: int
    partition: int
    epoch: int
    leader_id: int
    def __init__(self, topic: _Optional[str] = ..., topic_id: _Optional[int] = ..., partition: _Optional[int] = ..., epoch: _Optional[int] = ..., leader_id: _Optional[int] = ...) -> None: ...

class LeaderNewsAck(_message.Message):
    __slots__ = ("accepted", "incarnation")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    incarnation: int
    def __init__(self, accepted: _Optional[int] = ..., incarnation: _Optional[int] = ...) -> None: ...

class Envelopes(_message.Message):
    __slots__ = ("envelopes",)
    ENVELOPES_FIELD_NUMBER: _ClassVar[int]
    envelopes: _containers.RepeatedCompositeFieldContainer[Envelope]
    def __init__(self, envelopes: _Optional[_Iterable[_Union[Envelope, _Mapping]]] = ...) -> None: ...

class Envelope(_message.Message):
    __slots__ = ("topic", "partition", "from_id", "fetch_request", "fetch_response", "vote_request", "vote_response", "begin_epoch", "timeout_now", "topic_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FROM_ID_FIELD_NUMBER: _ClassVar[int]
    FETCH_REQUEST_FIELD_NUMBER: _ClassVar[int]
    FETCH_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    VOTE_REQUEST_FIELD_NUMBER: _ClassVar[int]
    VOTE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    BEGIN_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_NOW_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    from_id: int
    fetch_request: ReplicaFetchRequest
    fetch_response: ReplicaFetchResponse
    vote_request: VoteRequest
    vote_response: VoteResponse
    begin_epoch: BeginEpoch
    timeout_now: TimeoutNow
    topic_id: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., from_id: _Optional[int] = ..., fetch_request: _Optional[_Union[ReplicaFetchRequest, _Mapping]] = ..., fetch_response: _Optional[_Union[ReplicaFetchResponse, _Mapping]] = ..., vote_request: _Optional[_Union[VoteRequest, _Mapping]] = ..., vote_response: _Optional[_Union[VoteResponse, _Mapping]] = ..., begin_epoch: _Optional[_Union[BeginEpoch, _Mapping]] = ..., timeout_now: _Optional[_Union[TimeoutNow, _Mapping]] = ..., topic_id: _Optional[int] = ...) -> None: ...

class ExchangeSummary(_message.Message):
    __slots__ = ("envelopes",)
    ENVELOPES_FIELD_NUMBER: _ClassVar[int]
    envelopes: int
    def __init__(self, envelopes: _Optional[int] = ...) -> None: ...

class ReplicaFetchRequest(_message.Message):
    __slots__ = ("epoch", "replica_id", "fetch_offset", "last_fetched_epoch")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCHED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    replica_id: int
    fetch_offset: int
    last_fetched_epoch: int
    def __init__(self, epoch: _Optional[int] = ..., replica_id: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., last_fetched_epoch: _Optional[int] = ...) -> None: ...

class MembershipEntry(_message.Message):
    __slots__ = ("offset", "voters", "observers")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    OBSERVERS_FIELD_NUMBER: _ClassVar[int]
    offset: int
    voters: _containers.RepeatedScalarFieldContainer[int]
    observers: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, offset: _Optional[int] = ..., voters: _Optional[_Iterable[int]] = ..., observers: _Optional[_Iterable[int]] = ...) -> None: ...

class EpochBoundary(_message.Message):
    __slots__ = ("epoch", "start_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start_offset: int
    def __init__(self, epoch: _Optional[int] = ..., start_offset: _Optional[int] = ...) -> None: ...

class ReplicaFetchResponse(_message.Message):
    __slots__ = ("epoch", "leader_id", "fetch_offset", "last_fetched_epoch", "records", "diverging", "fenced", "start_at")
    class Records(_message.Message):
        __slots__ = ("start_offset", "end_offset", "boundaries", "high_watermark", "frames", "frames_crc32c", "memberships")
        START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        END_OFFSET_FIELD_NUMBER: _ClassVar[int]
        BOUNDARIES_FIELD_NUMBER: _ClassVar[int]
        HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
        FRAMES_FIELD_NUMBER: _ClassVar[int]
        FRAMES_CRC32C_FIELD_NUMBER: _ClassVar[int]
        MEMBERSHIPS_FIELD_NUMBER: _ClassVar[int]
        start_offset: int
        end_offset: int
        boundaries: _containers.RepeatedCompositeFieldContainer[EpochBoundary]
        high_watermark: int
        frames: bytes
        frames_crc32c: int
        memberships: _containers.RepeatedCompositeFieldContainer[MembershipEntry]
        def __init__(self, start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., boundaries: _Optional[_Iterable[_Union[EpochBoundary, _Mapping]]] = ..., high_watermark: _Optional[int] = ..., frames: _Optional[bytes] = ..., frames_crc32c: _Optional[int] = ..., memberships: _Optional[_Iterable[_Union[MembershipEntry, _Mapping]]] = ...) -> None: ...
    class Diverging(_message.Message):
        __slots__ = ("epoch", "end_offset")
        EPOCH_FIELD_NUMBER: _ClassVar[int]
        END_OFFSET_FIELD_NUMBER: _ClassVar[int]
        epoch: int
        end_offset: int
        def __init__(self, epoch: _Optional[int] = ..., end_offset: _Optional[int] = ...) -> None: ...
    class StartAt(_message.Message):
        __slots__ = ("offset", "history", "memberships")
        OFFSET_FIELD_NUMBER: _ClassVar[int]
        HISTORY_FIELD_NUMBER: _ClassVar[int]
        MEMBERSHIPS_FIELD_NUMBER: _ClassVar[int]
        offset: int
        history: _containers.RepeatedCompositeFieldContainer[EpochBoundary]
        memberships: _containers.RepeatedCompositeFieldContainer[MembershipEntry]
        def __init__(self, offset: _Optional[int] = ..., history: _Optional[_Iterable[_Union[EpochBoundary, _Mapping]]] = ..., memberships: _Optional[_Iterable[_Union[MembershipEntry, _Mapping]]] = ...) -> None: ...
    class Fenced(_message.Message):
        __slots__ = ("epoch", "leader_id")
        EPOCH_FIELD_NUMBER: _ClassVar[int]
        LEADER_ID_FIELD_NUMBER: _ClassVar[int]
        epoch: int
        leader_id: int
        def __init__(self, epoch: _Optional[int] = ..., leader_id: _Optional[int] = ...) -> None: ...
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCHED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    DIVERGING_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    START_AT_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    leader_id: int
    fetch_offset: int
    last_fetched_epoch: int
    records: ReplicaFetchResponse.Records
    diverging: ReplicaFetchResponse.Diverging
    fenced: ReplicaFetchResponse.Fenced
    start_at: ReplicaFetchResponse.StartAt
    def __init__(self, epoch: _Optional[int] = ..., leader_id: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., last_fetched_epoch: _Optional[int] = ..., records: _Optional[_Union[ReplicaFetchResponse.Records, _Mapping]] = ..., diverging: _Optional[_Union[ReplicaFetchResponse.Diverging, _Mapping]] = ..., fenced: _Optional[_Union[ReplicaFetchResponse.Fenced, _Mapping]] = ..., start_at: _Optional[_Union[ReplicaFetchResponse.StartAt, _Mapping]] = ...) -> None: ...

class VoteRequest(_message.Message):
    __slots__ = ("epoch", "candidate_id", "last_epoch", "log_end_offset", "pre_vote", "membership_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    candidate_id: int
    last_epoch: int
    log_end_offset: int
    pre_vote: bool
    membership_offset: int
    def __init__(self, epoch: _Optional[int] = ..., candidate_id: _Optional[int] = ..., last_epoch: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., pre_vote: _Optional[bool] = ..., membership_offset: _Optional[int] = ...) -> None: ...

class VoteResponse(_message.Message):
    __slots__ = ("epoch", "voter_id", "granted", "pre_vote")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    VOTER_ID_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    voter_id: int
    granted: bool
    pre_vote: bool
    def __init__(self, epoch: _Optional[int] = ..., voter_id: _Optional[int] = ..., granted: _Optional[bool] = ..., pre_vote: _Optional[bool] = ...) -> None: ...

class BeginEpoch(_message.Message):
    __slots__ = ("epoch", "leader_id")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    leader_id: int
    def __init__(self, epoch: _Optional[int] = ..., leader_id: _Optional[int] = ...) -> None: ...

class TimeoutNow(_message.Message):
    __slots__ = ("epoch", "leader_id")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    leader_id: int
    def __init__(self, epoch: _Optional[int] = ..., leader_id: _Optional[int] = ...) -> None: ...

class LeaderEpochMarker(_message.Message):
    __slots__ = ("epoch", "leader_id", "voters")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    leader_id: int
    voters: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, epoch: _Optional[int] = ..., leader_id: _Optional[int] = ..., voters: _Optional[_Iterable[int]] = ...) -> None: ...

class MembershipChange(_message.Message):
    __slots__ = ("voters", "observers")
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    OBSERVERS_FIELD_NUMBER: _ClassVar[int]
    voters: _containers.RepeatedScalarFieldContainer[int]
    observers: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, voters: _Optional[_Iterable[int]] = ..., observers: _Optional[_Iterable[int]] = ...) -> None: ...
