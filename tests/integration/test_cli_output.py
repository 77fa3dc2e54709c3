"""The `replog` command's machine and human comforts against a real server: `--output json`
on read-only commands, and progress on stderr that never mixes into stdout."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration

TIMEOUT_S = 60


def replog(
    *args: str, address: str | None = None, stdin: bytes | IO[bytes] = b""
) -> subprocess.CompletedProcess[bytes]:
    cmd = [sys.executable, "-m", "replog", *args]
    if address is not None:
        cmd += ["--address", address]
    if isinstance(stdin, bytes):
        return subprocess.run(cmd, input=stdin, capture_output=True, timeout=TIMEOUT_S, check=False)
    return subprocess.run(cmd, stdin=stdin, capture_output=True, timeout=TIMEOUT_S, check=False)


def json_document(done: subprocess.CompletedProcess[bytes]) -> Any:
    """The whole of stdout parses as one JSON document."""
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_topic_list_describe_and_offsets_print_one_json_document_with_stable_keys(
    shared_server: ServerProcess,
) -> None:
    addr = shared_server.address
    assert replog("topic", "create", "out-json", "-p", "2", address=addr).returncode == 0
    produced = replog("produce", "out-json", "-p", "1", stdin=b"a\nb\nc\n", address=addr)
    assert produced.returncode == 0, produced.stderr

    listed = json_document(replog("topic", "list", "--output", "json", address=addr))
    assert {"name": "out-json", "partitions": 2} in listed["topics"]
    assert listed["topics"] == sorted(listed["topics"], key=lambda t: t["name"])

    described = json_document(replog("topic", "describe", "out-json", "-o", "json", address=addr))
    assert described["topic"] == "out-json"
    assert [p["partition"] for p in described["partitions"]] == [0, 1]
    p1 = described["partitions"][1]
    assert set(p1) == {
        "partition", "leader_id", "epoch", "replicas", "log_start_offset", "high_watermark",
        "log_end_offset", "segment_count", "size_bytes", "replica_status", "corrupt_ranges",
        "observers", "target_replicas", "reassignment_step", "reassignment_error",
    }  # fmt: skip
    # the same numbers as the text table (the leader may write a control marker first)
    text = replog("topic", "describe", "out-json", address=addr).stdout.splitlines()[2].split()
    assert [p1["log_start_offset"], p1["high_watermark"], p1["log_end_offset"]] == [
        int(text[4]),
        int(text[5]),
        int(text[6]),
    ]
    assert p1["high_watermark"] - p1["log_start_offset"] >= 3
    assert isinstance(p1["replicas"], list)
    assert p1["size_bytes"] > 0

    offsets = json_document(replog("offsets", "out-json", "-o", "json", address=addr))
    keys = ["partition", "earliest", "latest", "log_end_offset"]
    table = replog("offsets", "out-json", address=addr).stdout.splitlines()[1:]
    assert offsets == {
        "topic": "out-json",
        "partitions": [dict(zip(keys, map(int, row.split()), strict=True)) for row in table],
    }
    assert offsets["partitions"][1]["latest"] == p1["high_watermark"]


def test_json_output_keeps_errors_on_stderr_and_the_exit_code(
    shared_server: ServerProcess,
) -> None:
    done = replog("offsets", "out-missing", "-o", "json", address=shared_server.address)
    assert done.returncode == 1
    assert done.stdout == b""
    assert b"UNKNOWN_TOPIC" in done.stderr


def test_text_output_is_unchanged_by_default(shared_server: ServerProcess) -> None:
    addr = shared_server.address
    replog("topic", "create", "out-text", address=addr)
    done = replog("offsets", "out-text", address=addr)
    assert done.stdout.splitlines()[0] == b"partition\tearliest\tlatest\tlog_end"


def test_verify_reports_a_stopped_nodes_files_as_json(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = server_factory().start()
    replog("topic", "create", "out-verify", address=server.address)
    replog("produce", "out-verify", stdin=b"x\ny\n", address=server.address)
    assert server.terminate() == 0
    report = json_document(replog("verify", str(server.data_dir), "-o", "json"))
    assert report["ok"] is True
    (entry,) = report["data_dirs"]
    assert entry["data_dir"] == str(server.data_dir)
    assert entry["ok"] is True
    assert entry["records"] >= 2
    assert entry["findings"] == [] or all(f["severity"] != "error" for f in entry["findings"])


def test_produce_from_a_file_with_progress_keeps_stdout_to_the_summary(
    shared_server: ServerProcess, tmp_path: Path
) -> None:
    addr = shared_server.address
    replog("topic", "create", "out-progress", address=addr)
    source = tmp_path / "records.txt"
    source.write_bytes(b"".join(b"record %d\n" % i for i in range(20_000)))
    with source.open("rb") as stdin:
        done = replog(
            "produce", "out-progress", "--progress", "--batch-records", "500",
            stdin=stdin, address=addr,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (summary,) = done.stdout.splitlines()
    found = re.fullmatch(
        rb"produced 20000 records to out-progress: partition 0 offsets (\d+)\.\.(\d+) \(.*\)",
        summary,
    )
    assert found is not None, summary
    # 40 idempotent batches: a header offset before each, 39 of them inside the range
    assert int(found[2]) - int(found[1]) == 19_999 + 39
    assert b"records/s" in done.stderr
    assert b"ETA" in done.stderr  # a regular file: its size is known
    assert b"produced 20,000 records" in done.stderr


def test_consume_until_latest_with_progress_prints_only_records_on_stdout(
    shared_server: ServerProcess,
) -> None:
    addr = shared_server.address
    replog("topic", "create", "out-consume", address=addr)
    lines = b"".join(b"value %d\n" % i for i in range(5000))
    assert replog("produce", "out-consume", stdin=lines, address=addr).returncode == 0

    done = replog("consume", "out-consume", "--until-latest", "--progress", address=addr)
    assert done.returncode == 0, done.stderr
    assert done.stdout == lines
    assert b"consumed 5,000 records" in done.stderr
    assert b"ETA" in done.stderr

    quiet = replog("consume", "out-consume", "--until-latest", address=addr)
    assert quiet.stdout == lines
    assert quiet.stderr == b""  # stderr is a pipe here: no progress unless asked


def test_follow_and_until_latest_together_are_a_usage_error(
    shared_server: ServerProcess,
) -> None:
    done = replog("consume", "out-any", "--follow", "--until-latest", address=shared_server.address)
    assert done.returncode == 2
    assert b"exclude each other" in done.stderr
