"""The consumer groups' settings, as the coordinator uses them (from `Settings.groups_config`)."""

from __future__ import annotations

from dataclasses import dataclass

DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class GroupsConfig:
    offsets_partitions: int = 8  # of __consumer_offsets, when a node first creates it
    offsets_replication_factor: int = 3  # capped by the cluster's size
    offsets_retention_ms: int = 7 * DAY_MS  # an empty group's offsets, after its last commit
    retention_check_interval_ms: int = 60_000
    log_retention_ms: int | None = None  # the node's retention_ms (offsets are rewritten)
    session_timeout_ms_default: int = 10_000
    session_timeout_ms_min: int = 1000
    session_timeout_ms_max: int = 300_000
    rebalance_timeout_ms_default: int = 60_000
    rebalance_timeout_ms_max: int = 1_800_000
    heartbeat_interval_ms: int = 3000  # told to members, at most a third of their session
    groups_max: int = 10_000  # per node
    members_max: int = 1000  # per group
    metadata_bytes_max: int = 4096  # of one committed offset's metadata
    snapshot_records: int = 10_000  # records after a snapshot that call for the next one
    timeout_s: float = 30.0  # a record's acks=all wait

    def __post_init__(self) -> None:
        assert self.offsets_partitions >= 1 and self.offsets_replication_factor >= 1
        assert 1 <= self.session_timeout_ms_min <= self.session_timeout_ms_default
        assert self.session_timeout_ms_default <= self.session_timeout_ms_max
        assert 1 <= self.rebalance_timeout_ms_default <= self.rebalance_timeout_ms_max
        assert self.heartbeat_interval_ms >= 1 and self.groups_max >= 1
        assert self.members_max >= 1 and self.metadata_bytes_max >= 0
        assert self.snapshot_records >= 1

    def heartbeat_interval_for(self, session_timeout_ms: int) -> int:
        return max(1, min(self.heartbeat_interval_ms, session_timeout_ms // 3))
