"""Quotas: how fast a principal may use the cluster (`set_quota` metadata commands).

A `QuotaEntry` sets, for one principal ("User:<name>", or "User:*": the default for every
principal without an entry of its own, anonymous callers included), four rates; 0 is
unlimited:

    produce_bytes_per_s     record bytes appended (Append, AppendStream requests)
    fetch_bytes_per_s       bytes of Fetch and StreamFrom replies
    requests_per_s          Log, Admin, Acls and Groups calls (and AppendStream requests)
    metadata_writes_per_s   calls that write a `__cluster` record: CreateTopic, DeleteTopic,
                            InitProducer, group joins, ACL and quota changes, ...

Record value (JSON, in the `__cluster` log beside the other commands, `metadata.py`)::

    {"kind": "set_quota", "version": 1, "quota": {"principal": "User:alice",
     "produce_bytes_per_s": 1048576, "fetch_bytes_per_s": 0, "requests_per_s": 100,
     "metadata_writes_per_s": 5}}

An entry whose rates are all 0 removes the principal's entry. Applying is total: the last
`set_quota` of a principal wins. Pure: the image keeps the entries; `edge/quotas.py`
enforces them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from replog.errors import InvalidArgumentError

DEFAULT_PRINCIPAL = "User:*"
PRINCIPAL_BYTES_MAX = 255
RATE_MAX = 2**53  # an exact integer in JSON and in a float
QUOTAS_MAX = 10_000  # entries in the image: more are refused (LIMIT)
QUOTA_NAMES = ("produce_bytes", "fetch_bytes", "requests", "metadata_writes")


@dataclass(frozen=True, slots=True)
class QuotaEntry:
    principal: str
    produce_bytes_per_s: int = 0
    fetch_bytes_per_s: int = 0
    requests_per_s: int = 0
    metadata_writes_per_s: int = 0

    KIND = "set_quota"

    @classmethod
    def checked(cls, principal: str, **rates: int) -> QuotaEntry:
        """An entry, or InvalidArgumentError when a field is out of shape."""
        kind, sep, name = principal.partition(":")
        if not (sep and kind == "User" and name and len(principal) <= PRINCIPAL_BYTES_MAX):
            raise InvalidArgumentError(
                "a quota's principal is User:<name> (User:* : the default), at most 255 bytes"
            )
        for key, value in rates.items():
            if key not in RATE_FIELDS:
                raise InvalidArgumentError(f"unknown quota {key!r}: one of {list(RATE_FIELDS)}")
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidArgumentError(f"{key} must be an integer")
            if not 0 <= value <= RATE_MAX:
                raise InvalidArgumentError(f"{key} must be in [0, 2**53] (0: unlimited)")
        return cls(principal, **rates)

    def rate(self, quota: str) -> int:
        """The rate of `quota` (one of QUOTA_NAMES) per second; 0: unlimited."""
        value: int = getattr(self, quota + "_per_s")
        return value

    @property
    def removes(self) -> bool:
        return not any(self.rate(q) for q in QUOTA_NAMES)

    def as_dict(self) -> dict[str, Any]:
        return {"principal": self.principal, **{k: getattr(self, k) for k in RATE_FIELDS}}


RATE_FIELDS = tuple(f.name for f in fields(QuotaEntry) if f.name != "principal")


def decode_entry(value: object) -> QuotaEntry:
    """The entry a command's "quota" object holds (TypeError / InvalidArgumentError)."""
    if not isinstance(value, dict):
        raise TypeError("quota must be an object")
    principal = value["principal"]
    if not isinstance(principal, str):
        raise TypeError("quota principal must be a string")
    return QuotaEntry.checked(principal, **{k: value[k] for k in RATE_FIELDS})


def apply_quota(quotas: dict[str, QuotaEntry], entry: QuotaEntry) -> None:
    """Apply a committed `set_quota` (total: a new principal past QUOTAS_MAX is dropped;
    the metadata leader refuses it before proposing, `check_room`)."""
    if entry.removes:
        quotas.pop(entry.principal, None)
    elif entry.principal in quotas or len(quotas) < QUOTAS_MAX:
        quotas[entry.principal] = entry


def check_room(quotas: dict[str, QuotaEntry], entry: QuotaEntry) -> QuotaEntry:
    """`entry` if the image has room for it, else InvalidArgumentError."""
    if not entry.removes and entry.principal not in quotas and len(quotas) >= QUOTAS_MAX:
        raise InvalidArgumentError(f"at most {QUOTAS_MAX} quota entries")
    return entry


def quota_for(quotas: dict[str, QuotaEntry], principal: str) -> tuple[QuotaEntry | None, bool]:
    """The entry that applies to `principal` and whether it is the principal's own (False:
    the default, or none)."""
    own = quotas.get(principal)
    if own is not None:
        return own, True
    return quotas.get(DEFAULT_PRINCIPAL), False
