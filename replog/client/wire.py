"""Wire messages to the client's values and back (shared by `Client` and `AsyncClient`)."""

from __future__ import annotations

from typing import Any

from replog.client.results import CorruptRange, PartitionInfo, ReplicaStatus
from replog.v1 import acl_pb2, admin_pb2


def acl(
    principal: str,
    operation: str,
    topic: str,
    prefix: bool,
    cluster: bool,
    group: str = "",
    producer: str = "",
) -> Any:
    if bool(topic) + bool(group) + bool(cluster) + bool(producer) != 1:
        raise ValueError(
            "an ACL is for a topic (topic=...), a consumer group (group=...), a producer name "
            "(producer=...) or the cluster (cluster=True)"
        )
    kind = "cluster" if cluster else "group" if group else "producer" if producer else "topic"
    return acl_pb2.Acl(
        principal=principal,
        resource_type=kind,
        resource_name=topic or group or producer,
        prefix=prefix,
        operation=operation,
    )


def partition_info(p: admin_pb2.PartitionDescription) -> PartitionInfo:
    """A `DescribeTopic` answer's partition as the client's value (shared with `aio`)."""
    return PartitionInfo(
        partition=p.partition,
        leader_id=None if p.leader_id < 0 else p.leader_id,
        replicas=tuple(p.replicas),
        log_start_offset=p.log_start_offset,
        log_end_offset=p.log_end_offset,
        high_watermark=p.high_watermark,
        size_bytes=p.size_bytes,
        segment_count=p.segment_count,
        epoch=p.epoch,
        replica_status=tuple(
            ReplicaStatus(r.replica_id, r.log_end_offset, r.lag_records, r.last_fetch_ms_ago)
            for r in p.replica_status
        ),
        corrupt_ranges=tuple(
            CorruptRange(
                c.replica_id,
                c.segment,
                c.start_position,
                c.end_position,
                c.first_offset,
                c.end_offset,
                c.detail,
            )
            for c in p.corrupt_ranges
        ),
        target_replicas=tuple(p.target_replicas),
        reassignment_step=p.reassignment_step,
        reassignment_error=p.reassignment_error,
        observers=tuple(p.observers),
    )
