"""The stale-message counter reaches Prometheus as replog_replication_stale_messages_total."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from prometheus_client import CollectorRegistry, generate_latest

from replog.replication import Role, VoteResponse
from replog.server.metrics import _ReplicationCollector
from tests.unit.test_replication_replica import replica


def test_stale_messages_are_exported_per_partition_and_reason() -> None:
    r = replica(1)
    r.campaign(0)
    r.receive(VoteResponse(1, 2, True), 0)
    r.receive(VoteResponse(1, 3, True), 0)  # a vote answer after winning: stale
    driver = SimpleNamespace(
        replica=r, role=r.role, epoch=r.epoch, config=r.config, elections=1, leaderships=1,
        truncations=0, repairs=0, replica_status=lambda: [],
    )  # fmt: skip
    registry = CollectorRegistry()
    registry.register(_ReplicationCollector(lambda: [("t", 0, cast(Any, driver))]))
    text = generate_latest(registry).decode()
    line = 'replog_replication_stale_messages_total{partition="0",reason="vote_answer",topic="t"}'
    assert f"{line} 1.0" in text
    assert Role.LEADER is r.role
