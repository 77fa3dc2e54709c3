from __future__ import annotations

import json
import logging

from replog.server.logs import JsonFormatter, KeyValueFormatter, log


def record(event: str, **fields: object) -> logging.LogRecord:
    captured: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, rec: logging.LogRecord) -> None:
            captured.append(rec)

    logger = logging.getLogger("replog.test.logs")
    logger.handlers[:] = [Keep()]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    log(logger, event, **fields)
    return captured[0]


def test_text_logs_are_key_value_pairs_with_quoting() -> None:
    line = KeyValueFormatter().format(record("server.serving", address="127.0.0.1:1", msg="a b"))
    assert "level=info" in line
    assert "event=server.serving" in line
    assert "address=127.0.0.1:1" in line
    assert 'msg="a b"' in line


def test_json_logs_are_one_object_per_line() -> None:
    line = JsonFormatter().format(record("rpc.error", method="Append", reason="EMPTY_BATCH"))
    body = json.loads(line)
    assert body["event"] == "rpc.error"
    assert (body["method"], body["reason"], body["level"]) == ("Append", "EMPTY_BATCH", "info")
