from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TopicPartition(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class FindCoordinatorRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class FindCoordinatorResponse(_message.Message):
    __slots__ = ("node_id", "address", "partition")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    address: str
    partition: int
    def __init__(self, node_id: _Optional[int] = ..., address: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class JoinGroupRequest(_message.Message):
    __slots__ = ("group", "topics", "session_timeout_ms", "rebalance_timeout_ms", "client_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    def __init__(self, group: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ..., client_id: _Optional[str] = ...) -> None: ...

class JoinGroupResponse(_message.Message):
    __slots__ = ("member_id", "generation", "partitions", "heartbeat_interval_ms", "session_timeout_ms", "reconciling")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    RECONCILING_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    generation: int
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    heartbeat_interval_ms: int
    session_timeout_ms: int
    reconciling: bool
    def __init__(self, member_id: _Optional[str] = ..., generation: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ..., heartbeat_interval_ms: _Optional[int] = ..., session_timeout_ms: _Optional[int] = ..., reconciling: _Optional[bool] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group", "member_id", "generation", "owned")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    generation: int
    owned: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., owned: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("generation", "partitions", "heartbeat_interval_ms", "reconciling")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    RECONCILING_FIELD_NUMBER: _ClassVar[int]
    generation: int
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    heartbeat_interval_ms: int
    reconciling: bool
    def __init__(self, generation: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ..., heartbeat_interval_ms: _Optional[int] = ..., reconciling: _Optional[bool] = ...) -> None: ...

class LeaveGroupRequest(_message.Message):
    __slots__ = ("group", "member_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ...) -> None: ...

class LeaveGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class OffsetCommit(_message.Message):
    __slots__ = ("topic", "partition", "offset", "metadata")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    metadata: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ...) -> None: ...

class CommitOffsetsRequest(_message.Message):
    __slots__ = ("group", "member_id", "generation", "offsets")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    generation: int
    offsets: _containers.RepeatedCompositeFieldContainer[OffsetCommit]
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., offsets: _Optional[_Iterable[_Union[OffsetCommit, _Mapping]]] = ...) -> None: ...

class CommitOffsetsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FetchCommittedOffsetsRequest(_message.Message):
    __slots__ = ("group", "partitions")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    group: str
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    def __init__(self, group: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ...) -> None: ...

class CommittedOffset(_message.Message):
    __slots__ = ("topic", "partition", "offset", "metadata", "commit_time_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    metadata: str
    commit_time_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ..., commit_time_ms: _Optional[int] = ...) -> None: ...

class FetchCommittedOffsetsResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[CommittedOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[CommittedOffset, _Mapping]]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GroupSummary(_message.Message):
    __slots__ = ("group", "state", "members", "generation", "coordinator_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    state: str
    members: int
    generation: int
    coordinator_id: int
    def __init__(self, group: _Optional[str] = ..., state: _Optional[str] = ..., members: _Optional[int] = ..., generation: _Optional[int] = ..., coordinator_id: _Optional[int] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups", "partitions")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupSummary]
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupSummary, _Mapping]]] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class DescribeGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class MemberDescription(_message.Message):
    __slots__ = ("member_id", "client_id", "client_host", "topics", "partitions", "target", "generation", "session_timeout_ms", "last_heartbeat_ms_ago")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_AGO_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    client_id: str
    client_host: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    target: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    generation: int
    session_timeout_ms: int
    last_heartbeat_ms_ago: int
    def __init__(self, member_id: _Optional[str] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., partitions: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ..., target: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ..., generation: _Optional[int] = ..., session_timeout_ms: _Optional[int] = ..., last_heartbeat_ms_ago: _Optional[int] = ...) -> None: ...

class PartitionLag(_message.Message):
    __slots__ = ("topic", "partition", "committed_offset", "metadata", "commit_time_ms", "high_watermark", "lag", "member_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    committed_offset: int
    metadata: str
    commit_time_ms: int
    high_watermark: int
    lag: int
    member_id: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., committed_offset: _Optional[int] = ..., metadata: _Optional[str] = ..., commit_time_ms: _Optional[int] = ..., high_watermark: _Optional[int] = ..., lag: _Optional[int] = ..., member_id: _Optional[str] = ...) -> None: ...

class DescribeGroupResponse(_message.Message):
    __slots__ = ("group", "state", "generation", "coordinator_id", "members", "partitions")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    group: str
    state: str
    generation: int
    coordinator_id: int
    members: _containers.RepeatedCompositeFieldContainer[MemberDescription]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionLag]
    def __init__(self, group: _Optional[str] = ..., state: _Optional[str] = ..., generation: _Optional[int] = ..., coordinator_id: _Optional[int] = ..., members: _Optional[_Iterable[_Union[MemberDescription, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[PartitionLag, _Mapping]]] = ...) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class DeleteGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
