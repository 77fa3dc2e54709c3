from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReplicaFetchRequest(_message.Message):
    __slots__ = ("topic", "partition", "replica_id", "epoch", "fetch_offset", "last_fetched_epoch", "max_bytes")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCHED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    replica_id: int
    epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_bytes: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replica_id: _Optional[int] = ..., epoch: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., last_fetched_epoch: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class EpochBoundary(_message.Message):
    __slots__ = ("epoch", "start_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start_offset: int
    def __init__(self, epoch: _Optional[int] = ..., start_offset: _Optional[int] = ...) -> None: ...

class ReplicaFetchResponse(_message.Message):
    __slots__ = ("topic", "partition", "epoch", "leader_id", "records", "diverging", "fenced")
    class Records(_message.Message):
        __slots__ = ("frames", "epochs", "high_watermark")
        FRAMES_FIELD_NUMBER: _ClassVar[int]
        EPOCHS_FIELD_NUMBER: _ClassVar[int]
        HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
        frames: bytes
        epochs: _containers.RepeatedCompositeFieldContainer[EpochBoundary]
        high_watermark: int
        def __init__(self, frames: _Optional[bytes] = ..., epochs: _Optional[_Iterable[_Union[EpochBoundary, _Mapping]]] = ..., high_watermark: _Optional[int] = ...) -> None: ...
    class Diverging(_message.Message):
        __slots__ = ("epoch", "end_offset")
        EPOCH_FIELD_NUMBER: _ClassVar[int]
        END_OFFSET_FIELD_NUMBER: _ClassVar[int]
        epoch: int
        end_offset: int
        def __init__(self, epoch: _Optional[int] = ..., end_offset: _Optional[int] = ...) -> None: ...
    class Fenced(_message.Message):
        __slots__ = ("epoch", "leader_id")
        EPOCH_FIELD_NUMBER: _ClassVar[int]
        LEADER_ID_FIELD_NUMBER: _ClassVar[int]
        epoch: int
        leader_id: int
        def __init__(self, epoch: _Optional[int] = ..., leader_id: _Optional[int] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    DIVERGING_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    epoch: int
    leader_id: int
    records: ReplicaFetchResponse.Records
    diverging: ReplicaFetchResponse.Diverging
    fenced: ReplicaFetchResponse.Fenced
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., epoch: _Optional[int] = ..., leader_id: _Optional[int] = ..., records: _Optional[_Union[ReplicaFetchResponse.Records, _Mapping]] = ..., diverging: _Optional[_Union[ReplicaFetchResponse.Diverging, _Mapping]] = ..., fenced: _Optional[_Union[ReplicaFetchResponse.Fenced, _Mapping]] = ...) -> None: ...

class VoteRequest(_message.Message):
    __slots__ = ("topic", "partition", "epoch", "candidate_id", "last_epoch", "log_end_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    epoch: int
    candidate_id: int
    last_epoch: int
    log_end_offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., epoch: _Optional[int] = ..., candidate_id: _Optional[int] = ..., last_epoch: _Optional[int] = ..., log_end_offset: _Optional[int] = ...) -> None: ...

class VoteResponse(_message.Message):
    __slots__ = ("epoch", "granted")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    granted: bool
    def __init__(self, epoch: _Optional[int] = ..., granted: _Optional[bool] = ...) -> None: ...

class LeaderEpochMarker(_message.Message):
    __slots__ = ("epoch", "leader_id", "voters")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    leader_id: int
    voters: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, epoch: _Optional[int] = ..., leader_id: _Optional[int] = ..., voters: _Optional[_Iterable[int]] = ...) -> None: ...
