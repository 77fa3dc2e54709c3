"""Prometheus metrics, served on their own port (`metrics_listen`).

Counters and histograms are updated on the request path (children bound once per method);
per-partition gauges (LEO, HW, log start, segments, bytes on disk) are read from the logs at
scrape time by a collector, so the hot path pays nothing for them. The node's registry also
carries prometheus_client's process, platform and GC collectors (`process_*`, `python_info`,
`python_gc_*`: CPU seconds, RSS, open and maximum fds, start time, GC collections), read at
scrape time too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import prometheus_client
from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from replog.errors import ReplogError
from replog.replication import Role
from replog.replication.driver import ReplicaDriver
from replog.storage import PartitionLog
from replog.storage.segment_log import ERRORS as STORAGE_ERRORS
from replog.storage.space import DiskSpace

LATENCY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Joining:
    """A replica of a partition's target that is not a voter yet, as its leader sees it."""

    replica: int
    lag_records: int  # behind the leader's log end (all of it before it first fetched)
    lag_bytes: int  # estimated from the log's average record size (`lag_bytes`)


@dataclass(frozen=True, slots=True)
class Moving:
    """A partition being reassigned that this node leads (`cluster.reassignment` builds it; the
    reassignment collector reads it)."""

    topic: str
    partition: int
    joining: tuple[Joining, ...]
    failed_attempts: int  # typed refusals in a row of its controller's last step (0: none)
    throttled: int  # fetches of joining observers the throttle dropped


class _PartitionCollector(Collector):
    def __init__(self, partitions: Callable[[], Iterable[PartitionLog]]) -> None:
        self._partitions = partitions

    def collect(self) -> Iterable[GaugeMetricFamily]:
        labels = ["topic", "partition"]
        families = {
            "leo": GaugeMetricFamily("replog_log_end_offset", "Log end offset", labels=labels),
            "hw": GaugeMetricFamily("replog_high_watermark", "High watermark", labels=labels),
            "start": GaugeMetricFamily("replog_log_start_offset", "Log start", labels=labels),
            "segments": GaugeMetricFamily("replog_segments", "Segment files", labels=labels),
            "bytes": GaugeMetricFamily("replog_log_bytes", "Bytes on disk", labels=labels),
            "corrupt": GaugeMetricFamily(
                "replog_corrupt_ranges",
                "Corrupt ranges found in this replica's log and not repaired yet (never served)",
                labels=labels,
            ),
        }
        for plog in self._partitions():
            key = [plog.topic, str(plog.partition)]
            families["leo"].add_metric(key, plog.log_end_offset)
            families["hw"].add_metric(key, plog.high_watermark)
            families["start"].add_metric(key, plog.log_start_offset)
            families["segments"].add_metric(key, plog.segment_count)
            families["bytes"].add_metric(key, plog.size_bytes)
            families["corrupt"].add_metric(key, _corrupt_count(plog))
        yield from families.values()


def _corrupt_count(plog: PartitionLog) -> int:
    try:
        return len(plog.corrupt_ranges())
    except ReplogError:  # closed meanwhile (its replica stopped, its topic deleted)
        return 0


class _ReplicationCollector(Collector):
    """Replication state of every replica this node hosts, read at scrape time."""

    def __init__(self, replicas: Callable[[], Iterable[tuple[str, int, ReplicaDriver]]]) -> None:
        self._replicas = replicas

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        labels = ["topic", "partition"]
        role = GaugeMetricFamily(
            "replog_replica_role", "1 for the replica's current role", labels=[*labels, "role"]
        )
        epoch = GaugeMetricFamily("replog_replica_epoch", "Leader epoch", labels=labels)
        lag = GaugeMetricFamily(
            "replog_follower_lag_records",
            "Records a follower is behind the leader's log end (leader's view)",
            labels=[*labels, "replica"],
        )
        age = GaugeMetricFamily(
            "replog_follower_fetch_age_seconds",
            "Seconds since a follower last fetched (leader's view)",
            labels=[*labels, "replica"],
        )
        elections = CounterMetricFamily(
            "replog_elections", "Elections this replica started", labels=labels
        )
        leaderships = CounterMetricFamily(
            "replog_leaderships", "Elections this replica won", labels=labels
        )
        truncations = CounterMetricFamily(
            "replog_truncations", "Divergent tails this replica truncated", labels=labels
        )
        repairs = CounterMetricFamily(
            "replog_repairs",
            "Times this replica discarded its log to refetch it (a corrupt range)",
            labels=labels,
        )
        stale = CounterMetricFamily(
            "replog_replication_stale_messages",
            "Late, duplicate or stale replication messages a replica ignored, by reason",
            labels=[*labels, "reason"],
        )
        offline = GaugeMetricFamily(
            "replog_replica_offline",
            "1 when an I/O error on its files took the replica offline (PARTITION_OFFLINE)",
            labels=labels,
        )
        rebuilds = CounterMetricFamily(
            "replog_replica_rebuilds",
            "Times the replica rebuilt its state from the log after a failed log operation",
            labels=labels,
        )
        refused = CounterMetricFamily(
            "replog_replica_writes_refused",
            "Appends refused up front: a full disk (STORAGE_FULL) or no descriptor left",
            labels=labels,
        )
        for topic, partition, driver in self._replicas():
            key = [topic, str(partition)]
            # (read with defaults: test doubles of the driver may lack them)
            offline.add_metric(key, 0.0 if getattr(driver, "offline", None) is None else 1.0)
            rebuilds.add_metric(key, getattr(driver, "rebuilds", 0))
            refused.add_metric(key, getattr(driver, "refused_writes", 0))
            for r in Role:
                role.add_metric([*key, r.value], 1.0 if driver.role is r else 0.0)
            epoch.add_metric(key, driver.epoch)
            for replica, _leo, behind, ago_ms in driver.replica_status():
                if replica == driver.config.replica_id:
                    continue
                lag.add_metric([*key, str(replica)], behind)
                if ago_ms >= 0:
                    age.add_metric([*key, str(replica)], ago_ms / 1000)
            elections.add_metric(key, driver.elections)
            leaderships.add_metric(key, driver.leaderships)
            truncations.add_metric(key, driver.truncations)
            repairs.add_metric(key, driver.repairs)
            for reason, count in driver.replica.stale_messages.items():  # (non-zero only)
                stale.add_metric([*key, reason.value], count)
        yield from (role, epoch, lag, age, elections, leaderships, truncations, repairs, stale)
        yield from (offline, rebuilds, refused)


class _StorageCollector(Collector):
    """Each data directory's disk (`storage.space`) and the storage errors met, by reason."""

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        full = GaugeMetricFamily(
            "replog_storage_full",
            "1 while the data directory's disk is full (appends refused with STORAGE_FULL)",
            labels=["data_dir"],
        )
        free = GaugeMetricFamily(
            "replog_storage_free_bytes",
            "Free bytes on the data directory's file system, as last read",
            labels=["data_dir"],
        )
        size = GaugeMetricFamily(
            "replog_storage_size_bytes",
            "Size of the data directory's file system (statvfs f_blocks; free / size is the "
            "free fraction)",
            labels=["data_dir"],
        )
        for space in DiskSpace.all():
            if space.reserve_bytes == 0 and not space.full:
                continue  # not a node's data directory (no reserve kept there)
            full.add_metric([str(space.data_dir)], 1.0 if space.full else 0.0)
            free.add_metric([str(space.data_dir)], space.free_bytes)
            size_bytes = _file_system_bytes(space.data_dir)
            if size_bytes is not None:
                size.add_metric([str(space.data_dir)], size_bytes)
        errors = CounterMetricFamily(
            "replog_storage_errors",
            "OSErrors of the disk turned into typed errors, by reason (STORAGE_FULL, "
            "TOO_MANY_OPEN_FILES, STORAGE_ERROR)",
            labels=["reason"],
        )
        for reason in ("STORAGE_FULL", "TOO_MANY_OPEN_FILES", "STORAGE_ERROR"):
            errors.add_metric([reason], STORAGE_ERRORS[reason])
        yield from (full, free, size, errors)


def _file_system_bytes(path: Path) -> int | None:
    """The size of the file system holding `path` (None if it cannot be read now)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


class _ReplicaFailureCollector(Collector):
    """Local replica operations that failed and are being retried (see `replica_manager`)."""

    def __init__(self, failures: Callable[[], Iterable[tuple[str, int | None, str, int]]]) -> None:
        self._failures = failures

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "replog_replica_failures",
            "Failed attempts of a local replica operation still being retried (0: none)",
            labels=["topic", "partition", "action"],
        )
        for topic, partition, action, attempts in self._failures():
            family.add_metric(
                [topic, "" if partition is None else str(partition), action], attempts
            )
        yield family


class _RepairCollector(Collector):
    """Replicas with a corrupt range that cannot be repaired right now (see `repair`)."""

    def __init__(self, blocked: Callable[[], Iterable[tuple[str, int]]]) -> None:
        self._blocked = blocked

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "replog_repair_blocked",
            "1: this replica has a corrupt range it cannot repair now (no other replica, no "
            "leader, or no voter to hand leadership to)",
            labels=["topic", "partition"],
        )
        for topic, partition in self._blocked():
            family.add_metric([topic, str(partition)], 1)
        yield family


class _LeaderNewsCollector(Collector):
    """The leader directory's news (peering/leader_news.py): what went out and came in."""

    def __init__(self, snapshot: Callable[[], tuple[int, int, int, int, int]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        sent, entries, sent_bytes, received, held = self._snapshot()
        yield CounterMetricFamily(
            "replog_leader_news_messages_sent", "ShareLeaders messages delivered", value=sent
        )
        yield CounterMetricFamily(
            "replog_leader_news_entries_sent", "leader entries delivered to peers", value=entries
        )
        yield CounterMetricFamily(
            "replog_leader_news_sent_bytes", "ShareLeaders bytes delivered", value=sent_bytes
        )
        yield CounterMetricFamily(
            "replog_leader_news_messages_received", "ShareLeaders messages taken", value=received
        )
        yield GaugeMetricFamily(
            "replog_leader_directory_entries", "partition leaders the directory holds", value=held
        )


class _ReassignmentCollector(Collector):
    """Partition moves (see `reassignment`): how many this node's metadata shows, and, on
    each moved partition's leader, how far its joining replicas are behind."""

    def __init__(self, snapshot: Callable[[], tuple[int, Iterable[Moving]]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        labels = ["topic", "partition"]
        in_progress = GaugeMetricFamily(
            "replog_reassignments_in_progress",
            "Partitions with a reassignment target in this node's metadata (every node)",
        )
        lag_records = GaugeMetricFamily(
            "replog_reassignment_lag_records",
            "Records a replica a reassignment adds is behind the leader's log end, until it "
            "is a voter (the partition's leader)",
            labels=[*labels, "replica"],
        )
        lag_bytes = GaugeMetricFamily(
            "replog_reassignment_lag_bytes",
            "The same lag in bytes, estimated from the log's average record size",
            labels=[*labels, "replica"],
        )
        failed = GaugeMetricFamily(
            "replog_reassignment_failed_attempts",
            "Refused attempts in a row of the partition's next reassignment step (leader)",
            labels=labels,
        )
        throttled = CounterMetricFamily(
            "replog_reassignment_throttled_fetches",
            "Fetches of joining replicas the reassignment throttle dropped (leader)",
            labels=labels,
        )
        count, moving = self._snapshot()
        in_progress.add_metric([], count)
        for move in moving:
            key = [move.topic, str(move.partition)]
            for joining in move.joining:
                lag_records.add_metric([*key, str(joining.replica)], joining.lag_records)
                lag_bytes.add_metric([*key, str(joining.replica)], joining.lag_bytes)
            failed.add_metric(key, move.failed_attempts)
            throttled.add_metric(key, move.throttled)
        yield from (in_progress, lag_records, lag_bytes, failed, throttled)


class _MembershipCollector(Collector):
    """The cluster's members and the metadata quorum as this node sees them (`membership`)."""

    def __init__(self, snapshot: Callable[[], tuple[int, int, int, int, int]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[GaugeMetricFamily]:
        members, voters, observers, leader, pending = self._snapshot()
        for name, text, value in (
            ("replog_cluster_members", "Members of the cluster in this node's metadata", members),
            ("replog_metadata_voters", "Voters of the metadata quorum (this node's log)", voters),
            ("replog_metadata_observers", "Observers of the metadata quorum", observers),
            ("replog_metadata_leader", "The metadata leader this node knows (0: none)", leader),
            (
                "replog_metadata_quorum_changes_pending",
                "1 on the metadata leader while the quorum differs from what the members call "
                "for (a member catching up before it votes, or one not up yet)",
                pending,
            ),
        ):
            family = GaugeMetricFamily(name, text)
            family.add_metric([], value)
            yield family


class _LimitsCollector(Collector):
    """What clients hold against each limit (see `limits`), and what was refused."""

    def __init__(
        self,
        limits: Callable[[], Iterable[tuple[str, int, int, int]]],
        malformed: Callable[[], int],
    ) -> None:
        self._limits = limits
        self._malformed = malformed

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        in_use = GaugeMetricFamily(
            "replog_limit_in_use",
            "Held against the limit now (per connection: the busiest connection)",
            labels=["limit"],
        )
        value = GaugeMetricFamily("replog_limit_value", "The limit's setting", labels=["limit"])
        refused = CounterMetricFamily(
            "replog_limit_refused", "Calls refused by the limit", labels=["limit"]
        )
        for name, used, limit, refusals in self._limits():
            in_use.add_metric([name], used)
            value.add_metric([name], limit)
            refused.add_metric([name], refusals)
        malformed = CounterMetricFamily(
            "replog_malformed_requests", "Request bodies that did not decode (MALFORMED_REQUEST)"
        )
        malformed.add_metric([], self._malformed())
        yield from (in_use, value, refused, malformed)


class _QuotasCollector(Collector):
    """Calls refused or delayed by a quota (edge/quotas.py), by whose entry and which quota."""

    def __init__(self, throttled: Callable[[], Iterable[tuple[str, str, int]]]) -> None:
        self._throttled = throttled

    def collect(self) -> Iterable[CounterMetricFamily]:
        family = CounterMetricFamily(
            "replog_quota_throttled",
            "Calls refused (or StreamFrom replies delayed) by a quota",
            labels=["principal_kind", "quota"],
        )
        for kind, quota, count in self._throttled():
            family.add_metric([kind, quota], count)
        yield family


class Metrics:
    def __init__(self, partitions: Callable[[], Iterable[PartitionLog]]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "replog_requests", "RPCs by method and status code", ["method", "code"], registry=r
        )
        self.latency = Histogram(
            "replog_request_seconds",
            "RPC latency by method",
            ["method"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.append_records = Counter("replog_append_records", "Records appended", registry=r)
        self.append_bytes = Counter("replog_append_bytes", "Value bytes appended", registry=r)
        self.read_bytes = Counter("replog_read_bytes", "Frame bytes served", registry=r)
        r.register(_PartitionCollector(partitions))
        r.register(_StorageCollector())
        # The process's own health: CPU, RSS, fds against the limit, start time, GC (the
        # same collectors the default registry has; this registry is the node's own).
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)

    def watch_replicas(
        self, replicas: Callable[[], Iterable[tuple[str, int, ReplicaDriver]]]
    ) -> None:
        """Export the replication state of the replicas `replicas()` lists (cluster mode)."""
        self.registry.register(_ReplicationCollector(replicas))

    def watch_failures(
        self, failures: Callable[[], Iterable[tuple[str, int | None, str, int]]]
    ) -> None:
        """Export the local replica failures `failures()` lists: (topic, partition, action,
        attempts)."""
        self.registry.register(_ReplicaFailureCollector(failures))

    def watch_repairs(self, blocked: Callable[[], Iterable[tuple[str, int]]]) -> None:
        """Export the replicas `blocked()` lists: corrupt and not repairable right now."""
        self.registry.register(_RepairCollector(blocked))

    def watch_reassignments(self, snapshot: Callable[[], tuple[int, Iterable[Moving]]]) -> None:
        """Export `snapshot()`: (partitions being reassigned, the moves led here)."""
        self.registry.register(_ReassignmentCollector(snapshot))

    def watch_leader_news(self, snapshot: Callable[[], tuple[int, int, int, int, int]]) -> None:
        """Export `snapshot()`: (messages sent, entries sent, bytes sent, messages received,
        directory entries)."""
        self.registry.register(_LeaderNewsCollector(snapshot))

    def watch_membership(self, snapshot: Callable[[], tuple[int, int, int, int, int]]) -> None:
        """Export `snapshot()`: (members, metadata voters, observers, metadata leader id or 0,
        1 while the metadata leader has a quorum change to make)."""
        self.registry.register(_MembershipCollector(snapshot))

    def watch_quotas(self, throttled: Callable[[], Iterable[tuple[str, str, int]]]) -> None:
        """Export `throttled()`: (principal_kind, quota, count) (edge/quotas.py)."""
        self.registry.register(_QuotasCollector(throttled))

    def watch_limits(
        self,
        limits: Callable[[], Iterable[tuple[str, int, int, int]]],
        malformed: Callable[[], int],
    ) -> None:
        """Export `limits()`: (setting, in use, limit, refused), and the malformed count."""
        self.registry.register(_LimitsCollector(limits, malformed))

    def serve(self, address: str) -> str:
        """Start the HTTP exporter; return its bound host:port."""
        host, _, port = address.rpartition(":")
        server, _thread = prometheus_client.start_http_server(
            int(port), addr=host, registry=self.registry
        )
        return f"{host}:{server.server_port}"
