"""replog's errors as Kafka error codes: the ONE table the Kafka listener answers from.

Keyed by the stable `reason` of replog's error tree (`replog.errors`), never by message
text. Chosen so that a Kafka client retries exactly where it would against Kafka:
NOT_LEADER_OR_FOLLOWER and LEADER_NOT_AVAILABLE make it refresh its metadata and retry;
REQUEST_TIMED_OUT (an acks=all append whose outcome is unknown) makes an idempotent
producer retry with the same sequence, which replog answers with the original offsets.
A reason missing from the table is UNKNOWN_SERVER_ERROR (never retried silently).
"""

from __future__ import annotations

from typing import Final

from replog.errors import ReplogError
from replog.kafka.errors import ErrorCode, KafkaDecodeError

E = ErrorCode

REASON_CODES: Final[dict[str, ErrorCode]] = {
    # where a request is served
    "NOT_LEADER": E.NOT_LEADER_OR_FOLLOWER,
    "LEADER_UNKNOWN": E.LEADER_NOT_AVAILABLE,
    "UNAVAILABLE": E.LEADER_NOT_AVAILABLE,
    "SHUTTING_DOWN": E.NOT_LEADER_OR_FOLLOWER,  # this node stops: another one leads soon
    "NODE_REMOVED": E.NOT_LEADER_OR_FOLLOWER,
    "PARTITION_OFFLINE": E.KAFKA_STORAGE_ERROR,  # retriable, with a metadata refresh
    "ACK_TIMEOUT": E.REQUEST_TIMED_OUT,
    # what does not exist
    "UNKNOWN_TOPIC": E.UNKNOWN_TOPIC_OR_PARTITION,
    "UNKNOWN_PARTITION": E.UNKNOWN_TOPIC_OR_PARTITION,
    "TOPIC_ALREADY_EXISTS": E.TOPIC_ALREADY_EXISTS,
    "OFFSET_OUT_OF_RANGE": E.OFFSET_OUT_OF_RANGE,
    # what is refused
    "INVALID_TOPIC_NAME": E.INVALID_TOPIC_EXCEPTION,
    "RECORD_TOO_LARGE": E.MESSAGE_TOO_LARGE,
    "INVALID_RECORD": E.INVALID_RECORD,
    "EMPTY_BATCH": E.INVALID_RECORD,
    "INVALID_FRAMES": E.CORRUPT_MESSAGE,
    "INVALID_CONFIG": E.INVALID_CONFIG,
    "INVALID_ARGUMENT": E.INVALID_REQUEST,
    "MALFORMED_REQUEST": E.INVALID_REQUEST,
    "REASSIGNMENT_IN_PROGRESS": E.REASSIGNMENT_IN_PROGRESS,
    # idempotent producers
    "OUT_OF_ORDER_SEQUENCE": E.OUT_OF_ORDER_SEQUENCE_NUMBER,
    "DUPLICATE_SEQUENCE": E.DUPLICATE_SEQUENCE_NUMBER,
    "PRODUCER_FENCED": E.INVALID_PRODUCER_EPOCH,
    # storage and limits
    "STORAGE_FULL": E.KAFKA_STORAGE_ERROR,
    "STORAGE_ERROR": E.KAFKA_STORAGE_ERROR,
    "CORRUPT_DATA": E.KAFKA_STORAGE_ERROR,
    "TOO_MANY_OPEN_FILES": E.KAFKA_STORAGE_ERROR,
    "TOO_MANY_BYTES_IN_FLIGHT": E.REQUEST_TIMED_OUT,  # retriable: room frees as calls end
    "TOO_MANY_REQUESTS": E.REQUEST_TIMED_OUT,
    "TOO_MANY_PARTITIONS": E.POLICY_VIOLATION,
    # who may do what
    "PERMISSION_DENIED": E.TOPIC_AUTHORIZATION_FAILED,
    "UNAUTHENTICATED": E.SASL_AUTHENTICATION_FAILED,
    # groups
    "NOT_COORDINATOR": E.NOT_COORDINATOR,
    "COORDINATOR_LOADING": E.COORDINATOR_LOAD_IN_PROGRESS,
    "UNKNOWN_GROUP": E.GROUP_ID_NOT_FOUND,
    "UNKNOWN_MEMBER": E.UNKNOWN_MEMBER_ID,
    "ILLEGAL_GENERATION": E.ILLEGAL_GENERATION,
    "GROUP_NOT_EMPTY": E.NON_EMPTY_GROUP,
    "INVALID_GROUP_NAME": E.INVALID_GROUP_ID,
    "OFFSET_METADATA_TOO_LARGE": E.OFFSET_METADATA_TOO_LARGE,
    "TOO_MANY_MEMBERS": E.GROUP_MAX_SIZE_REACHED,
}


# Controller APIs (CreateTopics, DeleteTopics): a metadata leader that cannot be reached is
# NOT_CONTROLLER, on which clients refresh their metadata and send the request again.
CONTROLLER_CODES: Final[dict[ErrorCode, ErrorCode]] = {
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_CONTROLLER,
    E.LEADER_NOT_AVAILABLE: E.NOT_CONTROLLER,
    E.NOT_ENOUGH_REPLICAS: E.NOT_CONTROLLER,
}


# Group coordinator APIs (FindCoordinator, OffsetCommit, OffsetFetch): a coordinator that
# is not known (yet) is COORDINATOR_NOT_AVAILABLE, on which clients look it up again.
COORDINATOR_CODES: Final[dict[ErrorCode, ErrorCode]] = {
    E.NOT_LEADER_OR_FOLLOWER: E.COORDINATOR_NOT_AVAILABLE,
    E.LEADER_NOT_AVAILABLE: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
}


def code_of(exc: ReplogError, *, controller: bool = False, coordinator: bool = False) -> ErrorCode:
    """The Kafka error code a client gets for `exc` (`controller`: in a controller API;
    `coordinator`: in a group coordinator API)."""
    if isinstance(exc, KafkaDecodeError):
        return exc.kafka_error_code
    code = REASON_CODES.get(exc.reason, E.UNKNOWN_SERVER_ERROR)
    if controller:
        return CONTROLLER_CODES.get(code, code)
    if coordinator:
        return COORDINATOR_CODES.get(code, code)
    return code
