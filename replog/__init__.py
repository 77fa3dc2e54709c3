"""replog: a replicated commit-log service.

`replog.Client` is the Python client (imported lazily, so that `replog.storage` users do not
load grpc); `replog.Record` a record with key, headers and timestamp for an envelope topic
(`replog.records`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The one place the version is written: pyproject.toml reads it ([tool.setuptools.dynamic]),
# so the wheel's metadata, `replog --version` and `replog.__version__` always agree.
__version__ = "0.1.0"

if TYPE_CHECKING:
    from replog.client import Client
    from replog.records import Record


def __getattr__(name: str) -> Any:
    if name == "Client":
        from replog.client import Client

        return Client
    if name == "Record":
        from replog.records import Record

        return Record
    raise AttributeError(f"module 'replog' has no attribute {name!r}")


def __dir__() -> list[str]:
    """`dir(replog)` shows the lazily imported `Client` and `Record` too."""
    return sorted({*globals(), *__all__})


__all__ = ["Client", "Record", "__version__"]
