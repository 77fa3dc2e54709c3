"""The client's name for the gRPC error decoder, which lives in `replog.rpc_errors`.

The decoder is shared with the server (it forwards calls to leaders and decodes their
failures the same way), so it sits beside `replog.errors` rather than in this package;
`replog.client.errors` stays importable for code that used it.
"""

from __future__ import annotations

from replog.errors import DeadlineExceededError, TransportError, UnavailableError
from replog.rpc_errors import from_code, from_rpc_error

__all__ = [
    "DeadlineExceededError",
    "TransportError",
    "UnavailableError",
    "from_code",
    "from_rpc_error",
]
