"""The `replog` command against a real server: round trips, formats, errors, exit codes."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration

TIMEOUT_S = 60


def replog(
    *args: str, stdin: bytes = b"", address: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    cmd = [sys.executable, "-m", "replog", *args]
    if address is not None:
        cmd += ["--address", address]
    return subprocess.run(cmd, input=stdin, capture_output=True, timeout=TIMEOUT_S, check=False)


def test_produce_lines_then_consume_them_back_as_text_json_and_hex(
    shared_server: ServerProcess,
) -> None:
    addr = shared_server.address
    assert replog("topic", "create", "cli-lines", "--partitions", "1", address=addr).returncode == 0
    lines = b"".join(b"line %d\n" % i for i in range(3000))
    produced = replog("produce", "cli-lines", "--batch-records", "1000", stdin=lines, address=addr)
    assert produced.returncode == 0, produced.stderr
    assert b"produced 3000 records" in produced.stdout
    # Offset 0 holds the epoch marker of the topic's first leader (a cluster of one), and
    # each idempotent batch one more offset for its header (3 batches of 1000 here).
    assert b"partition 0 offsets 2..3003" in produced.stdout

    text = replog("consume", "cli-lines", address=addr)
    assert text.returncode == 0
    assert text.stdout == lines

    js = replog("consume", "cli-lines", "--from", "3002", "--format", "json", address=addr)
    rows = [json.loads(line) for line in js.stdout.splitlines()]
    # A new topic holds envelopes (the default): each record also has the producer's time.
    stamps = [row.pop("timestamp_ms") for row in rows]
    assert rows == [
        {"partition": 0, "offset": 3002, "value": "line 2998"},
        {"partition": 0, "offset": 3003, "value": "line 2999"},
    ]
    assert all(isinstance(t, int) and t > 1_700_000_000_000 for t in stamps), stamps
    hexed = replog("consume", "cli-lines", "-n", "1", "--format", "hex", address=addr)
    assert hexed.stdout == b"line 0".hex().encode() + b"\n"

    offsets = replog("offsets", "cli-lines", address=addr)
    assert offsets.stdout.splitlines()[1].split() == [b"0", b"0", b"3004", b"3004"]


def test_length_prefixed_records_keep_newlines_and_binary_bytes(
    shared_server: ServerProcess,
) -> None:
    addr = shared_server.address
    replog("topic", "create", "cli-binary", address=addr)
    values = [b"a\nb", b"\x00\xff", b""]
    stdin = b"".join(struct.pack(">I", len(v)) + v for v in values)
    produced = replog(
        "produce", "cli-binary", "--format", "length-prefixed", stdin=stdin, address=addr
    )
    assert produced.returncode == 0, produced.stderr
    js = replog("consume", "cli-binary", "--format", "json", address=addr)
    rows = [json.loads(line) for line in js.stdout.splitlines()]
    assert rows[0]["value"] == "a\nb"
    assert rows[1]["value_base64"] == "AP8="
    assert rows[2]["value"] == ""


def test_consume_follow_prints_records_as_they_arrive(shared_server: ServerProcess) -> None:
    addr = shared_server.address
    replog("topic", "create", "cli-follow", address=addr)
    cmd = [sys.executable, "-m", "replog", "consume", "cli-follow", "--follow", "-n", "5"]
    cmd += ["-a", addr]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        replog("produce", "cli-follow", stdin=b"1\n2\n3\n4\n5\n6\n", address=addr)
        out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out == b"1\n2\n3\n4\n5\n"


def test_produce_from_a_pipe_sends_each_line_before_the_pipe_closes(
    shared_server: ServerProcess,
) -> None:
    """`tail -f log | replog produce T`: a line is acknowledged while stdin stays open."""
    addr = shared_server.address
    replog("topic", "create", "cli-pipe", address=addr)
    cmd = [sys.executable, "-m", "replog", "produce", "cli-pipe", "-a", addr]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None
    try:
        proc.stdin.write(b"first\n")
        proc.stdin.flush()
        deadline = time.monotonic() + TIMEOUT_S
        while (seen := replog("consume", "cli-pipe", address=addr).stdout) != b"first\n":
            assert time.monotonic() < deadline, f"not produced while the pipe is open: {seen!r}"
            assert proc.poll() is None
        proc.stdin.write(b"second\n")
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert b"produced 2 records" in out
    assert replog("consume", "cli-pipe", address=addr).stdout == b"first\nsecond\n"


def test_topic_list_describe_and_delete(shared_server: ServerProcess) -> None:
    addr = shared_server.address
    replog("topic", "create", "cli-admin", "-p", "2", address=addr)
    listed = replog("topic", "list", address=addr)
    assert b"cli-admin\t2" in listed.stdout.splitlines()
    described = replog("topic", "describe", "cli-admin", address=addr)
    assert len(described.stdout.splitlines()) == 3
    assert replog("topic", "delete", "cli-admin", address=addr).returncode == 0
    assert b"cli-admin" not in replog("topic", "list", address=addr).stdout


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("consume", "cli-missing"), b"UNKNOWN_TOPIC"),
        (("topic", "create", "bad/name"), b"INVALID_TOPIC_NAME"),
        (("topic", "delete", "cli-missing"), b"UNKNOWN_TOPIC"),
        (("offsets", "cli-missing"), b"UNKNOWN_TOPIC"),
    ],
)
def test_errors_print_the_reason_and_exit_non_zero(
    shared_server: ServerProcess, args: tuple[str, ...], reason: bytes
) -> None:
    result = replog(*args, address=shared_server.address)
    assert result.returncode == 1
    assert reason in result.stderr
    assert b"Traceback" not in result.stderr


def test_an_unreachable_server_is_a_clear_error() -> None:
    result = replog("topic", "list", address="127.0.0.1:1")
    assert result.returncode == 1
    assert b"CONNECT_FAILED" in result.stderr
    assert b"nothing listens on 127.0.0.1:1" in result.stderr


def test_bad_settings_exit_with_usage_code(tmp_path: object) -> None:
    result = replog("serve", "--flush", "sometimes", "--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert b"flush must be" in result.stderr


@pytest.mark.parametrize(
    "args",
    [(), ("serve",), ("topic",), ("topic", "create"), ("produce",), ("consume",), ("offsets",)],
)
def test_every_command_has_help(args: tuple[str, ...]) -> None:
    result = replog(*args, "--help")
    assert result.returncode == 0
    assert b"usage: replog" in result.stdout


def test_serve_on_a_port_in_use_fails_with_a_clear_message(
    shared_server: ServerProcess, tmp_path: Path
) -> None:
    result = replog("serve", "--data-dir", str(tmp_path), "--listen", shared_server.address)
    assert result.returncode == 1
    assert b"cannot listen on" in result.stderr
    assert b"Traceback" not in result.stderr


def test_serve_on_an_unusable_data_dir_fails_with_a_clear_message(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = replog("serve", "--data-dir", str(blocker / "data"), "--listen", "127.0.0.1:0")
    assert result.returncode == 1
    assert b"replog: error" in result.stderr
    assert b"Traceback" not in result.stderr
