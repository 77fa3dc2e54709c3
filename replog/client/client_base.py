"""What `Client` and `AsyncClient` share besides their calls: the options and their checks.

`ClientBase.__init__` takes every option of both twins (one signature, one set of checks);
the twin then makes its own locks, streams and pipeline (`_init_driver`, blocking or on
the event loop) and opens a channel to the first address, so that bad TLS files fail at
construction, not at the first call. The calls themselves are `client_calls.ClientCalls`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from replog.client import environment
from replog.client.channels import ATTEMPT_TIMEOUT_S, COMMIT_TIMEOUT_S, channel_options
from replog.client.client_calls import ClientCalls
from replog.client.retry import RetryPolicy
from replog.client.routing import Routing, split_addresses
from replog.client.sequences import Sequences
from replog.errors import InvalidArgumentError
from replog.tls import ClientTls
from replog.v1 import acl_pb2_grpc, admin_pb2_grpc, log_pb2_grpc


class Node:
    """One node's channel and stubs (on an asyncio channel, the stubs' calls are awaited)."""

    def __init__(self, address: str, channel: Any) -> None:
        self.address = address
        self.channel = channel
        self.acls = acl_pb2_grpc.AclsStub(channel)  # type: ignore[no-untyped-call]
        self.log = log_pb2_grpc.LogStub(channel)  # type: ignore[no-untyped-call]
        self.admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]


class ClientBase(ClientCalls):
    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = 30.0,
        attempt_timeout_s: float = ATTEMPT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        tls: ClientTls | None = None,
        token: str | None = None,
        idempotent: bool = True,
        producer_name: str = "",
        producer_resume: bool = False,
        streaming: bool = True,
        in_flight_bytes_max: int = 64 * 1024 * 1024,
    ) -> None:
        """`address`: one or several comma-separated bootstrap addresses (more nodes come
        from metadata). `timeout_s`: a call's whole budget; `attempt_timeout_s`: one
        attempt's deadline (at most `timeout_s`). `in_flight_bytes_max`: the bytes of
        appends sent and not answered yet, over all partitions (an append waits while
        another would pass it; one alone always goes). The rest: see the module doc."""
        if token is not None and tls is None:
            raise ValueError(
                "a bearer token needs TLS (tls=ClientTls(ca_file)): never in the clear"
            )
        if attempt_timeout_s <= 0 or timeout_s <= 0:
            raise ValueError("timeout_s and attempt_timeout_s must be > 0")
        if in_flight_bytes_max < 1:
            raise InvalidArgumentError("in_flight_bytes_max >= 1")
        self.address = address
        self.tls = tls
        self.token = token
        self.routing = Routing(split_addresses(address))
        self.timeout_s = timeout_s
        self.attempt_timeout_s = min(attempt_timeout_s, timeout_s)
        self.commit_timeout_s = max(self.attempt_timeout_s, min(timeout_s, COMMIT_TIMEOUT_S))
        self.retry = retry or RetryPolicy()
        self.idempotent = idempotent
        self.producer_name = producer_name
        self.producer_resume = producer_resume
        self.streaming = streaming
        self.in_flight_bytes_max = in_flight_bytes_max
        self._sequences = Sequences()
        self._formats: dict[str, str] = {}  # topic -> "raw" | "envelope" (formats.py)
        self._nodes: dict[str, Node] = {}
        self._init_driver()
        self._node(self.routing.current)  # bad TLS files fail here, not at the first call

    def _init_driver(self) -> None:
        """The twin's own state (locks, streams, pipeline)."""
        raise NotImplementedError

    def _node(self, address: str) -> Node:
        """The node at `address`, its channel opened on first use (the threaded twin holds
        its lock around this)."""
        node = self._nodes.get(address)
        if node is None:
            options = channel_options(self.attempt_timeout_s)
            made = self._open_channel(address, self.tls, options, self.token)
            node = self._nodes[address] = Node(address, made)
        return node

    @staticmethod
    def _open_channel(
        address: str, tls: ClientTls | None, options: list[tuple[str, Any]], token: str | None
    ) -> Any:
        """A channel to `address` (`tls.channel` or `tls.aio_channel`)."""
        raise NotImplementedError

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **options: Any) -> Self:
        """A client configured as the `replog` CLI is: `REPLOG_ADDRESS` (default
        127.0.0.1:7070), `REPLOG_TLS_CA`/`_CERT`/`_KEY`/`_SERVER_NAME`, `REPLOG_TOKEN`,
        `REPLOG_ATTEMPT_TIMEOUT` (`environment.from_env`; `replog dev-cluster --env-file`
        writes them). `options` are the constructor's keywords and win over the env."""
        conn = environment.from_env(env)
        given: dict[str, Any] = {"tls": conn.tls, "token": conn.token}
        given["attempt_timeout_s"] = conn.attempt_timeout_s
        return cls(conn.address, **{**given, **options})

    @property
    def known_nodes(self) -> tuple[str, ...]:
        """Every address this client may call: the bootstraps and the nodes metadata named."""
        return self.routing.known
