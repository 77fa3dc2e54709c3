"""Validation of everything the browser sends (query strings, form fields, path parts).

Every parser takes the raw text (or None when absent) and returns a typed value in range,
or raises `FormError` with a message for people (the text it echoes is cut to
`ECHO_CHARS_MAX`). Nothing here talks to the cluster: names the server knows better
(topics, groups) are only bounded in length here and checked by the server.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence

from replog.client.formats import parse_time_ms
from replog.errors import ReplogError

ECHO_CHARS_MAX = 40
NAME_CHARS_MAX = 255
SEARCH_CHARS_MAX = 200
OFFSET_MAX = 2**63 - 1
HEADERS_MAX = 100
PARTITIONS_MAX = 10_000
VALUE_BYTES_MAX = 1024 * 1024  # a test record's value (the node's --record-bytes-max decides)


class FormError(ValueError):
    """A browser input that is not acceptable; `message` is shown on the page."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def echo(text: str) -> str:
    """`text` as quoted in a message: cut, repr'd (no markup, no control characters)."""
    cut = text[:ECHO_CHARS_MAX] + ("..." if len(text) > ECHO_CHARS_MAX else "")
    return repr(cut)


def integer(text: str | None, what: str, low: int, high: int, default: int | None = None) -> int:
    if text is None or text.strip() == "":
        if default is None:
            raise FormError(f"{what} is required")
        return default
    text = text.strip()
    if not (text.isascii() and text.lstrip("-").isdigit()) or len(text) > 20:
        raise FormError(f"{what} must be a whole number, got {echo(text)}")
    value = int(text)
    if not low <= value <= high:
        raise FormError(f"{what} must be in [{low}, {high}], got {value}")
    return value


def optional_integer(text: str | None, what: str, low: int, high: int) -> int | None:
    if text is None or text.strip() == "":
        return None
    return integer(text, what, low, high)


def choice(text: str | None, what: str, choices: Sequence[str], default: str) -> str:
    if text is None or text == "":
        return default
    if text not in choices:
        raise FormError(f"{what} must be one of {', '.join(choices)}, got {echo(text)}")
    return text


def name(text: str | None, what: str) -> str:
    """A topic or group name: present, at most NAME_CHARS_MAX characters, printable."""
    if not text:
        raise FormError(f"{what} is required")
    if len(text) > NAME_CHARS_MAX or not text.isprintable():
        raise FormError(f"{what} must be at most {NAME_CHARS_MAX} printable characters")
    return text


def search(text: str | None) -> str:
    text = (text or "").strip()
    if len(text) > SEARCH_CHARS_MAX or not text.isprintable():
        raise FormError(f"search must be at most {SEARCH_CHARS_MAX} printable characters")
    return text


def start_offset(text: str | None) -> int | str:
    """ "earliest", "latest" or an offset."""
    if text is None or text.strip() in ("", "earliest"):
        return "earliest"
    if text.strip() == "latest":
        return "latest"
    return integer(text, "offset", 0, OFFSET_MAX)


def time_ms(text: str | None) -> int | None:
    """Milliseconds since the epoch from ms or an ISO 8601 time (None when empty)."""
    if text is None or text.strip() == "":
        return None
    if len(text) > 64:
        raise FormError("time must be ISO 8601 (2026-11-25T10:00:00Z) or milliseconds")
    try:
        return parse_time_ms(text.strip())
    except ReplogError as err:
        raise FormError(f"time: {err.message}") from None


def headers(text: str | None) -> list[tuple[str, bytes]]:
    """Lines of NAME=VALUE (empty lines skipped)."""
    out: list[tuple[str, bytes]] = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        header, sep, value = line.partition("=")
        if not sep or not header.strip():
            raise FormError(f"headers are lines of NAME=VALUE, got {echo(line)}")
        out.append((header.strip(), value.encode()))
    if len(out) > HEADERS_MAX:
        raise FormError(f"at most {HEADERS_MAX} headers")
    return out


def partitions(text: str | None) -> list[int]:
    """A comma-separated list of partitions ("" = none named)."""
    parts = [p for p in (text or "").replace(" ", "").split(",") if p]
    if len(parts) > PARTITIONS_MAX:
        raise FormError(f"at most {PARTITIONS_MAX} partitions")
    return sorted({integer(p, "partition", 0, 2**31 - 1) for p in parts})


def value_bytes(text: str | None) -> bytes:
    data = (text or "").encode()
    if len(data) > VALUE_BYTES_MAX:
        raise FormError(f"the value is {len(data)} bytes; at most {VALUE_BYTES_MAX} here")
    return data


CONFIGS_MAX = 100
CONFIG_VALUE_CHARS_MAX = 1000
PRINCIPAL_CHARS_MAX = 255


def config_name(text: str | None) -> str:
    """A topic config's name (the nodes know which exist: docs/api.md, Topic configs)."""
    text = (text or "").strip()
    if not text or len(text) > 100 or not all(c.isalnum() or c in "._-" for c in text):
        raise FormError(f"a config name is letters, digits, '.', '_' or '-', got {echo(text)}")
    return text


def config_value(text: str | None) -> str:
    text = (text or "").strip()
    if not text or len(text) > CONFIG_VALUE_CHARS_MAX or not text.isprintable():
        raise FormError(f"a config value is 1 to {CONFIG_VALUE_CHARS_MAX} printable characters")
    return text


def configs(text: str | None) -> dict[str, str]:
    """Lines of NAME=VALUE (empty lines skipped): a new topic's configs."""
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise FormError(f"configs are lines of NAME=VALUE, got {echo(line)}")
        out[config_name(key)] = config_value(value)
    if len(out) > CONFIGS_MAX:
        raise FormError(f"at most {CONFIGS_MAX} configs")
    return out


def principal(text: str | None) -> str:
    """`User:<name>` (or `User:*`); the nodes check the rest."""
    text = (text or "").strip()
    if not text.startswith("User:") or len(text) <= len("User:"):
        raise FormError(f"a principal is User:<name>, got {echo(text)}")
    if len(text) > PRINCIPAL_CHARS_MAX or not text.isprintable():
        raise FormError(f"a principal is at most {PRINCIPAL_CHARS_MAX} printable characters")
    return text


def quoted(text: str) -> str:
    """`text` as one path segment of a URL."""
    return urllib.parse.quote(text, safe="")
