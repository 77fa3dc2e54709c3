"""A fault-injecting TCP proxy on 127.0.0.1 for partition tests.

`Proxy(upstream)` listens on a free loopback port and forwards each connection to
`upstream`; `cut()` drops every open connection and refuses new ones until `heal()`. Only
sockets it opened are touched; every thread is a daemon and ends when its sockets close.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._cut = False
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut:
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                self._drop(s)

    def _drop(self, s: socket.socket) -> None:
        with self._lock:
            self._open.discard(s)
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()

    def cut(self) -> None:
        self._cut = True
        with self._lock:
            doomed = list(self._open)
        for s in doomed:
            self._drop(s)

    def heal(self) -> None:
        self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()


class ProxyMesh:
    """One proxy per ordered node pair: `route(src, dst, address)` for DevCluster."""

    def __init__(self) -> None:
        self.proxies: dict[tuple[int, int], Proxy] = {}

    def route(self, src: int, dst: int, address: str) -> str:
        proxy = self.proxies[(src, dst)] = Proxy(address)
        return proxy.address

    def isolate(self, node: int) -> None:
        for (src, dst), proxy in self.proxies.items():
            if node in (src, dst):
                proxy.cut()

    def heal(self) -> None:
        for proxy in self.proxies.values():
            proxy.heal()

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()
