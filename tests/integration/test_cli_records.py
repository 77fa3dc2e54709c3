"""The `replog` command with envelope topics: `topic create --format envelope`, `produce
--key --header`, `consume --format json` showing key, headers and timestamp."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.servers import ServerProcess
from tests.integration.test_cli import replog

pytestmark = pytest.mark.integration


def test_produce_with_key_and_headers_then_consume_them_as_json(
    shared_server: ServerProcess,
) -> None:
    addr = shared_server.address
    created = replog("topic", "create", "cli-env", "--format", "envelope", address=addr)
    assert created.returncode == 0, created.stderr
    before = int(time.time() * 1000)
    produced = replog(
        "produce",
        "cli-env",
        "--key",
        "customer-42",
        "--header",
        "trace=t-1",
        "--header",
        "bin=",
        stdin=b"first\nsecond\n",
        address=addr,
    )
    assert produced.returncode == 0, produced.stderr
    after = int(time.time() * 1000)
    js = replog("consume", "cli-env", "--format", "json", address=addr)
    assert js.returncode == 0, js.stderr
    rows = [json.loads(line) for line in js.stdout.splitlines()]
    assert [r["value"] for r in rows] == ["first", "second"]
    for row in rows:
        assert row["key"] == "customer-42"
        assert row["headers"] == [{"name": "trace", "value": "t-1"}, {"name": "bin", "value": ""}]
        assert before <= row["timestamp_ms"] <= after
    text = replog("consume", "cli-env", address=addr)
    assert text.stdout == b"first\nsecond\n"  # text shows values, as on a raw topic
    described = json.loads(
        replog("topic", "describe", "cli-env", "-o", "json", address=addr).stdout
    )
    assert (described["format"], described["timestamp_type"]) == ("envelope", "create_time")


def test_plain_lines_to_an_envelope_topic_become_records_without_key(
    shared_server: ServerProcess,
) -> None:
    addr = shared_server.address
    assert (
        replog(
            "topic",
            "create",
            "cli-env-plain",
            "--format",
            "envelope",
            "--timestamp-type",
            "log_append_time",
            address=addr,
        ).returncode
        == 0
    )
    assert replog("produce", "cli-env-plain", stdin=b"a\nb\n", address=addr).returncode == 0
    rows = [
        json.loads(line)
        for line in replog(
            "consume", "cli-env-plain", "--format", "json", address=addr
        ).stdout.splitlines()
    ]
    assert [(r["value"], "key" in r, "headers" in r) for r in rows] == [
        ("a", False, False),
        ("b", False, False),
    ]


def test_a_header_for_a_raw_topic_is_a_usage_error(shared_server: ServerProcess) -> None:
    addr = shared_server.address
    created = replog("topic", "create", "cli-raw-header", "--format", "raw", address=addr)
    assert created.returncode == 0
    refused = replog("produce", "cli-raw-header", "--header", "a=b", stdin=b"x\n", address=addr)
    assert refused.returncode != 0
    assert b"--header needs an envelope topic" in refused.stderr
    described = json.loads(
        replog("topic", "describe", "cli-raw-header", "-o", "json", address=addr).stdout
    )
    assert described["format"] == "raw"
