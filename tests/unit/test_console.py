"""The console's pure parts: how records are shown, input validation, the cluster merge,
and the request guard (host check, cross-site POSTs, headers) through Starlette's client."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from replog import frames, records
from replog.cli import run
from replog.console import display, forms
from replog.console.cluster import DOWN, NOT_READY, READY, merge
from replog.console.security import Guard, cross_site, host_name
from replog.console.server import ConsoleUsageError, parse_listen
from replog.v1 import admin_pb2

# -- display -------------------------------------------------------------------------------


def test_a_json_value_is_pretty_printed_and_other_text_is_said_not_to_be_json() -> None:
    shown, truncated, note = display.decode_value(b'{"id": 7, "ok": true}', "json")
    assert shown == '{\n  "id": 7,\n  "ok": true\n}' and not truncated and note == ""
    shown, _t, note = display.decode_value(b"plain words", "json")
    assert shown == "plain words" and note == "not JSON"


def test_undecodable_bytes_show_as_replacement_characters_in_text_and_exactly_in_hex() -> None:
    shown, _t, _n = display.decode_value(b"ok\xff", "text")
    assert shown == "ok\ufffd"
    shown, _t, _n = display.decode_value(b"ok\xff", "hex")
    assert shown == "00000000  6f 6b ff" + " " * 39 + "  ok."


def test_a_large_value_is_cut_for_display_and_says_so() -> None:
    value = b"x" * (display.SHOWN_BYTES_MAX + 10)
    for decoding in display.DECODINGS:
        _shown, truncated, _n = display.decode_value(value, decoding)
        assert truncated, decoding
    text, _t, _n = display.decode_value(value, "text")
    assert len(text) == display.SHOWN_BYTES_MAX


def test_envelope_records_show_key_headers_and_time_and_raw_ones_only_the_value() -> None:
    envelopes = records.encode_batch(
        [records.Record(b"v", key=b"k", headers=[("h", b"\x00\x01")], timestamp_ms=0)], 0
    )
    decoded = records.decode_values(envelopes, [5])
    (row,) = display.shown_records(decoded, "text", 10)
    assert (row.offset, row.key, row.headers, row.value) == (5, "k", (("h", "0x0001"),), "v")
    assert row.timestamp == "1970-01-01T00:00:00.000+00:00"
    raw = frames.DecodedFrames([3, 4], [b"a", b"b"])
    rows = list(display.shown_records(raw, "text", 1))
    assert [(r.offset, r.key, r.timestamp) for r in rows] == [(3, None, "")]


def test_sizes_read_in_binary_units() -> None:
    assert [display.size(n) for n in (0, 1023, 1536, 5 * 1024**3)] == [
        "0 B",
        "1023 B",
        "1.5 KiB",
        "5.0 GiB",
    ]


# -- forms ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("abc", "page must be a whole number, got 'abc'"),
        ("0", "page must be in [1, 100], got 0"),
        ("1e3", "page must be a whole number"),
        ("9" * 30, "page must be a whole number"),
        ("", "page is required"),
    ],
)
def test_numbers_out_of_range_or_not_numbers_are_refused_with_a_message(
    text: str, message: str
) -> None:
    with pytest.raises(forms.FormError) as caught:
        forms.integer(text, "page", 1, 100)
    assert caught.value.message.startswith(message)


def test_echoed_input_is_cut_and_quoted() -> None:
    with pytest.raises(forms.FormError) as caught:
        forms.choice("<script>" + "x" * 100, "decode", display.DECODINGS, "text")
    assert "'<script>xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...'" in caught.value.message


def test_start_offsets_times_headers_and_partition_lists_parse() -> None:
    assert forms.start_offset(None) == "earliest"
    assert forms.start_offset("latest") == "latest"
    assert forms.start_offset(" 42 ") == 42
    assert forms.time_ms("1970-01-01T00:00:01Z") == 1000
    assert forms.time_ms("") is None
    assert forms.headers("a=1\n\nb = x=y\n") == [("a", b"1"), ("b", b" x=y")]
    assert forms.partitions("2, 0,2") == [0, 2]
    for bad in (lambda: forms.time_ms("yesterday"), lambda: forms.headers("novalue")):
        with pytest.raises(forms.FormError):
            bad()
    with pytest.raises(forms.FormError):
        forms.name("a\nb", "topic")


# -- the cluster view ----------------------------------------------------------------------


def _meta(node_id: int, parts: list[tuple[int, int, list[int], int]]) -> admin_pb2.Metadata:
    meta = admin_pb2.Metadata(node_id=node_id)
    topic = meta.topics.add(name="orders", format=admin_pb2.TOPIC_FORMAT_ENVELOPE)
    for partition, leader, replicas, epoch in parts:
        topic.partitions.add(partition=partition, leader_id=leader, replicas=replicas, epoch=epoch)
    return meta


def test_merge_takes_each_partitions_leader_from_the_highest_epoch_and_flags_replicas() -> None:
    nodes = [(1, "a:1", READY, ""), (2, "a:2", DOWN, "refused"), (3, "a:3", NOT_READY, "")]
    stale = _meta(1, [(0, 2, [1, 2, 3], 4), (1, -1, [1, 3], 0)])  # node 1: old view
    fresh = _meta(3, [(0, 3, [1, 2, 3], 5), (1, -1, [1, 3], 0)])
    statuses, topics = merge(nodes, [stale, fresh])
    (orders,) = topics
    p0, p1 = orders.partitions
    assert (p0.leader_id, p0.epoch, p0.missing) == (3, 5, (2, 3))
    assert (p1.leader_id, p1.missing) == (None, (3,))
    assert orders.format == "envelope" and orders.offline == 1 and orders.under_replicated == 2
    assert [(s.node_id, s.leads, s.replicas) for s in statuses] == [(1, 0, 2), (2, 0, 1), (3, 1, 2)]


def test_node_zero_is_a_leader_like_any_other() -> None:
    _s, (orders,) = merge([(0, "a:0", READY, "")], [_meta(0, [(0, 0, [0], 1)])])
    assert orders.partitions[0].leader_id == 0 and orders.offline == 0


# -- the guard -----------------------------------------------------------------------------


async def _echo(request: Request) -> Response:
    return PlainTextResponse(f"{request.method} ok")


def _guarded(hosts: tuple[str, ...] = ("127.0.0.1",)) -> TestClient:
    routes = [Route("/", _echo, methods=["GET", "POST"])]
    app = Starlette(routes=routes, middleware=[Middleware(Guard, allowed_hosts=hosts)])
    return TestClient(app, base_url="http://127.0.0.1:8080")


def test_an_unknown_host_name_is_refused_so_dns_rebinding_reaches_nothing() -> None:
    client = _guarded()
    assert client.get("/").text == "GET ok"
    refused = client.get("/", headers={"host": "evil.example:8080"})
    assert refused.status_code == 400 and "--allowed-host" in refused.text
    assert _guarded(("*",)).get("/", headers={"host": "evil.example"}).status_code == 200


def test_cross_site_posts_are_refused_and_same_site_ones_pass() -> None:
    client = _guarded()
    assert client.post("/", headers={"origin": "http://127.0.0.1:8080"}).status_code == 200
    assert client.post("/", headers={"origin": "http://evil.example"}).status_code == 403
    assert client.post("/", headers={"sec-fetch-site": "cross-site"}).status_code == 403
    assert cross_site({"host": "a:1", "origin": "null"}) is not None
    assert host_name("[::1]:8080") == "[::1]" and host_name("a.b:80") == "a.b"


def test_every_answer_carries_a_strict_content_security_policy() -> None:
    resp = _guarded().get("/")
    assert "script-src 'self'" in resp.headers["content-security-policy"]
    assert resp.headers["x-frame-options"] == "DENY"


def test_a_listen_address_must_be_host_and_port() -> None:
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen("[::1]:8080") == ("::1", 8080)
    for bad in ("8080", "host:", "h:99999"):
        with pytest.raises(ConsoleUsageError):
            parse_listen(bad)


def test_the_console_command_refuses_bad_options_with_usage_exit_code(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("REPLOG_TLS_CA", "REPLOG_TLS_CERT", "REPLOG_TLS_KEY", "REPLOG_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert run(["console", "--listen", "8080"]) == 2
    assert "--listen wants host:port" in capsys.readouterr().err
    assert run(["console", "--token", "t", "--listen", "127.0.0.1:0"]) == 2
    assert "needs TLS" in capsys.readouterr().err
