"""Offset planning for the Spark source (pure logic, no Spark): Kafka's rules."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from replog.errors import InvalidArgumentError, OffsetOutOfRangeError
from replog.spark import offsets as off

BOUNDS = {
    ("t", 0): off.Bounds(log_start_offset=10, high_watermark=100),
    ("t", 1): off.Bounds(log_start_offset=0, high_watermark=5),
    ("u", 0): off.Bounds(log_start_offset=0, high_watermark=7),
}


def spec(option: str, raw: str) -> off.OffsetSpec:
    parsed = off.parse_spec(
        {option: raw}, "startingTimestamp", "startingOffsetsByTimestamp", option,
        no_match_latest=False,
    )  # fmt: skip
    assert parsed is not None
    return parsed


def resolve(s: off.OffsetSpec, fail_on_data_loss: bool = True) -> dict[off.TopicPartition, int]:
    return off.resolve(s, BOUNDS, fail_on_data_loss=fail_on_data_loss)


def test_earliest_and_latest_mean_log_start_and_high_watermark() -> None:
    assert resolve(spec("startingOffsets", "earliest")) == {("t", 0): 10, ("t", 1): 0, ("u", 0): 0}
    assert resolve(spec("startingOffsets", "LATEST")) == {("t", 0): 100, ("t", 1): 5, ("u", 0): 7}
    assert off.parse_spec({}, "a", "b", "c", no_match_latest=False) is None


def test_json_offsets_name_partitions_of_several_topics_with_minus_two_and_minus_one() -> None:
    s = spec("startingOffsets", '{"t": {"0": 42, "1": -1}, "u": {"0": -2}}')
    assert resolve(s) == {("t", 0): 42, ("t", 1): 5, ("u", 0): 0}


def test_json_that_leaves_a_partition_out_is_rejected_as_kafka_does() -> None:
    s = spec("endingOffsets", '{"t": {"0": 50, "1": -1}}')
    with pytest.raises(InvalidArgumentError, match=r"endingOffsets must name every partition.*u/0"):
        resolve(s)


def test_json_that_names_a_partition_the_query_does_not_read_is_rejected() -> None:
    s = spec("startingOffsets", '{"t": {"0": 1, "1": 1, "7": 1}, "u": {"0": 1}}')
    with pytest.raises(InvalidArgumentError, match=r"names t/7, which the query does not read"):
        resolve(s)


@pytest.mark.parametrize(
    "raw", ["{", '{"t": [1]}', '{"t": {"x": 1}}', '{"t": {"0": "1"}}', '{"t": {"0": -3}}', "soon"]
)
def test_malformed_offset_options_are_rejected(raw: str) -> None:
    with pytest.raises(InvalidArgumentError, match="startingOffsets"):
        spec("startingOffsets", raw)


def test_deleted_offsets_fail_naming_the_option_unless_data_loss_is_allowed() -> None:
    s = spec("startingOffsets", '{"t": {"0": 3, "1": -2}, "u": {"0": -2}}')
    with pytest.raises(OffsetOutOfRangeError, match="failOnDataLoss=false"):
        resolve(s)
    assert resolve(s, fail_on_data_loss=False)[("t", 0)] == 10


def test_offsets_past_the_high_watermark_are_refused() -> None:
    s = spec("startingOffsets", '{"t": {"0": 10, "1": 6}, "u": {"0": 0}}')
    with pytest.raises(OffsetOutOfRangeError, match="past the high watermark"):
        resolve(s, fail_on_data_loss=False)


def test_timestamp_options_take_precedence_over_offsets_as_in_kafka() -> None:
    opts = {
        "startingTimestamp": "1000",
        "startingOffsetsByTimestamp": '{"t": {"0": 5}}',
        "startingOffsets": "earliest",
    }
    names = ("startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets")
    got = off.parse_spec(opts, *names, no_match_latest=False)
    assert got == off.ByTimestamp("startingTimestamp", None, 1000, False)
    del opts["startingTimestamp"]
    got = off.parse_spec(opts, *names, no_match_latest=True)
    assert got == off.ByTimestamp("startingOffsetsByTimestamp", {("t", 0): 5}, None, True)
    with pytest.raises(InvalidArgumentError, match="startingTimestamp must be a timestamp"):
        off.parse_spec({"startingTimestamp": "noon"}, *names, no_match_latest=False)


def lookup(answers: Mapping[off.TopicPartition, int | None]) -> off.TimeLookup:
    def times(
        option: str, wanted: Mapping[off.TopicPartition, int]
    ) -> dict[off.TopicPartition, int | None]:
        assert option == "startingTimestamp" and set(wanted) == set(BOUNDS)
        return {tp: answers[tp] for tp in wanted}

    return times


def test_offsets_by_time_follow_the_servers_answer_and_kafkas_no_match_strategy() -> None:
    answers = {("t", 0): 40, ("t", 1): None, ("u", 0): 3}
    erroring = off.ByTimestamp("startingTimestamp", None, 1000, no_match_latest=False)
    with pytest.raises(InvalidArgumentError, match="no record of t/1 has a timestamp >= 1000"):
        off.resolve(erroring, BOUNDS, fail_on_data_loss=True, times=lookup(answers))
    latest = off.ByTimestamp("startingTimestamp", None, 1000, no_match_latest=True)
    got = off.resolve(latest, BOUNDS, fail_on_data_loss=True, times=lookup(answers))
    assert got == {("t", 0): 40, ("t", 1): 5, ("u", 0): 3}


def test_batch_specs_must_pair_the_same_partitions_with_start_before_end() -> None:
    start = spec("startingOffsets", '{"t": {"0": 20}}')
    with pytest.raises(InvalidArgumentError, match="must name the same partitions"):
        off.check_start_before_end(start, spec("endingOffsets", '{"t": {"1": 30}}'))
    with pytest.raises(InvalidArgumentError, match="startingOffsets 20 is after endingOffsets 10"):
        off.check_start_before_end(start, spec("endingOffsets", '{"t": {"0": 10}}'))
    off.check_start_before_end(start, spec("endingOffsets", '{"t": {"0": -1}}'))
    assert off.asks_for(spec("endingOffsets", '{"t": {"0": -2}}'), off.EARLIEST)
    assert not off.asks_for(spec("endingOffsets", '{"t": {"0": -1}}'), off.EARLIEST)


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
    start = {("t", 0): 0, ("t", 1): 0, ("u", 0): 100}
    latest = {("t", 0): 900, ("t", 1): 100, ("u", 0): 100}
    end = off.spread_limit(start, latest, rows_max=100)
    assert sum(end[p] - start[p] for p in start) == 100
    assert end == {("t", 0): 90, ("t", 1): 10, ("u", 0): 100}
    assert off.spread_limit(start, latest, rows_max=10**6) == latest
    tiny = off.spread_limit({0: 0, 1: 0}, {0: 1, 1: 1}, rows_max=1)
    assert sum(tiny.values()) == 1


def test_min_offsets_per_trigger_waits_for_enough_records_or_the_trigger_delay() -> None:
    begin, latest = {"a": 0, "b": 0}, {"a": 30, "b": 10}

    def admit(latest: dict[str, int], now_ms: int, last_ms: int) -> tuple[dict[str, int], int]:
        return off.admit(
            begin, latest, rows_min=100, rows_max=None, delay_ms_max=60_000, now_ms=now_ms,
            last_trigger_ms=last_ms,
        )  # fmt: skip

    # The first trigger runs (no batch ran yet), as in Kafka.
    assert admit(latest, 1_000_000, 0) == (latest, 1_000_000)
    # 40 records < 100 and the delay has not passed: skipped, the clock unchanged.
    assert admit(latest, 1_030_000, 1_000_000) == (begin, 1_000_000)
    # Enough records: runs.
    more = {"a": 90, "b": 20}
    assert admit(more, 1_031_000, 1_000_000) == (more, 1_031_000)
    # The delay passed: runs with what there is.
    assert admit(latest, 1_060_000, 1_000_000) == (latest, 1_060_000)


def test_min_and_max_offsets_per_trigger_combine() -> None:
    end, _ = off.admit(
        {"a": 0}, {"a": 1000}, rows_min=100, rows_max=300, delay_ms_max=1, now_ms=5,
        last_trigger_ms=5,
    )  # fmt: skip
    assert end == {"a": 300}


def test_stream_offsets_are_json_sorted_by_topic_then_partition() -> None:
    offset = off.to_stream_offset({("t", 10): 1, ("t", 2): 5, ("a", 0): 7, ("t", 0): 3})
    assert json.dumps(offset) == '{"a": {"0": 7}, "t": {"0": 3, "2": 5, "10": 1}}'
    back = off.from_stream_offset(json.loads(json.dumps(offset)))
    assert back == {("a", 0): 7, ("t", 0): 3, ("t", 2): 5, ("t", 10): 1}
