"""Fail fast with a hint, and fail over past a node that stopped answering (issue 25 item 6):
`connect` (what a failed connection means), `Routing` (who is passed over, for how long)
and the per-attempt deadline settings, without a server."""

from __future__ import annotations

import logging

import pytest

from replog import cli
from replog.client import channels, connect
from replog.client.routing import DEAD_SUSPECT_S, SUSPECT_S, Routing, needs_metadata
from replog.errors import (
    ConnectFailedError,
    DeadlineExceededError,
    InvalidArgumentError,
    LeaderUnknownError,
    NotLeaderError,
    UnavailableError,
)
from replog.spark import clients as spark_clients
from replog.spark.options import SinkOptions, SourceOptions
from replog.v1 import admin_pb2

A, B, C = "10.0.0.1:7070", "10.0.0.2:7070", "10.0.0.3:7070"
PREFIX = "failed to connect to all addresses; last error: "


def transport(details: str) -> UnavailableError:
    return UnavailableError(PREFIX + details, grpc_code="UNAVAILABLE")


REFUSED = transport(
    "UNKNOWN: ipv4:10.0.0.1:7070: Failed to connect to remote host: Connection refused"
)
VERIFY = transport(
    "UNKNOWN: ipv4:10.0.0.1:7070: Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: "
    "error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED: unable to get "
    "local issuer certificate: OK"
)
NOT_TLS = transport(
    "UNKNOWN: ipv4:10.0.0.1:7070: Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: "
    "error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER"
)
DNS = UnavailableError(
    "errors resolving nosuch.invalid:7070: [... Domain name not found]", grpc_code="UNAVAILABLE"
)


@pytest.mark.parametrize(
    ("err", "tls", "cause", "hint"),
    [
        (REFUSED, False, "refused", f"nothing listens on {A}"),
        (VERIFY, True, "certificate", "certificate verify failed: unable to get local issuer"),
        (NOT_TLS, True, "not_tls", "does not speak TLS"),
        (DNS, False, "dns", "cannot resolve"),
        (transport("before receiving SETTINGS frame"), False, "timeout", "did not answer"),
        (transport("Connection timed out"), False, "timeout", f"timed out connecting to {A}"),
    ],
)
def test_gRPCs_words_become_the_likely_cause(
    err: UnavailableError, tls: bool, cause: str, hint: str
) -> None:
    found = connect.diagnose(err, A, tls, probe=False)
    assert found is not None
    assert found[0] == cause and hint in found[1]


def test_an_answer_of_a_server_is_never_a_connection_failure() -> None:
    answered = LeaderUnknownError("no leader")  # a server's ErrorInfo: no grpc_code
    assert connect.diagnose(answered, A, False, probe=True) is None
    assert connect.diagnose(NotLeaderError("not me"), A, False, probe=True) is None


def test_a_tls_mismatch_is_final_once_every_bootstrap_failed() -> None:
    routing = Routing([A, B])
    assert connect.check(VERIFY, A, True, routing) is VERIFY  # B may be the right address
    err = connect.check(VERIFY, B, True, routing)
    assert isinstance(err, ConnectFailedError) and not err.retriable
    assert err.cause == "certificate" and err.code == "UNAVAILABLE"


def test_refused_is_final_only_when_every_bootstrap_refused_before_any_contact() -> None:
    routing = Routing([A, B])
    first = connect.check(REFUSED, A, False, routing)
    assert first is REFUSED and first.retriable  # B may answer
    second = connect.check(REFUSED, B, False, routing)
    assert isinstance(second, ConnectFailedError) and second.cause == "refused"

    known = Routing([A, B])
    known.answered(B)  # the cluster answered once: a refused node is a node restarting
    assert connect.check(REFUSED, A, False, known) is REFUSED
    assert connect.check(REFUSED, B, False, known) is REFUSED


def test_host_port_parsing() -> None:
    assert connect.host_port("127.0.0.1:7070") == ("127.0.0.1", 7070)
    assert connect.host_port("[::1]:7070") == ("::1", 7070)
    assert connect.host_port("dns:///replog:7070") is None
    assert connect.host_port("replog") is None


def metadata(*addresses: str, leader: int) -> admin_pb2.Metadata:
    meta = admin_pb2.Metadata()
    for i, address in enumerate(addresses, start=1):
        meta.nodes.add(id=i, address=address)
    topic = meta.topics.add(name="orders")
    topic.partitions.add(partition=0, leader_id=leader, replicas=[1, 2, 3])
    return meta


def test_a_node_whose_attempt_died_is_passed_over_until_it_answers() -> None:
    routing = Routing([A])
    routing.learn(metadata(A, B, C, leader=1))
    dead = DeadlineExceededError("Deadline Exceeded")
    raised = routing.failed(dead, A, idempotent=True, now=100.0)
    assert isinstance(raised, UnavailableError) and raised.retriable
    assert routing.suspect(A, now=100.0 + SUSPECT_S + 0.5)  # longer than a refused node
    assert not routing.suspect(A, now=100.0 + DEAD_SUSPECT_S + 0.1)
    routing.answered(A)
    assert not routing.suspect(A)


def test_metadata_naming_a_leader_that_stopped_answering_is_not_followed() -> None:
    routing = Routing([A])
    routing.learn(metadata(A, B, C, leader=1))
    assert routing.address("orders", 0) == A
    routing.failed(DeadlineExceededError("Deadline Exceeded"), A, idempotent=True)
    routing.learn(metadata(A, B, C, leader=1))  # a node that has not heard of the election
    assert routing.address("orders", 0) != A
    routing.learn(metadata(A, B, C, leader=3))  # the new leader
    assert routing.address("orders", 0) == C


def test_which_failures_send_the_retry_to_the_metadata_first() -> None:
    assert needs_metadata(LeaderUnknownError("between leaders"), A)
    assert needs_metadata(UnavailableError("no answer", grpc_code="DEADLINE_EXCEEDED"), A)
    assert needs_metadata(NotLeaderError("not me"), A)  # no hint
    assert not needs_metadata(NotLeaderError("not me", leader_address=B), B)  # hint followed
    assert needs_metadata(NotLeaderError("not me", leader_address=A), B)  # hint not followed


def test_the_attempt_deadline_defaults_agree_and_are_a_few_seconds() -> None:
    assert 1.0 <= channels.ATTEMPT_TIMEOUT_S <= 3.0
    assert cli.ATTEMPT_TIMEOUT_S == channels.ATTEMPT_TIMEOUT_S
    assert spark_clients.ATTEMPT_TIMEOUT_MS == channels.ATTEMPT_TIMEOUT_S * 1000
    args = cli.build_parser().parse_args(["topic", "list", "--attempt-timeout", "1.5"])
    assert args.attempt_timeout == 1.5
    opts = SourceOptions.parse({"bootstrap": "a:1", "subscribe": "t", "attempttimeout": "3s"})
    assert opts.attempt_timeout_ms == 3000
    with pytest.raises(InvalidArgumentError, match="attemptTimeout"):
        SourceOptions.parse({"bootstrap": "a:1", "subscribe": "t", "attempttimeout": "1ms"})


# -- the Spark sink: exactly once is never turned off quietly (issue 25 item 7) ------------


def test_a_streaming_sink_refuses_acks_0_unless_at_least_once_is_asked_for() -> None:
    opts = SinkOptions.parse({"bootstrap": "a:1", "kafka.acks": "0"})
    with pytest.raises(InvalidArgumentError, match=r"kafka\.acks=0.*exactlyOnce=false"):
        opts.exactly_once_for(streaming=True)
    assert opts.exactly_once_for(streaming=False) is False  # a batch write without sinkId


def test_exactly_once_false_is_a_warning_naming_the_option(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="replog.spark")
    opts = SinkOptions.parse({"bootstrap": "a:1", "kafka.acks": "0", "exactlyOnce": "false"})
    assert opts.exactly_once_for(streaming=True) is False
    assert "exactlyOnce=false with kafka.acks=0" in caplog.text
    assert "at least once" in caplog.text
    caplog.clear()
    assert SinkOptions.parse({"bootstrap": "a:1"}).exactly_once_for(streaming=True) is True
    assert caplog.text == ""


def test_the_spark_stream_writer_refuses_acks_0_and_the_batch_writer_takes_it() -> None:
    from pyspark.sql.types import BinaryType, StructField, StructType

    from replog.spark.sink import ReplogStreamWriter, ReplogWriter

    schema = StructType([StructField("value", BinaryType())])
    options = {"kafka.bootstrap.servers": "a:1", "topic": "t", "kafka.acks": "0"}
    with pytest.raises(InvalidArgumentError, match=r"kafka\.acks=0"):
        ReplogStreamWriter(options, schema)
    at_least_once = ReplogStreamWriter({**options, "exactlyOnce": "false"}, schema)
    assert at_least_once.exactly_once is False
    assert ReplogWriter(options, schema).exactly_once is False  # batch: no sinkId, as documented
    assert ReplogStreamWriter({**options, "kafka.acks": "1"}, schema).exactly_once is True


def test_a_hint_naming_a_node_whose_attempt_died_is_followed_after_an_election() -> None:
    # A slow leader (its attempt timed out under load) is not shunned for long: once the
    # replicas had time to elect another, a hint that still names it says it leads.
    routing = Routing([A])
    routing.learn(metadata(A, B, C, leader=1))
    routing.failed(DeadlineExceededError("Deadline Exceeded"), A, idempotent=True, now=100.0)
    hint = NotLeaderError("not me", leader_id=1, leader_address=A)
    assert routing.reroute(hint, "orders", 0, now=100.5) is False  # maybe stale: not followed
    assert routing.reroute(hint, "orders", 0, now=100.0 + SUSPECT_S + 0.1) is True
    assert routing.address("orders", 0) == A


def test_the_spark_pipelines_attempt_timeout_takes_seconds_like_the_cli() -> None:
    from replog.spark.pipeline import parse_args, spark_duration

    assert spark_duration("2.5") == "2500ms"
    assert spark_duration("1500ms") == "1500ms"
    assert spark_duration(None) is None
    base = ["--bootstrap", "a:1", "--topic", "t", "--output", "o", "--checkpoint", "c"]
    args = parse_args([*base, "--attempt-timeout", "3"])
    assert spark_duration(args.attempt_timeout) == "3000ms"
    opts = SourceOptions.parse(
        {"bootstrap": "a:1", "subscribe": "t", "attempttimeout": spark_duration("3") or ""}
    )
    assert opts.attempt_timeout_ms == 3000
