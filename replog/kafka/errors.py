"""Errors of the Kafka wire codec, and the Kafka error codes a listener answers with.

Every problem met while decoding bytes from a Kafka client is a `KafkaDecodeError` (truncated
input, a length or count larger than what is left of the frame, a frame over the size limit,
a corrupt record batch, a batch that decompresses past its limit). They are
`MalformedRequestError`s of the one error tree (`replog.errors`: INVALID_ARGUMENT,
not retriable), and each carries the Kafka error code a listener answers with
(`kafka_error_code`) when it answers rather than closing the connection.

`ErrorCode` lists the codes of Kafka's protocol (`org.apache.kafka.common.protocol.Errors`)
that replog's listener needs; the numbers are part of the wire protocol.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar

from replog.errors import MalformedRequestError


class ErrorCode(IntEnum):
    """Kafka protocol error codes (the `error_code` fields of responses)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    UNKNOWN_TOPIC_ID = 100


class KafkaDecodeError(MalformedRequestError):
    """Bytes from a Kafka client that are not a valid message: truncated, a length or
    count that does not fit in what is left, an out-of-range value. Raised before any
    allocation the bad length would have caused."""

    kafka_error_code: ClassVar[ErrorCode] = ErrorCode.INVALID_REQUEST


class FrameTooLargeError(KafkaDecodeError):
    """A size prefix above the listener's frame limit (or negative): the connection is
    closed without reading the body."""

    @property
    def frame_bytes(self) -> int | None:
        return self._int("frame_bytes")

    @property
    def frame_bytes_max(self) -> int | None:
        return self._int("frame_bytes_max")


class CorruptRecordBatchError(KafkaDecodeError):
    """A record batch whose CRC-32C does not match, whose magic is not 2, whose
    compressed payload does not decompress, or whose records do not fill it exactly."""

    kafka_error_code = ErrorCode.CORRUPT_MESSAGE


class DecompressedTooLargeError(KafkaDecodeError):
    """A compressed record batch that would decompress past the limit (a zip bomb or just
    too big): refused before the limit is exceeded in memory."""

    kafka_error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class UnsupportedCompressionError(KafkaDecodeError):
    """A batch attribute naming a compression codec that does not exist (5, 6, 7)."""

    kafka_error_code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class UnsupportedVersionError(KafkaDecodeError):
    """An API key this codec does not know, or a version outside the message's range:
    a listener answers UNSUPPORTED_VERSION (ApiVersions answers with its v0 body)."""

    kafka_error_code = ErrorCode.UNSUPPORTED_VERSION
