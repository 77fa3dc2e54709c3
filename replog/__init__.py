"""replog: a replicated commit-log service.

`replog.Client` is the Python client (imported lazily, so that `replog.storage` users do not
load grpc).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The one place the version is written: pyproject.toml reads it ([tool.setuptools.dynamic]),
# so the wheel's metadata, `replog --version` and `replog.__version__` always agree.
__version__ = "0.1.0"

if TYPE_CHECKING:
    from replog.client import Client


def __getattr__(name: str) -> Any:
    if name == "Client":
        from replog.client import Client

        return Client
    raise AttributeError(f"module 'replog' has no attribute {name!r}")


__all__ = ["Client", "__version__"]
