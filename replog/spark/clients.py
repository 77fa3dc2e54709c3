"""One `Client` per Spark process and bootstrap address, shared by the source and the sink.

Executors unpickle plain option values and open their gRPC channels lazily, here, once per
process and address. Its own module so that `source.py` (which hands out the sink's writers)
and `sink.py` share it without importing each other.
"""

from __future__ import annotations

import threading

from replog.client import Client

_clients: dict[str, Client] = {}
_clients_lock = threading.Lock()


def client_for(bootstrap: str) -> Client:
    """The process's client for `bootstrap`, opened on first use."""
    with _clients_lock:
        client = _clients.get(bootstrap)
        if client is None:
            client = _clients[bootstrap] = Client(bootstrap)
        return client


def close_client(bootstrap: str) -> None:
    """Close and forget the process's client for `bootstrap`, if it has one."""
    with _clients_lock:
        client = _clients.pop(bootstrap, None)
    if client is not None:
        client.close()
