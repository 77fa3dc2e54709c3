"""A client's gRPC channel settings and its two deadlines' defaults (sync and asyncio)."""

from __future__ import annotations

MESSAGE_BYTES_MAX = 4 * 1024 * 1024
ATTEMPT_TIMEOUT_S = 2.0  # the default per-attempt deadline (`Client(attempt_timeout_s=...)`)
COMMIT_TIMEOUT_S = 10.0  # ... of calls that wait for a metadata commit (at most `timeout_s`)
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
    ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
    # A node that stops answering (paused, hung, cut off) fails open calls with UNAVAILABLE
    # within ~15 s instead of at their deadline, so they are retried elsewhere.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
]  # the default's; each client's are `channel_options(attempt_timeout_s)`


def channel_options(attempt_timeout_s: float) -> list[tuple[str, int]]:
    """gRPC options of a client's channels: keepalive pings break an open stream (StreamFrom,
    AppendStream) to a node that stopped answering within about two attempt deadlines (the
    server bears any number of pings: `server.listeners`), a connection that is not up
    within one attempt deadline fails, and a node that is back is reconnected to within
    one attempt deadline."""
    ms = max(1_000, int(attempt_timeout_s * 1000))
    return [
        *CHANNEL_OPTIONS[:2],
        ("grpc.keepalive_time_ms", ms),
        ("grpc.keepalive_timeout_ms", ms),
        ("grpc.http2.max_pings_without_data", 0),
        # gRPC core takes the minimum reconnect backoff as the connect timeout too: a node
        # that accepts TCP but never speaks HTTP/2 (paused) fails the connection at once.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", ms),
        ("grpc.max_reconnect_backoff_ms", ms),
    ]
