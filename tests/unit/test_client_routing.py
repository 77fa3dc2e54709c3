"""NOT_LEADER answers move the client's leader cache to the hinted node."""

from __future__ import annotations

from replog.client import Client
from replog.errors import NotLeaderError


def test_not_leader_with_a_hint_redirects_the_partition() -> None:
    with Client("127.0.0.1:1") as client:
        err = NotLeaderError("not me", leader_id=2, leader_address="127.0.0.1:2")
        client._on_not_leader("orders", 3, err)
        assert client._leader("orders", 3).address == "127.0.0.1:2"
        assert client._leader("orders", 0).address == "127.0.0.1:1"
