"""The Spark source's and sink's options: Kafka's names and rules, checked without Spark."""

from __future__ import annotations

import logging

import pytest

from replog.errors import InvalidArgumentError
from replog.spark import offsets as off
from replog.spark.options import SinkOptions, SourceOptions, Subscription, duration_ms
from replog.spark.reading import offsets_for_times

BASE = {"kafka.bootstrap.servers": "a:1,b:2", "subscribe": "t"}


def parse(**extra: str) -> SourceOptions:
    # Spark hands the options over with lower-cased keys.
    return SourceOptions.parse({k.lower(): v for k, v in {**BASE, **extra}.items()})


def test_kafkas_option_names_are_understood() -> None:
    opts = parse(
        maxOffsetsPerTrigger="500",
        minOffsetsPerTrigger="100",
        maxTriggerDelay="30s",
        minPartitions="4",
        maxRecordsPerPartition="1000",
        failOnDataLoss="FALSE",
        includeHeaders="true",
        startingOffsets="earliest",
    )
    assert opts.bootstrap == "a:1,b:2"
    assert opts.subscription == Subscription("subscribe", topics=("t",))
    assert (opts.max_offsets_per_trigger, opts.min_offsets_per_trigger) == (500, 100)
    assert opts.trigger_delay_ms_max == 30_000
    assert (opts.min_partitions, opts.records_per_task_max) == (4, 1000)
    assert opts.fail_on_data_loss is False and opts.include_headers is True
    assert opts.starting == off.EARLIEST and opts.ending is None


def test_replogs_older_names_are_aliases() -> None:
    opts = SourceOptions.parse(
        {"bootstrap": "a:1", "topic": "x,y", "maxrecordspertrigger": "7", "maxrecordspertask": "9"}
    )
    assert opts.bootstrap == "a:1"
    assert opts.subscription.topics == ("x", "y")
    assert (opts.max_offsets_per_trigger, opts.records_per_task_max) == (7, 9)


def test_an_option_and_its_alias_with_different_values_are_rejected() -> None:
    with pytest.raises(InvalidArgumentError, match="give only one of maxOffsetsPerTrigger"):
        parse(maxOffsetsPerTrigger="5", maxRecordsPerTrigger="6")


def test_unknown_options_are_rejected_by_name_with_the_closest_known_one() -> None:
    with pytest.raises(InvalidArgumentError) as err:
        parse(maxOfsetsPerTrigger="5", colour="blue")
    message = str(err.value)
    assert "unknown option 'maxofsetspertrigger' (did you mean 'maxOffsetsPerTrigger'?)" in message
    assert "unknown option 'colour'" in message


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("kafka.security.protocol", "replog is not a Kafka client"),
        ("groupIdPrefix", "Spark's checkpoint holds the offsets"),
        ("kafka.group.id", "Spark's checkpoint holds the offsets"),
    ],
)
def test_kafka_options_without_a_meaning_for_replog_are_rejected_with_the_reason(
    key: str, reason: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=reason):
        parse(**{key: "x"})


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"failOnDataLoss": "yes"}, "failOnDataLoss must be true or false"),
        ({"includeHeaders": "1"}, "includeHeaders must be true or false"),
        ({"minPartitions": "0"}, "minPartitions must be >= 1"),
        ({"maxRecordsPerPartition": "0"}, "maxRecordsPerPartition must be >= 1"),
        ({"maxOffsetsPerTrigger": "many"}, "maxOffsetsPerTrigger must be an integer"),
        ({"minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "is higher than"),
        ({"maxTriggerDelay": "soon"}, "maxTriggerDelay must be a duration"),
        ({"startingOffsetsByTimestampStrategy": "skip"}, "must be error or latest"),
        ({"subscribePattern": "t.*"}, "exactly one of the options subscribe"),
    ],
)
def test_option_values_are_checked_as_kafka_checks_them(
    extra: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse(**extra)


def test_a_bootstrap_list_and_a_topic_choice_are_required() -> None:
    with pytest.raises(InvalidArgumentError, match=r"kafka\.bootstrap\.servers"):
        SourceOptions.parse({"subscribe": "t"})
    with pytest.raises(InvalidArgumentError, match="exactly one of the options subscribe"):
        SourceOptions.parse({"kafka.bootstrap.servers": "a:1"})


def test_subscribe_pattern_matches_whole_names_and_skips_internal_topics() -> None:
    sub = Subscription.parse({"subscribePattern": "orders-.*"})
    assert sub.matches("orders-eu") and not sub.matches("old-orders-eu")
    assert not Subscription.parse({"subscribePattern": ".*"}).matches("__offsets")
    with pytest.raises(InvalidArgumentError, match="not a regular expression"):
        Subscription.parse({"subscribePattern": "("})


def test_assign_takes_kafkas_json_of_topics_and_partition_lists() -> None:
    sub = Subscription.parse({"assign": '{"b": [1, 0], "a": [2]}'})
    assert sub.assigned == (("a", 2), ("b", 0), ("b", 1))
    for bad in ('["a"]', '{"a": 1}', '{"a": ["0"]}', '{"a": []}', "{}"):
        with pytest.raises(InvalidArgumentError, match="assign"):
            Subscription.parse({"assign": bad})


def test_batch_queries_refuse_a_latest_start_and_an_earliest_end() -> None:
    with pytest.raises(InvalidArgumentError, match="startingOffsets can't be latest"):
        parse(startingOffsets="latest").for_batch()
    with pytest.raises(InvalidArgumentError, match="startingOffsets can't be latest"):
        parse(startingOffsets='{"t": {"0": -1}}').for_batch()
    with pytest.raises(InvalidArgumentError, match="endingOffsets can't be earliest"):
        parse(endingOffsets='{"t": {"0": -2}}').for_batch()


def test_per_trigger_options_in_a_batch_query_are_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="replog.spark"):
        parse(maxOffsetsPerTrigger="5").for_batch()
    assert "maxOffsetsPerTrigger is ignored in batch queries" in caplog.text


@pytest.mark.parametrize("option", ["endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"])
def test_streaming_queries_refuse_an_end(option: str) -> None:
    value = "latest" if option == "endingOffsets" else '{"t": {"0": 5}}'
    if option == "endingTimestamp":
        value = "5"
    with pytest.raises(InvalidArgumentError, match=f"{option} is not valid in streaming"):
        parse(**{option: value}).for_stream()


def test_offsets_by_time_ask_one_list_offsets_per_topic_and_timestamp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from replog.client.results import Offsets
    from replog.spark import reading

    asked: list[tuple[str, list[int], int | None]] = []

    class FakeClient:
        def list_offsets(
            self, topic: str, partitions: list[int], *, timestamp_ms: int | None = None
        ) -> list[Offsets]:
            asked.append((topic, partitions, timestamp_ms))
            # partition 0 has a record that recent (at offset 7), the others none
            return [
                Offsets(p, 0, 10, 10, 7 if p == 0 else 10, 1 if p == 0 else None)
                for p in partitions
            ]

    monkeypatch.setattr(reading, "client_of", lambda opts: FakeClient())
    opts = parse(startingTimestamp="5")
    found = offsets_for_times(opts, "startingTimestamp", {("t", 0): 5, ("t", 1): 5, ("u", 0): 9})
    assert found == {("t", 0): 7, ("t", 1): None, ("u", 0): 7}
    assert sorted(asked) == [("t", [0, 1], 5), ("u", [0], 9)]


def test_durations_use_sparks_units() -> None:
    assert [duration_ms(s, "d") for s in ("250", "250ms", "2s", "15m", "1h", "1d")] == [
        250, 250, 2000, 900_000, 3_600_000, 86_400_000,
    ]  # fmt: skip


def test_sink_options_take_kafkas_names_and_acks_vocabulary() -> None:
    opts = SinkOptions.parse({"kafka.bootstrap.servers": "a:1", "kafka.acks": "1"})
    assert (opts.bootstrap, opts.topic, opts.acks) == ("a:1", None, "leader")
    assert SinkOptions.parse({"bootstrap": "a:1", "topic": "t", "acks": "all"}).acks == "all"
    assert SinkOptions.parse({"bootstrap": "a:1", "checkpointlocation": "/c"}).topic is None
    with pytest.raises(InvalidArgumentError, match="unknown option 'topics'"):
        SinkOptions.parse({"bootstrap": "a:1", "topics": "t"})
    with pytest.raises(InvalidArgumentError, match=r"kafka\.acks"):
        SinkOptions.parse({"bootstrap": "a:1", "acks": "2"})
