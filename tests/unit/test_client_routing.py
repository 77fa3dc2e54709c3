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


def test_an_offline_replica_moves_the_partition_off_the_node_metadata_is_asked_of() -> None:
    from replog.client.routing import Routing
    from replog.errors import PartitionOfflineError

    routing = Routing(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"])
    routing.leaders[("orders", 0)] = "127.0.0.1:1"  # the node metadata is asked of, too
    err = PartitionOfflineError("the replica of orders/0 on node 1 is offline")
    assert routing.reroute(err, "orders", 0) is True  # another node, at once
    assert ("orders", 0) not in routing.leaders
    assert routing.current != "127.0.0.1:1"
    assert routing.address("orders", 0) != "127.0.0.1:1"
