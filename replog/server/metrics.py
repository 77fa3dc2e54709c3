"""Prometheus metrics, served on their own port (`metrics_listen`).

Counters and histograms are updated on the request path (children bound once per method);
per-partition gauges (LEO, HW, log start, segments, bytes on disk) are read from the logs at
scrape time by a collector, so the hot path pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from replog.storage import PartitionLog

LATENCY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0,
)  # fmt: skip


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
        }
        for plog in self._partitions():
            key = [plog.topic, str(plog.partition)]
            families["leo"].add_metric(key, plog.log_end_offset)
            families["hw"].add_metric(key, plog.high_watermark)
            families["start"].add_metric(key, plog.log_start_offset)
            families["segments"].add_metric(key, plog.segment_count)
            families["bytes"].add_metric(key, plog.size_bytes)
        yield from families.values()


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

    def serve(self, address: str) -> str:
        """Start the HTTP exporter; return its bound host:port."""
        host, _, port = address.rpartition(":")
        server, _thread = prometheus_client.start_http_server(
            int(port), addr=host, registry=self.registry
        )
        return f"{host}:{server.server_port}"
