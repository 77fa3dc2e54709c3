from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class IdentifyRequest(_message.Message):
    __slots__ = ("node_id",)
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    def __init__(self, node_id: _Optional[int] = ...) -> None: ...

class IdentifyResponse(_message.Message):
    __slots__ = ("node_id", "directory_id", "deciding", "metadata_epoch", "metadata_end_offset", "replacement", "rack")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    DECIDING_FIELD_NUMBER: _ClassVar[int]
    METADATA_EPOCH_FIELD_NUMBER: _ClassVar[int]
    METADATA_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REPLACEMENT_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    directory_id: str
    deciding: bool
    metadata_epoch: int
    metadata_end_offset: int
    replacement: bool
    rack: str
    def __init__(self, node_id: _Optional[int] = ..., directory_id: _Optional[str] = ..., deciding: _Optional[bool] = ..., metadata_epoch: _Optional[int] = ..., metadata_end_offset: _Optional[int] = ..., replacement: _Optional[bool] = ..., rack: _Optional[str] = ...) -> None: ...
