"""The producer's futures and delivery callbacks against a real server: `send` gives Kafka's
`RecordMetadata`, `on_delivery(err, metadata)` runs once per record on the producer's thread
(issue 29 item 2)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from replog import records
from replog.client import Client, RecordMetadata, RetryPolicy
from replog.client.produce_rules import DeliveryCallback
from replog.errors import InvalidArgumentError, ReplogError
from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration

WAIT_S = 30.0


@pytest.fixture
def client(shared_server: ServerProcess) -> Iterator[Client]:
    with Client(shared_server.address, timeout_s=30, retry=RetryPolicy(attempts_max=3)) as c:
        yield c


class Deliveries:
    """What `on_delivery` callbacks saw: (record name, error, metadata, thread name)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, BaseException | None, RecordMetadata | None, str]] = []

    def callback(self, name: str) -> DeliveryCallback:
        def on_delivery(err: BaseException | None, md: RecordMetadata | None) -> None:
            with self.lock:
                self.seen.append((name, err, md, threading.current_thread().name))

        return on_delivery


def test_send_gives_the_records_metadata_on_an_envelope_topic(client: Client) -> None:
    client.create_topic("md-envelope", 2)
    with client.producer("md-envelope", linger_ms=1) as producer:
        keyed = producer.send(b"value", key=b"k1", timestamp_ms=1_234)
        tomb = producer.send(None, key=b"k1")
        plain = producer.send(b"xy", partition=1)
        first, second, third = keyed.get(WAIT_S), tomb.result(WAIT_S), plain.result(WAIT_S)
    assert first.topic == "md-envelope" and first.partition == second.partition
    assert (first.timestamp_ms, first.serialized_key_size, first.serialized_value_size) == (
        1_234,
        2,
        5,
    )
    assert second.offset == first.offset + 1  # same key, same partition, in order
    assert (second.serialized_key_size, second.serialized_value_size) == (2, -1)
    assert second.timestamp_ms is not None and second.timestamp_ms > 1_234  # the send time
    assert (third.partition, third.serialized_key_size, third.serialized_value_size) == (1, -1, 2)
    stored = client.fetch("md-envelope", first.partition, first.offset).records
    assert isinstance(stored, records.DecodedRecords)
    assert stored.offsets[:2] == [first.offset, second.offset]
    assert stored.timestamps[0] == 1_234


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "unary"])
def test_on_delivery_runs_once_per_record_on_the_producers_thread_before_flush_returns(
    client: Client, streaming: bool
) -> None:
    topic = f"md-callbacks-{streaming}"
    client.create_topic(topic, 3, format="raw")
    seen = Deliveries()
    with client.producer(topic, linger_ms=2, batch_records_max=7, streaming=streaming) as p:
        futures = [
            p.send(b"v%d" % i, key=b"k%d" % i, on_delivery=seen.callback(str(i))) for i in range(50)
        ]
        p.flush(WAIT_S)
        assert len(seen.seen) == 50  # flush returns once every callback has run
        p.send(b"last", on_delivery=seen.callback("last"))
    assert sorted(name for name, *_ in seen.seen) == sorted([*map(str, range(50)), "last"])
    by_name = {name: (err, md, thread) for name, err, md, thread in seen.seen}
    for i, fut in enumerate(futures):
        err, md, thread = by_name[str(i)]
        assert err is None and md == fut.result(0)
        assert md.timestamp_ms is None  # a raw topic holds no time
        assert thread == "replog-producer"
    assert by_name["last"][1] is not None  # close delivered it too


def test_a_failed_record_is_delivered_with_its_error_and_a_raising_callback_is_logged(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    client.create_topic("md-errors", 1, format="raw")
    seen = Deliveries()

    def explode(err: BaseException | None, md: RecordMetadata | None) -> None:
        raise RuntimeError("the callback's own bug")

    caplog.set_level(logging.ERROR, "replog.client.producer")
    with client.producer("md-errors", linger_ms=1) as producer:
        too_big = producer.send(b"x" * 8192, on_delivery=seen.callback("too big"))
        with pytest.raises(InvalidArgumentError):
            too_big.result(WAIT_S)
        producer.flush(WAIT_S)
        ok = producer.send(b"fine", on_delivery=explode)
        after = producer.send(b"after", on_delivery=seen.callback("after"))
        producer.flush(WAIT_S)
        assert after.result(0).offset == ok.result(0).offset + 1  # the sender lives on
    [(_, err, md, _)] = [s for s in seen.seen if s[0] == "too big"]
    assert isinstance(err, ReplogError) and md is None
    assert [s[0] for s in seen.seen] == ["too big", "after"]
    assert "the callback's own bug" in caplog.text  # logged with its traceback, not hidden


def test_a_misspelt_producer_option_is_a_type_error(client: Client) -> None:
    client.create_topic("md-options", 1)
    with pytest.raises(TypeError, match="lingr_ms"):
        client.producer("md-options", lingr_ms=5)  # type: ignore[call-arg]
    with pytest.raises(InvalidArgumentError, match="acks"):
        client.producer("md-options", acks="al")
