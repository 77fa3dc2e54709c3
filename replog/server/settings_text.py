"""Settings from text: a flag's or env var's text as a field's type (`convert`), the
StatefulSet identity derived from the pod's host name (`derive_cluster`), and the one
host:port check (`is_address`). Used by `settings.Settings.from_sources` and `validate`."""

from __future__ import annotations

import enum
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from replog.errors import InvalidConfigError


def derive_cluster(values: dict[str, Any], env: Mapping[str, str]) -> None:
    """StatefulSet identity: peers from `peer_address_template` x `cluster_size`, this node's
    id from the ordinal ending its host name (`replog-2` -> node 3), and the advertised
    address from its own peer entry. Fills `values` in place; a no-op when not configured."""
    template = values.get("peer_address_template", "")
    size = values.get("cluster_size", 0)
    if not template and not size:
        return
    if not template or size < 1:
        raise InvalidConfigError(
            "invalid settings: cluster_size >= 1 and peer_address_template go together"
        )
    if "{ordinal}" not in template:
        raise InvalidConfigError("invalid settings: peer_address_template needs {ordinal}")
    if values.get("peers"):
        raise InvalidConfigError("invalid settings: give peers or peer_address_template, not both")
    addresses = {i + 1: template.replace("{ordinal}", str(i)) for i in range(size)}
    # With a peer listener, node i is dialed at the same host, on peer_listen's port.
    peer_port = values.get("peer_listen", "").rpartition(":")[2]
    values["peers"] = ",".join(
        f"{ident}={address}" + (f"/{address.rpartition(':')[0]}:{peer_port}" if peer_port else "")
        for ident, address in addresses.items()
    )
    if "node_id" not in values:
        hostname = env.get("HOSTNAME") or socket.gethostname()
        match = re.search(r"-(\d+)$", hostname)
        if match is None:
            raise InvalidConfigError(
                f"invalid settings: host name {hostname!r} does not end in -<ordinal>; set node_id"
            )
        values["node_id"] = int(match.group(1)) + 1
    if not values.get("advertised_address") and values["node_id"] in addresses:
        values["advertised_address"] = addresses[values["node_id"]]


def is_address(value: str) -> bool:
    host, sep, port = value.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 <= int(port) <= 65535)


def convert(name: str, type_name: str, kind: object, raw: object) -> object:
    """`raw` (a flag's or env var's text) as the field's type: an enum's value, a path, an
    integer, or the text itself."""
    text = str(raw)
    if type_name == "bool":
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off", ""):
            return False
        raise InvalidConfigError(f"invalid settings: {name} must be true or false, got {text!r}")
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        try:
            return kind(text)
        except ValueError:
            accepted = "|".join(str(member.value) for member in kind)
            raise InvalidConfigError(
                f"invalid settings: {name} must be {accepted}, got {text!r}"
            ) from None
    try:
        if "Path" in type_name:
            return Path(text) if text else None
        if "int" in type_name:
            if "None" in type_name and text.lower() in ("", "none"):
                return None
            return int(text.replace("_", ""))
    except ValueError:
        raise InvalidConfigError(
            f"invalid settings: {name} must be an integer, got {text!r}"
        ) from None
    return text
