from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TopicFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOPIC_FORMAT_UNSPECIFIED: _ClassVar[TopicFormat]
    TOPIC_FORMAT_RAW: _ClassVar[TopicFormat]
    TOPIC_FORMAT_ENVELOPE: _ClassVar[TopicFormat]

class TimestampType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIMESTAMP_TYPE_UNSPECIFIED: _ClassVar[TimestampType]
    TIMESTAMP_TYPE_CREATE_TIME: _ClassVar[TimestampType]
    TIMESTAMP_TYPE_LOG_APPEND_TIME: _ClassVar[TimestampType]
TOPIC_FORMAT_UNSPECIFIED: TopicFormat
TOPIC_FORMAT_RAW: TopicFormat
TOPIC_FORMAT_ENVELOPE: TopicFormat
TIMESTAMP_TYPE_UNSPECIFIED: TimestampType
TIMESTAMP_TYPE_CREATE_TIME: TimestampType
TIMESTAMP_TYPE_LOG_APPEND_TIME: TimestampType

class CreatePartitionsRequest(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: int
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[int] = ...) -> None: ...

class CreatePartitionsResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: int
    def __init__(self, partitions: _Optional[int] = ...) -> None: ...

class DescribeConfigsRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class ConfigEntry(_message.Message):
    __slots__ = ("name", "value", "source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    source: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class DescribeConfigsResponse(_message.Message):
    __slots__ = ("configs",)
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    configs: _containers.RepeatedCompositeFieldContainer[ConfigEntry]
    def __init__(self, configs: _Optional[_Iterable[_Union[ConfigEntry, _Mapping]]] = ...) -> None: ...

class AlterConfigsRequest(_message.Message):
    __slots__ = ("topic", "set", "delete")
    class SetEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    set: _containers.ScalarMap[str, str]
    delete: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[str] = ..., set: _Optional[_Mapping[str, str]] = ..., delete: _Optional[_Iterable[str]] = ...) -> None: ...

class AlterConfigsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AddNodeRequest(_message.Message):
    __slots__ = ("node_id", "address", "peer_address")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    address: str
    peer_address: str
    def __init__(self, node_id: _Optional[int] = ..., address: _Optional[str] = ..., peer_address: _Optional[str] = ...) -> None: ...

class AddNodeResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    def __init__(self, nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ...) -> None: ...

class RemoveNodeRequest(_message.Message):
    __slots__ = ("node_id",)
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    def __init__(self, node_id: _Optional[int] = ...) -> None: ...

class RemoveNodeResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    def __init__(self, nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("name", "partitions", "replication_factor", "format", "timestamp_type", "configs")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    replication_factor: int
    format: TopicFormat
    timestamp_type: TimestampType
    configs: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., format: _Optional[_Union[TopicFormat, str]] = ..., timestamp_type: _Optional[_Union[TimestampType, str]] = ..., configs: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TopicSummary(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicSummary]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicSummary, _Mapping]]] = ...) -> None: ...

class DescribeTopicRequest(_message.Message):
    __slots__ = ("name", "first_partition", "partitions_max")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FIRST_PARTITION_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_MAX_FIELD_NUMBER: _ClassVar[int]
    name: str
    first_partition: int
    partitions_max: int
    def __init__(self, name: _Optional[str] = ..., first_partition: _Optional[int] = ..., partitions_max: _Optional[int] = ...) -> None: ...

class PartitionDescription(_message.Message):
    __slots__ = ("partition", "replicas", "leader_id", "log_start_offset", "log_end_offset", "high_watermark", "size_bytes", "segment_count", "epoch", "replica_status", "corrupt_ranges", "target_replicas", "reassignment_step", "reassignment_error", "observers")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICA_STATUS_FIELD_NUMBER: _ClassVar[int]
    CORRUPT_RANGES_FIELD_NUMBER: _ClassVar[int]
    TARGET_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REASSIGNMENT_STEP_FIELD_NUMBER: _ClassVar[int]
    REASSIGNMENT_ERROR_FIELD_NUMBER: _ClassVar[int]
    OBSERVERS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    leader_id: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
    segment_count: int
    epoch: int
    replica_status: _containers.RepeatedCompositeFieldContainer[ReplicaStatus]
    corrupt_ranges: _containers.RepeatedCompositeFieldContainer[CorruptRange]
    target_replicas: _containers.RepeatedScalarFieldContainer[int]
    reassignment_step: str
    reassignment_error: str
    observers: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., leader_id: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., size_bytes: _Optional[int] = ..., segment_count: _Optional[int] = ..., epoch: _Optional[int] = ..., replica_status: _Optional[_Iterable[_Union[ReplicaStatus, _Mapping]]] = ..., corrupt_ranges: _Optional[_Iterable[_Union[CorruptRange, _Mapping]]] = ..., target_replicas: _Optional[_Iterable[int]] = ..., reassignment_step: _Optional[str] = ..., reassignment_error: _Optional[str] = ..., observers: _Optional[_Iterable[int]] = ...) -> None: ...

class CorruptRange(_message.Message):
    __slots__ = ("replica_id", "segment", "start_position", "end_position", "first_offset", "end_offset", "detail")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    START_POSITION_FIELD_NUMBER: _ClassVar[int]
    END_POSITION_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    replica_id: int
    segment: str
    start_position: int
    end_position: int
    first_offset: int
    end_offset: int
    detail: str
    def __init__(self, replica_id: _Optional[int] = ..., segment: _Optional[str] = ..., start_position: _Optional[int] = ..., end_position: _Optional[int] = ..., first_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class ReplicaStatus(_message.Message):
    __slots__ = ("replica_id", "log_end_offset", "lag_records", "last_fetch_ms_ago")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_RECORDS_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCH_MS_AGO_FIELD_NUMBER: _ClassVar[int]
    replica_id: int
    log_end_offset: int
    lag_records: int
    last_fetch_ms_ago: int
    def __init__(self, replica_id: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., lag_records: _Optional[int] = ..., last_fetch_ms_ago: _Optional[int] = ...) -> None: ...

class TopicDescription(_message.Message):
    __slots__ = ("name", "partitions", "format", "timestamp_type", "partition_count", "configs")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_TYPE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_COUNT_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionDescription]
    format: TopicFormat
    timestamp_type: TimestampType
    partition_count: int
    configs: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionDescription, _Mapping]]] = ..., format: _Optional[_Union[TopicFormat, str]] = ..., timestamp_type: _Optional[_Union[TimestampType, str]] = ..., partition_count: _Optional[int] = ..., configs: _Optional[_Mapping[str, str]] = ...) -> None: ...

class GetMetadataRequest(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("id", "address", "rack")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    id: int
    address: str
    rack: str
    def __init__(self, id: _Optional[int] = ..., address: _Optional[str] = ..., rack: _Optional[str] = ...) -> None: ...

class PartitionMetadata(_message.Message):
    __slots__ = ("partition", "leader_id", "replicas", "epoch")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    partition: int
    leader_id: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    epoch: int
    def __init__(self, partition: _Optional[int] = ..., leader_id: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., epoch: _Optional[int] = ...) -> None: ...

class TopicMetadata(_message.Message):
    __slots__ = ("name", "partitions", "format", "timestamp_type", "configs")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionMetadata]
    format: TopicFormat
    timestamp_type: TimestampType
    configs: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionMetadata, _Mapping]]] = ..., format: _Optional[_Union[TopicFormat, str]] = ..., timestamp_type: _Optional[_Union[TimestampType, str]] = ..., configs: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Metadata(_message.Message):
    __slots__ = ("nodes", "topics", "node_id", "metadata_voters", "metadata_observers", "metadata_leader_id")
    NODES_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_VOTERS_FIELD_NUMBER: _ClassVar[int]
    METADATA_OBSERVERS_FIELD_NUMBER: _ClassVar[int]
    METADATA_LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    topics: _containers.RepeatedCompositeFieldContainer[TopicMetadata]
    node_id: int
    metadata_voters: _containers.RepeatedScalarFieldContainer[int]
    metadata_observers: _containers.RepeatedScalarFieldContainer[int]
    metadata_leader_id: int
    def __init__(self, nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ..., topics: _Optional[_Iterable[_Union[TopicMetadata, _Mapping]]] = ..., node_id: _Optional[int] = ..., metadata_voters: _Optional[_Iterable[int]] = ..., metadata_observers: _Optional[_Iterable[int]] = ..., metadata_leader_id: _Optional[int] = ...) -> None: ...

class ListOffsetsRequest(_message.Message):
    __slots__ = ("topic", "partitions", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class PartitionOffsets(_message.Message):
    __slots__ = ("partition", "earliest", "latest", "log_end_offset", "offset_for_timestamp", "found_timestamp_ms")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FOR_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    FOUND_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    earliest: int
    latest: int
    log_end_offset: int
    offset_for_timestamp: int
    found_timestamp_ms: int
    def __init__(self, partition: _Optional[int] = ..., earliest: _Optional[int] = ..., latest: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., offset_for_timestamp: _Optional[int] = ..., found_timestamp_ms: _Optional[int] = ...) -> None: ...

class ListOffsetsResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionOffsets]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionOffsets, _Mapping]]] = ...) -> None: ...

class TransferLeadershipRequest(_message.Message):
    __slots__ = ("topic", "partition", "target_node_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TARGET_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    target_node_id: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., target_node_id: _Optional[int] = ...) -> None: ...

class TransferLeadershipResponse(_message.Message):
    __slots__ = ("leader_id", "previous_epoch")
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_EPOCH_FIELD_NUMBER: _ClassVar[int]
    leader_id: int
    previous_epoch: int
    def __init__(self, leader_id: _Optional[int] = ..., previous_epoch: _Optional[int] = ...) -> None: ...

class ReassignPartitionRequest(_message.Message):
    __slots__ = ("topic", "partition", "replicas", "complete", "topic_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    complete: bool
    topic_id: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., complete: _Optional[bool] = ..., topic_id: _Optional[int] = ...) -> None: ...

class ReassignPartitionResponse(_message.Message):
    __slots__ = ("replicas", "target_replicas")
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    TARGET_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    replicas: _containers.RepeatedScalarFieldContainer[int]
    target_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, replicas: _Optional[_Iterable[int]] = ..., target_replicas: _Optional[_Iterable[int]] = ...) -> None: ...
