from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Acks(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACKS_UNSPECIFIED: _ClassVar[Acks]
    ACKS_NONE: _ClassVar[Acks]
    ACKS_LEADER: _ClassVar[Acks]
    ACKS_ALL: _ClassVar[Acks]
ACKS_UNSPECIFIED: Acks
ACKS_NONE: Acks
ACKS_LEADER: Acks
ACKS_ALL: Acks

class AppendRequest(_message.Message):
    __slots__ = ("topic", "partition", "values", "acks", "producer_id", "producer_epoch", "base_sequence")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BASE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    values: _containers.RepeatedScalarFieldContainer[bytes]
    acks: Acks
    producer_id: int
    producer_epoch: int
    base_sequence: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., values: _Optional[_Iterable[bytes]] = ..., acks: _Optional[_Union[Acks, str]] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., base_sequence: _Optional[int] = ...) -> None: ...

class InitProducerRequest(_message.Message):
    __slots__ = ("name", "resume", "reserve_block")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    RESERVE_BLOCK_FIELD_NUMBER: _ClassVar[int]
    name: str
    resume: bool
    reserve_block: bool
    def __init__(self, name: _Optional[str] = ..., resume: _Optional[bool] = ..., reserve_block: _Optional[bool] = ...) -> None: ...

class InitProducerResponse(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "block_ids")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    block_ids: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., block_ids: _Optional[int] = ...) -> None: ...

class AppendResponse(_message.Message):
    __slots__ = ("base_offset", "last_offset", "high_watermark")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    last_offset: int
    high_watermark: int
    def __init__(self, base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ...) -> None: ...

class AppendStreamResponse(_message.Message):
    __slots__ = ("base_offset", "last_offset", "high_watermark", "error")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    last_offset: int
    high_watermark: int
    error: AppendError
    def __init__(self, base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., error: _Optional[_Union[AppendError, _Mapping]] = ...) -> None: ...

class AppendError(_message.Message):
    __slots__ = ("code", "reason", "message", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    code: int
    reason: str
    message: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, code: _Optional[int] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset", "max_bytes", "max_wait_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    max_bytes: int
    max_wait_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ..., max_wait_ms: _Optional[int] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("frames", "high_watermark", "log_start_offset", "next_offset")
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    frames: bytes
    high_watermark: int
    log_start_offset: int
    next_offset: int
    def __init__(self, frames: _Optional[bytes] = ..., high_watermark: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., next_offset: _Optional[int] = ...) -> None: ...

class StreamFromRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset", "max_bytes")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    max_bytes: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class StreamBatch(_message.Message):
    __slots__ = ("frames", "high_watermark", "log_start_offset", "next_offset")
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    frames: bytes
    high_watermark: int
    log_start_offset: int
    next_offset: int
    def __init__(self, frames: _Optional[bytes] = ..., high_watermark: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., next_offset: _Optional[int] = ...) -> None: ...
