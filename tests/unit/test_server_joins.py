"""`Nodes.Join` (server/cluster/joins.py): who may join, and what a refusal looks like."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from replog.errors import (
    InvalidArgumentError,
    MembershipChangeRefusedError,
    PermissionDeniedError,
    ReplogError,
)
from replog.rpc_errors import from_rpc_error
from replog.server.cluster import joins
from replog.server.cluster.joins import Joins
from replog.server.edge.security import SAN_KEY, proves_node
from replog.server.metrics import Metrics
from replog.v1 import admin_pb2, nodes_pb2

POD = "replog-3.replog-headless.replog.svc.cluster.local"


class Context:
    """The part of a grpc.aio context the handler reads: the verified certificate's SANs."""

    def __init__(self, *sans: str) -> None:
        self.sans = sans

    def auth_context(self) -> dict[str, list[bytes]]:
        return {SAN_KEY: [s.encode() for s in self.sans]}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"

    async def abort(self, code: Any, details: str, trailing: Any = None) -> None:
        raise Aborted(code, details, trailing)


class Aborted(grpc.RpcError):
    """The call as the client sees it (decoded by the client's `from_rpc_error`)."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing: Any) -> None:
        self._code, self._details, self._trailing = code, details, trailing

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._trailing


class Members:
    def __init__(self) -> None:
        self.added: list[tuple[int, str, str]] = []

    async def add(self, node_id: int, address: str, peer_address: str) -> list[admin_pb2.Node]:
        self.added.append((node_id, address, peer_address))
        return [admin_pb2.Node(id=i, address=f"h{i}:7070") for i in (1, 2, 3, node_id)]


def test_a_certificate_proves_a_node_by_its_node_uri_or_the_host_it_asks_for() -> None:
    assert proves_node(Context("replog://node/4"), 4, ("10.0.0.4:7070", ""))
    assert not proves_node(Context("replog://node/9"), 4, ("10.0.0.4:7070", ""))
    # the first node URI decides, as for members (a host SAN does not override it)
    assert not proves_node(Context("replog://node/9", POD), 4, (f"{POD}:7070", ""))
    assert proves_node(Context(POD), 4, (f"{POD}:7070", f"{POD}:7071"))
    assert proves_node(Context("127.0.0.34"), 4, ("127.0.0.34:7070", ""))
    assert proves_node(Context("::1"), 4, ("[::1]:7070", ""))
    assert not proves_node(Context("replog-2.replog-headless"), 4, (f"{POD}:7070", ""))
    assert not proves_node(Context(), 4, (f"{POD}:7070", ""))  # no certificate
    assert not proves_node(Context("replog://client/alice"), 4, ("", ""))
    assert not proves_node(Context(""), 4, (":7070", ""))


def _join(joins_: Joins, request: nodes_pb2.JoinRequest, context: Context) -> Any:
    """The reply, or the typed error the caller decodes from the aborted call."""
    try:
        return asyncio.run(joins_.join(request, context))
    except Aborted as aborted:
        raise from_rpc_error(aborted) from None


def test_a_node_whose_certificate_proves_its_id_is_added_as_addnode_would() -> None:
    members = Members()
    j = Joins(members, Metrics(lambda: []), accept=True)  # type: ignore[arg-type]
    request = nodes_pb2.JoinRequest(node_id=4, address=f"{POD}:7070", peer_address=f"{POD}:7071")
    reply = _join(j, request, Context(POD))
    assert members.added == [(4, f"{POD}:7070", f"{POD}:7071")]
    assert [m.id for m in reply.members] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("accept", "node_id", "address", "sans", "error", "why"),
    [
        (False, 4, "10.0.0.4:7070", ("replog://node/4",), MembershipChangeRefusedError, "off"),
        (True, 4, "10.0.0.4:7070", ("replog://node/5",), PermissionDeniedError, "other id"),
        (True, 4, "10.0.0.4:7070", ("replog://client/x",), PermissionDeniedError, "a client"),
        (True, 4, "10.0.0.4:7070", (), PermissionDeniedError, "no certificate"),
        (True, 4, "10.0.0.5:7070", ("10.0.0.4",), PermissionDeniedError, "another host"),
        (True, 0, "10.0.0.4:7070", ("replog://node/0",), InvalidArgumentError, "id 0"),
        (True, 2**31, "10.0.0.4:7070", ("replog://node/2147483648",), InvalidArgumentError, "big"),
        (True, 4, "h" * 400 + ":1", ("replog://node/4",), InvalidArgumentError, "long"),
    ],
)
def test_a_join_that_is_not_allowed_is_refused_typed_and_adds_nothing(
    accept: bool,
    node_id: int,
    address: str,
    sans: tuple[str, ...],
    error: type[ReplogError],
    why: str,
) -> None:
    members = Members()
    j = Joins(members, Metrics(lambda: []), accept=accept)  # type: ignore[arg-type]
    request = nodes_pb2.JoinRequest(node_id=node_id, address=address)
    with pytest.raises(error) as raised:
        _join(j, request, Context(*sans))
    assert members.added == [], why
    if error is MembershipChangeRefusedError:
        assert raised.value.metadata.get("refusal") == "joins_disabled"


def test_the_asking_node_asks_until_its_log_lists_it_and_backs_off_on_refusals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Peers that refuse are asked again with backoff; once one accepts, the node waits for
    the log's membership to name it (the keeper's observer record) and stops asking."""
    rounds: list[list[int]] = []
    listed_after = 3

    async def ask_once(node_id: int, address: str, peer_address: str, peers: list[int], _c: Any):
        rounds.append(peers)
        return len(rounds) >= 2  # refused by all in round 1, accepted in round 2

    checks = 0

    def listed() -> bool:
        nonlocal checks
        checks += 1
        return len(rounds) >= 2 and checks > listed_after

    monkeypatch.setattr(joins, "_ask_once", ask_once)
    monkeypatch.setattr(joins, "POLL_S", 0.001)
    monkeypatch.setattr(joins, "RETRY_S_MIN", 0.001)
    monkeypatch.setattr(joins, "RETRY_S_MAX", 0.01)
    asyncio.run(joins.ask_to_join(4, lambda: "h4:7070", "", lambda: [1, 2, 3], None, listed))  # type: ignore[arg-type]
    assert rounds == [[1, 2, 3], [1, 2, 3]]
