"""The reassignment metrics: every node counts the moves its metadata shows; the moved
partition's leader exports how far the joining replicas are behind, until they are voters."""

from __future__ import annotations

from dataclasses import dataclass

from replog.replication.membership import Membership
from replog.server.cluster.reassignment import Progress, Reassigner, lag_bytes
from replog.server.meta.metadata import CompleteReassignment, CreateTopic, MetadataImage, TopicMeta
from replog.server.meta.metadata import ReassignPartition as Reassign
from replog.server.metrics import Metrics
from tests.unit.test_server_reassignment_loop import FakeDriver, FakePart


@dataclass
class FakeLog:
    log_end_offset: int = 1000
    log_start_offset: int = 200
    size_bytes: int = 80_000  # 100 bytes a record
    high_watermark: int = 1000


class FakeReplicas:
    def __init__(self, part: FakePart | None) -> None:
        self.part = part

    def replica(self, meta: TopicMeta, partition: int) -> FakePart | None:
        return self.part


async def _never(*_args: object) -> None:
    raise AssertionError("nothing completes here")


def node(part: FakePart | None) -> tuple[MetadataImage, Reassigner, Metrics]:
    image = MetadataImage()
    image.apply(3, CreateTopic("a", 2, ((1, 2, 3), (1, 2, 3))))
    controller = Reassigner(1, image, FakeReplicas(part), _never, timeout_s=1.0)
    metrics = Metrics(lambda: [])
    metrics.watch_reassignments(controller.snapshot)
    return image, controller, metrics


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_the_gauge_counts_the_moves_in_the_image_and_returns_to_zero() -> None:
    image, _controller, metrics = node(None)  # this node leads nothing
    assert value(metrics, "replog_reassignments_in_progress") == 0
    image.apply(4, Reassign("a", 3, 0, (2, 3, 4)))
    image.apply(5, Reassign("a", 3, 1, (1, 2, 4)))
    assert value(metrics, "replog_reassignments_in_progress") == 2
    assert value(metrics, "replog_reassignment_lag_records", topic="a", partition="0") is None
    image.apply(6, CompleteReassignment("a", 3, 0, (2, 3, 4)))
    assert value(metrics, "replog_reassignments_in_progress") == 1
    image.apply(7, CompleteReassignment("a", 3, 1, (1, 2, 4)))
    assert value(metrics, "replog_reassignments_in_progress") == 0


def test_the_leader_exports_the_lag_of_each_joining_replica_until_it_is_a_voter() -> None:
    # 4 is an observer 300 records behind; 5 is not one yet (it has nothing: the whole log)
    driver = FakeDriver(Membership((1, 2, 3), (4,)), [(1, 1000, 0, 0), (4, 700, 300, 5)])
    part = FakePart(driver)
    part.log = FakeLog()  # type: ignore[assignment]
    image, controller, metrics = node(part)
    image.apply(4, Reassign("a", 3, 0, (1, 4, 5)))
    controller.progress[("a", 0)] = Progress("observers [4, 5] catching up", attempts=2)
    controller.progress[("a", 0)].throttled = 7
    four = {"topic": "a", "partition": "0", "replica": "4"}
    five = {**four, "replica": "5"}
    assert value(metrics, "replog_reassignment_lag_records", **four) == 300
    assert value(metrics, "replog_reassignment_lag_bytes", **four) == 300 * 100
    assert value(metrics, "replog_reassignment_lag_records", **five) == 1000
    assert value(metrics, "replog_reassignment_lag_records", **{**four, "replica": "1"}) is None
    assert value(metrics, "replog_reassignment_failed_attempts", topic="a", partition="0") == 2
    total = "replog_reassignment_throttled_fetches_total"
    assert value(metrics, total, topic="a", partition="0") == 7
    driver.membership = Membership((1, 2, 3, 4), (5,))  # 4 promoted
    assert value(metrics, "replog_reassignment_lag_records", **four) is None
    part.is_leader = False  # another node leads it now: it exports the lag
    assert value(metrics, "replog_reassignment_lag_records", **five) is None
    assert value(metrics, "replog_reassignments_in_progress") == 1


def test_the_byte_estimate_uses_the_average_record_size_and_survives_an_empty_log() -> None:
    assert lag_bytes(10, 5_000, 100) == 500
    assert lag_bytes(0, 5_000, 100) == 0
    assert lag_bytes(3, 0, 0) == 0
