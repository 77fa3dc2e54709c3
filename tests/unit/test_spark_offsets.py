"""Offset planning for the Spark source (pure logic, no Spark)."""

from __future__ import annotations

import json

import pytest

from replog.errors import InvalidArgumentError, OffsetOutOfRangeError
from replog.spark import offsets as off

BOUNDS = {
    0: off.PartitionBounds(0, log_start_offset=10, high_watermark=100),
    1: off.PartitionBounds(1, log_start_offset=0, high_watermark=5),
}


def test_earliest_and_latest_mean_log_start_and_high_watermark() -> None:
    spec = off.parse_offsets_option("earliest", "t", off.LATEST)
    assert off.resolve(spec, BOUNDS, fail_on_data_loss=True, topic="t") == {0: 10, 1: 0}
    spec = off.parse_offsets_option("LATEST", "t", off.EARLIEST)
    assert off.resolve(spec, BOUNDS, fail_on_data_loss=True, topic="t") == {0: 100, 1: 5}
    assert off.parse_offsets_option(None, "t", off.EARLIEST) == off.EARLIEST


def test_json_offsets_follow_kafkas_conventions() -> None:
    spec = off.parse_offsets_option('{"t": {"0": 42, "1": -1}}', "t", off.EARLIEST)
    assert off.resolve(spec, BOUNDS, fail_on_data_loss=True, topic="t") == {0: 42, 1: 5}
    partial = off.parse_offsets_option('{"t": {"1": 3}}', "t", off.EARLIEST)
    assert off.resolve(partial, BOUNDS, fail_on_data_loss=True, topic="t") == {0: 10, 1: 3}


@pytest.mark.parametrize(
    "raw", ["{", '{"other": {"0": 1}}', '{"t": [1]}', '{"t": {"x": 1}}', "yesterday"]
)
def test_malformed_offset_options_are_rejected(raw: str) -> None:
    with pytest.raises(InvalidArgumentError):
        off.parse_offsets_option(raw, "t", off.EARLIEST)


def test_offsets_of_partitions_that_do_not_exist_are_rejected() -> None:
    spec = off.parse_offsets_option('{"t": {"7": 1}}', "t", off.EARLIEST)
    with pytest.raises(InvalidArgumentError):
        off.resolve(spec, BOUNDS, fail_on_data_loss=True, topic="t")


def test_deleted_offsets_fail_unless_data_loss_is_allowed() -> None:
    spec = off.parse_offsets_option('{"t": {"0": 3}}', "t", off.EARLIEST)
    with pytest.raises(OffsetOutOfRangeError):
        off.resolve(spec, BOUNDS, fail_on_data_loss=True, topic="t")
    assert off.resolve(spec, BOUNDS, fail_on_data_loss=False, topic="t")[0] == 10


def test_offsets_past_the_high_watermark_are_refused() -> None:
    spec = off.parse_offsets_option('{"t": {"1": 6}}', "t", off.EARLIEST)
    with pytest.raises(OffsetOutOfRangeError):
        off.resolve(spec, BOUNDS, fail_on_data_loss=False, topic="t")


def test_large_ranges_are_split_into_tasks_that_cover_them_exactly() -> None:
    ranges = [off.OffsetRange("t", 0, 0, 1000), off.OffsetRange("t", 1, 50, 53)]
    tasks = off.split(ranges, records_per_task_max=300, tasks_min=0)
    assert [t.count for t in tasks if t.partition == 0] == [250, 250, 250, 250]
    assert [(t.start, t.end) for t in tasks if t.partition == 1] == [(50, 53)]
    many = off.split(ranges, records_per_task_max=10**9, tasks_min=8)
    assert len(many) >= 8
    assert sum(t.count for t in many) == 1003
    assert off.split([off.OffsetRange("t", 0, 5, 5)], 100, 0) == []


def test_a_read_limit_is_shared_by_lag_and_never_passes_the_latest_offsets() -> None:
    start = {0: 0, 1: 0, 2: 100}
    latest = {0: 900, 1: 100, 2: 100}
    end = off.spread_limit(start, latest, rows_max=100)
    assert sum(end[p] - start[p] for p in start) == 100
    assert end == {0: 90, 1: 10, 2: 100}
    assert off.spread_limit(start, latest, rows_max=10**6) == latest
    tiny = off.spread_limit({0: 0, 1: 0}, {0: 1, 1: 1}, rows_max=1)
    assert sum(tiny.values()) == 1


def test_stream_offsets_are_json_with_sorted_string_keys() -> None:
    offset = off.to_stream_offset("t", {10: 1, 2: 5, 0: 7})
    assert json.dumps(offset) == '{"t": {"0": 7, "2": 5, "10": 1}}'
    assert off.from_stream_offset("t", json.loads(json.dumps(offset))) == {0: 7, 2: 5, 10: 1}
