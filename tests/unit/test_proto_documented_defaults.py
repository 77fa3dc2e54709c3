"""The defaults that the .proto comments promise are the server's: a client written from
`proto/` alone (the comments are its documentation) gets what they say. Each case reads the
comment from the .proto file and checks the server code behind it, so a change to either
side without the other fails here."""

from __future__ import annotations

import re
from pathlib import Path

from replog.server.control.topics import format_from_wire
from replog.server.groups import wire as groups_wire
from replog.server.settings import Settings
from replog.v1 import admin_pb2

PROTO = Path(__file__).resolve().parents[2] / "proto" / "replog" / "v1"
KIB = 1024


def comment_before(proto: str, field: str) -> str:
    """The comment lines just above the first line that declares `field` in `proto`."""
    lines = (PROTO / proto).read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if re.search(rf"\s{field} = \d+;", line))
    block: list[str] = []
    for line in reversed(lines[:at]):
        if not line.strip().startswith("//"):
            break
        block.insert(0, line.strip().removeprefix("//").strip())
    return " ".join(block)


def test_an_unset_topic_format_is_an_envelope_topic_with_create_time() -> None:
    assert "unset: TOPIC_FORMAT_ENVELOPE" in comment_before("admin.proto", "format")
    assert "unset: create time" in comment_before("admin.proto", "timestamp_type")
    assert format_from_wire(admin_pb2.CreateTopicRequest(name="t")) == ("envelope", "create_time")


def test_stream_from_batches_default_to_the_documented_stream_bytes_max() -> None:
    found = re.search(r"stream_bytes_max \((\d+) KiB by\s+default\)", _stream_from_comment())
    assert found is not None
    assert Settings().stream_bytes_max == int(found.group(1)) * KIB


def test_an_unset_rebalance_timeout_is_the_documented_one() -> None:
    text = comment_before("groups.proto", "rebalance_timeout_ms")
    found = re.search(r"0: (\d+); at most (\d+)", text)
    assert found is not None, text
    config = Settings().groups_config()
    assert groups_wire.rebalance_timeout(0, config) == int(found.group(1))
    assert config.rebalance_timeout_ms_max == int(found.group(2))


def _stream_from_comment() -> str:
    text = (PROTO / "log.proto").read_text()
    request = text[text.index("message StreamFromRequest") :]
    return " ".join(
        line.strip().removeprefix("//").strip()
        for line in request[: request.index("uint32 max_bytes")].splitlines()
        if line.strip().startswith("//")
    )
