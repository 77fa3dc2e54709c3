from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JoinRequest(_message.Message):
    __slots__ = ("node_id", "address", "peer_address")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    address: str
    peer_address: str
    def __init__(self, node_id: _Optional[int] = ..., address: _Optional[str] = ..., peer_address: _Optional[str] = ...) -> None: ...

class JoinResponse(_message.Message):
    __slots__ = ("members",)
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[Member]
    def __init__(self, members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ...) -> None: ...

class IdentifyRequest(_message.Message):
    __slots__ = ("node_id",)
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    def __init__(self, node_id: _Optional[int] = ...) -> None: ...

class IdentifyResponse(_message.Message):
    __slots__ = ("node_id", "directory_id", "deciding", "metadata_epoch", "metadata_end_offset", "replacement", "rack", "members", "metadata_membership_changed", "metadata_voters", "metadata_observers", "kafka_address", "founders")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    DECIDING_FIELD_NUMBER: _ClassVar[int]
    METADATA_EPOCH_FIELD_NUMBER: _ClassVar[int]
    METADATA_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REPLACEMENT_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    METADATA_MEMBERSHIP_CHANGED_FIELD_NUMBER: _ClassVar[int]
    METADATA_VOTERS_FIELD_NUMBER: _ClassVar[int]
    METADATA_OBSERVERS_FIELD_NUMBER: _ClassVar[int]
    KAFKA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    FOUNDERS_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    directory_id: str
    deciding: bool
    metadata_epoch: int
    metadata_end_offset: int
    replacement: bool
    rack: str
    members: _containers.RepeatedCompositeFieldContainer[Member]
    metadata_membership_changed: bool
    metadata_voters: _containers.RepeatedScalarFieldContainer[int]
    metadata_observers: _containers.RepeatedScalarFieldContainer[int]
    kafka_address: str
    founders: _containers.RepeatedCompositeFieldContainer[Founder]
    def __init__(self, node_id: _Optional[int] = ..., directory_id: _Optional[str] = ..., deciding: _Optional[bool] = ..., metadata_epoch: _Optional[int] = ..., metadata_end_offset: _Optional[int] = ..., replacement: _Optional[bool] = ..., rack: _Optional[str] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., metadata_membership_changed: _Optional[bool] = ..., metadata_voters: _Optional[_Iterable[int]] = ..., metadata_observers: _Optional[_Iterable[int]] = ..., kafka_address: _Optional[str] = ..., founders: _Optional[_Iterable[_Union[Founder, _Mapping]]] = ...) -> None: ...

class Founder(_message.Message):
    __slots__ = ("node_id", "directory_id")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    directory_id: str
    def __init__(self, node_id: _Optional[int] = ..., directory_id: _Optional[str] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ("id", "address", "peer_address")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    id: int
    address: str
    peer_address: str
    def __init__(self, id: _Optional[int] = ..., address: _Optional[str] = ..., peer_address: _Optional[str] = ...) -> None: ...
