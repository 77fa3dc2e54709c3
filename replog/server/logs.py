"""Structured logs: one event name plus key=value fields per line, or one JSON object.

    ts=2026-11-22T08:00:00.123Z level=info event=server.serving address=127.0.0.1:7070

Use `log(logger, "event.name", key=value, ...)`; `configure(fmt, level)` picks the format.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

_FIELDS = "replog_fields"


def log(
    logger: logging.Logger,
    event: str,
    level: int = logging.INFO,
    *,
    exc_info: BaseException | tuple[Any, Any, Any] | None = None,
    **fields: Any,
) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, event, exc_info=exc_info, extra={_FIELDS: fields})


def _timestamp(record: logging.LogRecord) -> str:
    ms = int(record.msecs)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{ms:03d}Z"


def _quote(value: object) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' ="\n'):
        return json.dumps(text)
    return text


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = getattr(record, _FIELDS, {})
        parts = [
            f"ts={_timestamp(record)}",
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
            f"event={_quote(record.getMessage())}",
        ]
        parts.extend(f"{k}={_quote(v)}" for k, v in fields.items())
        if record.exc_info:
            parts.append(f"exc={_quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        body.update(getattr(record, _FIELDS, {}))
        if record.exc_info:
            body["exc"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str)


def configure(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class Throttle:
    """At most `events_max` log lines per `interval_s` for one kind of event (input a client
    controls, such as malformed requests, must not flood the log). `allow()` says whether to
    log now, and how many were dropped since the last line that was logged."""

    def __init__(
        self, events_max: int, interval_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.events_max = events_max
        self.interval_s = interval_s
        self._clock = clock
        self._window_start = -float("inf")
        self._in_window = 0
        self.suppressed = 0

    def allow(self) -> tuple[bool, int]:
        now = self._clock()
        if now - self._window_start >= self.interval_s:
            self._window_start, self._in_window = now, 0
        if self._in_window >= self.events_max:
            self.suppressed += 1
            return False, 0
        self._in_window += 1
        dropped, self.suppressed = self.suppressed, 0
        return True, dropped
