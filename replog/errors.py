"""The one error tree of replog.

Every error a caller can act on is a `ReplogError`. Each subclass declares:

* `code`: the gRPC status code name (a string, so that this module and `replog.storage`
  import no grpc); the server converts it in one module, `replog.server.edge.status`.
* `reason`: a stable UPPER_SNAKE identifier sent in `google.rpc.ErrorInfo.reason`; the client
  maps it back to the same class (`error_class_for_reason`), never by message text.
* `retriable`: whether retrying the same request may succeed.

Errors carry their details as `metadata` (string keys and string values, as ErrorInfo does),
with typed properties for the values callers need (e.g. the valid offset range).

Broken invariants are not `ReplogError`s: they are assertions and crash loudly.
"""

from __future__ import annotations

from typing import ClassVar


class ReplogError(Exception):
    """Base class of every error replog raises on purpose."""

    code: ClassVar[str] = "UNKNOWN"
    reason: ClassVar[str] = "UNKNOWN"
    retriable: ClassVar[bool] = False

    _registry: ClassVar[dict[str, type[ReplogError]]] = {}

    def __init__(self, message: str, **metadata: object) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = {k: str(v) for k, v in metadata.items() if v is not None}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "reason" in cls.__dict__:
            existing = ReplogError._registry.get(cls.reason)
            assert existing is None, f"reason {cls.reason} declared twice ({existing}, {cls})"
            ReplogError._registry[cls.reason] = cls

    def _int(self, key: str) -> int | None:
        value = self.metadata.get(key)
        return int(value) if value is not None else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, {self.metadata!r})"


def error_class_for_reason(reason: str) -> type[ReplogError]:
    """The class that declared `reason`; `ReplogError` for reasons this version does not know."""
    return ReplogError._registry.get(reason, ReplogError)


def error_from_reason(reason: str, message: str, metadata: dict[str, str]) -> ReplogError:
    """Rebuild a typed error from what crossed the wire (reason, message, metadata)."""
    cls = error_class_for_reason(reason)
    err = cls(message, **metadata)
    return err


# --- INVALID_ARGUMENT: the request is wrong; retrying it unchanged never helps -------------


class InvalidArgumentError(ReplogError):
    code = "INVALID_ARGUMENT"
    reason = "INVALID_ARGUMENT"


class InvalidTopicNameError(InvalidArgumentError):
    reason = "INVALID_TOPIC_NAME"


class RecordTooLargeError(InvalidArgumentError):
    reason = "RECORD_TOO_LARGE"

    @property
    def record_bytes_max(self) -> int | None:
        return self._int("record_bytes_max")


class EmptyBatchError(InvalidArgumentError):
    reason = "EMPTY_BATCH"


class InvalidFramesError(InvalidArgumentError):
    """Raw frames handed to the log are malformed or do not continue it."""

    reason = "INVALID_FRAMES"


class InvalidRecordError(InvalidArgumentError):
    """A record of an envelope topic is not a well-formed envelope (`replog.records`): an
    Append carrying one is refused whole (`index`: the first bad record of the batch); a
    reader that meets one (`offset`) raises it rather than guess."""

    reason = "INVALID_RECORD"


class InvalidConfigError(InvalidArgumentError):
    reason = "INVALID_CONFIG"


class MalformedRequestError(InvalidArgumentError):
    """The request body is not a valid protobuf message of the method's request type
    (garbage, a truncated varint, a bad wire type, invalid UTF-8 in a string field)."""

    reason = "MALFORMED_REQUEST"


# --- NOT_FOUND / ALREADY_EXISTS ------------------------------------------------------------


class NotFoundError(ReplogError):
    code = "NOT_FOUND"
    reason = "NOT_FOUND"


class TopicNotFoundError(NotFoundError):
    reason = "UNKNOWN_TOPIC"


class PartitionNotFoundError(NotFoundError):
    reason = "UNKNOWN_PARTITION"


class UnknownNodeError(NotFoundError):
    """A node id that is not a member of the cluster."""

    reason = "UNKNOWN_NODE"


class TopicExistsError(ReplogError):
    code = "ALREADY_EXISTS"
    reason = "TOPIC_ALREADY_EXISTS"


# --- OUT_OF_RANGE --------------------------------------------------------------------------


class OffsetOutOfRangeError(ReplogError):
    """The offset is outside `[log_start_offset, high_watermark)` (or LEO for uncommitted)."""

    code = "OUT_OF_RANGE"
    reason = "OFFSET_OUT_OF_RANGE"

    @property
    def offset(self) -> int | None:
        return self._int("offset")

    @property
    def log_start_offset(self) -> int | None:
        return self._int("log_start_offset")

    @property
    def high_watermark(self) -> int | None:
        return self._int("high_watermark")


# --- FAILED_PRECONDITION -------------------------------------------------------------------


class NotLeaderError(ReplogError):
    """This replica does not lead the partition; `leader_address` says who does, if known."""

    code = "FAILED_PRECONDITION"
    reason = "NOT_LEADER"
    retriable = True

    @property
    def leader_id(self) -> int | None:
        return self._int("leader_id")

    @property
    def leader_address(self) -> str | None:
        return self.metadata.get("leader_address")


class ProducerFencedError(ReplogError):
    """An idempotent producer's epoch is older than one this partition has seen for its
    producer id: a newer instance of the same producer took over (InitProducer with the
    same name). Nothing was appended; this instance must stop."""

    code = "FAILED_PRECONDITION"
    reason = "PRODUCER_FENCED"

    @property
    def producer_epoch(self) -> int | None:
        return self._int("producer_epoch")


class OutOfOrderSequenceError(ReplogError):
    """An idempotent batch's base sequence is not the next one the partition expects for
    its producer (a batch before it is missing): nothing was appended. The producer resends
    its unacknowledged batches in order (`expected_sequence` says where to start)."""

    code = "FAILED_PRECONDITION"
    reason = "OUT_OF_ORDER_SEQUENCE"
    retriable = True  # the batch before it may still arrive (several in flight)

    @property
    def expected_sequence(self) -> int | None:
        return self._int("expected_sequence")


class DuplicateSequenceError(ReplogError):
    """An idempotent batch that the partition already holds, too old for its offsets to be
    remembered (older than the last `producer_batches_kept` batches of its producer).
    Nothing was appended again: for the producer the batch is written."""

    code = "ALREADY_EXISTS"
    reason = "DUPLICATE_SEQUENCE"


class MembershipChangeBusyError(ReplogError):
    """A partition's leader cannot change its membership yet (`refusal`: its own epoch is
    not committed, another change is not committed, or the replica to add as voter has not
    caught up): nothing was appended; retry later."""

    code = "FAILED_PRECONDITION"
    reason = "MEMBERSHIP_CHANGE_BUSY"
    retriable = True

    @property
    def refusal(self) -> str | None:
        return self.metadata.get("refusal")


class MembershipChangeRefusedError(ReplogError):
    """A membership change that is not allowed (`refusal`: malformed sets, more than one
    voter changed, or the leader removing itself): nothing was appended."""

    code = "FAILED_PRECONDITION"
    reason = "MEMBERSHIP_CHANGE_REFUSED"

    @property
    def refusal(self) -> str | None:
        return self.metadata.get("refusal")


class ReassignmentInProgressError(ReplogError):
    """A ReassignPartition of a partition already being moved to other replicas (wait, or
    cancel by reassigning to its current replicas), or a completion of a reassignment that
    is not the one in force."""

    code = "FAILED_PRECONDITION"
    reason = "REASSIGNMENT_IN_PROGRESS"


class NodeNotEmptyError(ReplogError):
    """RemoveNode of a node that still hosts replicas (`replicas`: how many): move them away
    first (`replog node decommission`), then remove it."""

    code = "FAILED_PRECONDITION"
    reason = "NODE_NOT_EMPTY"


class NodeExistsError(ReplogError):
    """AddNode of a node id that is a member already, at another address (the same address
    again is accepted and changes nothing)."""

    code = "ALREADY_EXISTS"
    reason = "NODE_ALREADY_EXISTS"


# --- UNAVAILABLE / DEADLINE_EXCEEDED -------------------------------------------------------


class UnavailableError(ReplogError):
    code = "UNAVAILABLE"
    reason = "UNAVAILABLE"
    retriable = True


class NodeRemovedError(UnavailableError):
    """This node was removed from the cluster (`replog node remove`) and still runs: its view
    of the cluster is no longer kept up to date, so it answers no metadata. Ask another node
    (clients move on by themselves); stop this one."""

    reason = "NODE_REMOVED"


class LeaderUnknownError(UnavailableError):
    reason = "LEADER_UNKNOWN"


class ShuttingDownError(UnavailableError):
    reason = "SHUTTING_DOWN"


class LogClosedError(ShuttingDownError):
    """The partition log was closed (its replica stopped: the node is stopping, or the topic
    was deleted). Storage raises it instead of touching a closed file; on the wire it is
    SHUTTING_DOWN, and the server turns it into UNKNOWN_TOPIC when the topic was deleted."""


class ConnectFailedError(UnavailableError):
    """The client reached none of the nodes it was given, for a cause retrying does not
    change: nothing listens there, no route or no answer, or a TLS mismatch. The message
    names the likely cause (`cause` in the metadata: refused, timeout, dns, tls_required,
    not_tls, certificate); raised by the client itself, never sent by a server. An
    `UnavailableError` (what such failures raised before), but not retriable."""

    reason = "CONNECT_FAILED"
    retriable = False

    @property
    def cause(self) -> str:
        return self.metadata.get("cause", "")


class AckTimeoutError(ReplogError):
    """acks=all did not complete in time: the outcome is unknown (the batch may still commit)."""

    code = "DEADLINE_EXCEEDED"
    reason = "ACK_TIMEOUT"
    retriable = True


class DeadlineExceededError(ReplogError):
    """The client's deadline passed before the server answered: the outcome is unknown."""

    code = "DEADLINE_EXCEEDED"
    reason = "CLIENT_DEADLINE_EXCEEDED"


class TransportError(ReplogError):
    """A gRPC failure without replog error details (the client sets `grpc_code`)."""

    reason = "TRANSPORT_ERROR"


# --- RESOURCE_EXHAUSTED: a limit of the node; retry later (with backoff) --------------------


class LimitExceededError(ReplogError):
    """A per-node or per-connection limit is reached. `limit` names the setting,
    `limit_value` its value; nothing was done, and retrying later may succeed."""

    code = "RESOURCE_EXHAUSTED"
    reason = "LIMIT_EXCEEDED"
    retriable = True

    @property
    def limit(self) -> str | None:
        return self.metadata.get("limit")

    @property
    def limit_value(self) -> int | None:
        return self._int("limit_value")


class TooManyRequestsError(LimitExceededError):
    """`rpcs_max` calls are in progress on the node."""

    reason = "TOO_MANY_REQUESTS"


class TooManyStreamsError(LimitExceededError):
    """`streams_max` StreamFrom calls on the node, or `streams_per_connection_max` on the
    caller's connection, are open."""

    reason = "TOO_MANY_STREAMS"


class TooManyPartitionsError(LimitExceededError):
    """A CreateTopic, or a ReassignPartition that adds replicas, would make a node host more
    than `partitions_max` partition replicas, or the node has too few file descriptors left
    to open more (`limit=open_files`)."""

    reason = "TOO_MANY_PARTITIONS"


class TooManyOpenFilesError(LimitExceededError):
    """The node ran out of file descriptors (EMFILE/ENFILE, `limit=open_files`) opening a
    file this request needed: nothing was done; retry later. Counted in
    `replog_storage_errors_total{reason="TOO_MANY_OPEN_FILES"}`."""

    reason = "TOO_MANY_OPEN_FILES"


class TooManyBytesInFlightError(LimitExceededError):
    """acks=none appends already hold `acks_none_bytes_max` bytes not yet written."""

    reason = "TOO_MANY_BYTES_IN_FLIGHT"


class QuotaExceededError(LimitExceededError):
    """The caller's principal is over one of its quotas (`quota`: produce_bytes,
    fetch_bytes, requests or metadata_writes; set with `replog quota set`). Nothing was
    done; `retry_after_ms` (Kafka's throttle time) says when the quota has room again:
    clients wait at least that long before the next attempt."""

    reason = "QUOTA_EXCEEDED"

    @property
    def quota(self) -> str | None:
        return self.metadata.get("quota")

    @property
    def retry_after_ms(self) -> int | None:
        return self._int("retry_after_ms")


# --- INTERNAL: a bug -----------------------------------------------------------------------


class InternalError(ReplogError):
    """An unexpected failure on the server (a bug). The message carries no internals, only
    a `correlation_id` that finds the traceback in the server's log."""

    code = "INTERNAL"
    reason = "INTERNAL"

    @property
    def correlation_id(self) -> str | None:
        return self.metadata.get("correlation_id")


# --- storage -------------------------------------------------------------------------------


class StorageFullError(ReplogError):
    """The disk is full (ENOSPC/EDQUOT). Nothing was appended; retry once space returns."""

    code = "RESOURCE_EXHAUSTED"
    reason = "STORAGE_FULL"
    retriable = True


class PartitionOfflineError(UnavailableError):
    """This node's replica of the partition is offline: an I/O error (EIO, ...) on its files
    stopped it (the node and its other partitions keep serving). Another replica may lead
    it (retry: clients move on); on this node it stays offline until the node restarts."""

    reason = "PARTITION_OFFLINE"


class CorruptDataError(ReplogError):
    """Data read back from disk does not have the shape it was written with."""

    code = "DATA_LOSS"
    reason = "CORRUPT_DATA"


class StorageError(ReplogError):
    """Any other I/O failure of the storage layer (EIO, ...): an environment fault, not a
    bug. It takes the partition's replica on this node offline (`PartitionOfflineError`
    from then on); another replica may lead it, so retrying may succeed."""

    code = "UNAVAILABLE"
    reason = "STORAGE_ERROR"
    retriable = True


# --- security: who the caller is, and what it may do -----------------------------------------


class UnauthenticatedError(ReplogError):
    """The call's credentials are missing or wrong (a bearer token no entry matches; no
    credentials where the node requires them)."""

    code = "UNAUTHENTICATED"
    reason = "UNAUTHENTICATED"


class PermissionDeniedError(ReplogError):
    """The caller is known, but no ACL allows it this operation on this resource."""

    code = "PERMISSION_DENIED"
    reason = "PERMISSION_DENIED"


# --- consumer groups (replog.v1.Groups) -----------------------------------------------------


class InvalidGroupNameError(InvalidArgumentError):
    reason = "INVALID_GROUP_NAME"


class OffsetMetadataTooLargeError(InvalidArgumentError):
    """A committed offset's metadata is longer than `group_metadata_bytes_max`."""

    reason = "OFFSET_METADATA_TOO_LARGE"


class NotCoordinatorError(NotLeaderError):
    """This node does not coordinate the group (it does not lead the group's partition of
    `__consumer_offsets`); `leader_id` and `leader_address` name the node it believes does."""

    reason = "NOT_COORDINATOR"


class CoordinatorLoadingError(UnavailableError):
    """The coordinator was just elected and is rebuilding its groups from the log."""

    reason = "COORDINATOR_LOADING"


class UnknownGroupError(NotFoundError):
    reason = "UNKNOWN_GROUP"


class UnknownMemberError(NotFoundError):
    """The coordinator does not know this member: it left, missed heartbeats for its session
    timeout, kept a revoked partition past its rebalance timeout, or the coordinator moved.
    It holds no partitions any more; it must join again (as a new member)."""

    reason = "UNKNOWN_MEMBER"


class IllegalGenerationError(ReplogError):
    """The request's generation is not the one the coordinator last gave this member (a
    heartbeat answer it has not seen): heartbeat, then retry with the new generation."""

    code = "FAILED_PRECONDITION"
    reason = "ILLEGAL_GENERATION"

    @property
    def generation(self) -> int | None:
        return self._int("generation")


class PartitionNotAssignedError(ReplogError):
    """A member committed an offset of a partition it does not hold (never handed to it, or
    already released): refused, so that it cannot overwrite the holder's progress."""

    code = "FAILED_PRECONDITION"
    reason = "PARTITION_NOT_ASSIGNED"


class GroupNotEmptyError(ReplogError):
    """The group has members: it cannot be deleted, and offsets cannot be committed outside
    membership (a reset of its offsets needs its members stopped)."""

    code = "FAILED_PRECONDITION"
    reason = "GROUP_NOT_EMPTY"


class TooManyGroupsError(LimitExceededError):
    """The coordinator holds `groups_max` groups; a new one is refused."""

    reason = "TOO_MANY_GROUPS"


class TooManyMembersError(LimitExceededError):
    """The group has `group_members_max` members; a new one is refused."""

    reason = "TOO_MANY_MEMBERS"
