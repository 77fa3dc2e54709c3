"""The client's routing state: which nodes it knows, which one it calls, and how it moves
off a node that does not answer (pure logic: `replog.client.routing.Routing`)."""

from __future__ import annotations

import pytest

from replog.client.retry import RetryPolicy, call_with_retry, one_try_each
from replog.client.routing import SUSPECT_S, Routing, split_addresses
from replog.errors import (
    DeadlineExceededError,
    LeaderUnknownError,
    NotLeaderError,
    TopicNotFoundError,
    UnavailableError,
)
from replog.v1 import admin_pb2

A, B, C = "10.0.0.1:7070", "10.0.0.2:7070", "10.0.0.3:7070"


def metadata(*nodes: str, leaders: dict[int, int] | None = None) -> admin_pb2.Metadata:
    """Nodes 1..N at `nodes`; topic "orders" with partition p led by node `leaders[p]`."""
    meta = admin_pb2.Metadata(
        nodes=[admin_pb2.Node(id=i + 1, address=a) for i, a in enumerate(nodes)]
    )
    if leaders:
        topic = meta.topics.add(name="orders")
        for p, leader in leaders.items():
            topic.partitions.append(
                admin_pb2.PartitionMetadata(partition=p, leader_id=leader, replicas=[1, 2, 3])
            )
    return meta


def refused() -> UnavailableError:
    return UnavailableError("connection refused", grpc_code="UNAVAILABLE")


def test_one_bootstrap_address_learns_every_node_from_metadata() -> None:
    routing = Routing(split_addresses(A))
    assert routing.known == (A,) and not routing.discovered
    routing.learn(metadata(A, B, C, leaders={0: 2}))
    assert routing.known == (A, B, C) and routing.discovered
    assert routing.address("orders", 0) == B  # the leader, learned with the nodes
    assert routing.address() == A  # admin calls stay where they were


def test_bootstraps_stay_known_and_nodes_gone_from_metadata_are_forgotten() -> None:
    routing = Routing(["replog:7070"])  # e.g. a Kubernetes Service name
    routing.learn(metadata(A, B, C))
    assert routing.known == ("replog:7070", A, B, C)
    routing.learn(metadata(A, B))
    assert routing.known == ("replog:7070", A, B)


def test_a_node_that_does_not_answer_hands_calls_to_the_next_known_node() -> None:
    routing = Routing([A])
    routing.learn(metadata(A, B, C, leaders={0: 1, 1: 1, 2: 3}))
    err = routing.failed(refused(), A, idempotent=False, now=100.0)
    assert isinstance(err, UnavailableError) and err.retriable
    assert routing.current == B
    # Every partition it led goes to the current node until someone names the new leader.
    assert routing.address("orders", 0) == B and routing.address("orders", 1) == B
    assert routing.address("orders", 2) == C
    assert routing.reroute(err, "orders", 0, now=100.0) is True  # worth retrying at once


def test_rotation_skips_suspect_nodes_and_never_gets_stuck_when_all_are() -> None:
    routing = Routing([A, B, C])
    routing.failed(refused(), B, idempotent=True, now=100.0)  # B failed as a leader
    assert routing.current == A
    routing.failed(refused(), A, idempotent=True, now=100.1)
    assert routing.current == C  # B is still suspect
    routing.failed(refused(), C, idempotent=True, now=100.2)
    assert routing.current == A  # all suspect: the plain next one
    routing.failed(refused(), A, idempotent=True, now=100.0 + SUSPECT_S + 0.5)
    assert routing.current == B  # B's suspicion has expired


def test_a_leader_hint_naming_a_node_that_just_failed_is_not_followed() -> None:
    routing = Routing([A])
    routing.learn(metadata(A, B, C, leaders={0: 1}))
    routing.failed(refused(), A, idempotent=False, now=100.0)
    # B has not noticed yet that A died: it still names A.
    stale = NotLeaderError("not me", leader_id=1, leader_address=A)
    # Back off, and ask the next healthy node, which may have heard of the new leader
    # (asking B again could take an election timeout: it learns only from the new leader).
    assert routing.reroute(stale, "orders", 0, now=100.2) is False
    assert routing.address("orders", 0) == C
    fresh = NotLeaderError("not me", leader_id=2, leader_address=B)
    assert routing.reroute(fresh, "orders", 0, now=100.4) is True
    assert routing.address("orders", 0) == B
    # Once the suspicion expires, a hint naming A is followed again (it may be back).
    assert routing.reroute(stale, "orders", 0, now=100.0 + SUSPECT_S + 0.1) is True
    assert routing.address("orders", 0) == A


def test_a_read_without_an_answer_is_retried_elsewhere_an_append_is_not() -> None:
    routing = Routing([A, B])
    timed_out = DeadlineExceededError("Deadline Exceeded")
    read = routing.failed(timed_out, A, idempotent=True)
    assert isinstance(read, UnavailableError) and read.retriable
    assert routing.current == B
    append = routing.failed(timed_out, B, idempotent=False)
    assert append is timed_out and not append.retriable  # the outcome is unknown
    assert routing.current == A  # but the next call goes elsewhere


def test_leader_unknown_moves_on_without_suspecting_the_node() -> None:
    routing = Routing([A])
    routing.learn(metadata(A, B, C, leaders={0: 1}))
    err = LeaderUnknownError("election in progress")
    assert routing.failed(err, A, idempotent=False) is err
    assert routing.reroute(err, "orders", 0) is False
    assert routing.current == B
    assert not routing.suspect(A)


def test_metadata_calls_leave_a_node_that_knows_no_metadata_leader() -> None:
    """A node cut off from its peers answers LEADER_UNKNOWN to every metadata call (create
    topic, InitProducer) forever; the next attempt goes to another node, which may already
    know the new metadata leader (a client stuck on the cut-off node spent its budget)."""
    routing = Routing([A, B])
    err = LeaderUnknownError("the cluster metadata has no leader right now")
    assert routing.failed(err, A, idempotent=False) is err
    assert routing.reroute(err, None, 0) is False  # after the usual backoff
    assert routing.current == B
    assert not routing.suspect(A)


def test_errors_that_are_not_about_the_node_change_nothing() -> None:
    routing = Routing([A, B])
    err = TopicNotFoundError("no such topic", topic="orders")
    assert routing.failed(err, A, idempotent=True) is err
    assert routing.current == A and not routing.suspect(A)


def test_an_empty_address_list_is_refused() -> None:
    assert split_addresses(f" {A}, ,{B} ") == [A, B]
    with pytest.raises(ValueError):
        split_addresses(" , ")


def test_looking_for_the_cluster_tries_each_bootstrap_once_without_sleeping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import replog.client.retry as retry

    sleeps: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", sleeps.append)
    routing = Routing([A, B, C])
    tried: list[str] = []

    def get_metadata() -> None:
        tried.append(routing.current)
        raise routing.failed(refused(), routing.current, idempotent=True)

    with pytest.raises(UnavailableError):
        call_with_retry(get_metadata, one_try_each(3, RetryPolicy()), lambda err: False)
    assert tried == [A, B, C] and sleeps == []


def test_leader_unknown_about_a_topic_moves_the_retry_to_the_next_node() -> None:
    """ListOffsets and the data calls name their topic: a node cut off from the others
    answers LEADER_UNKNOWN for as long as it is cut off, so the retry goes to the next node
    (which may know the new leader) instead of asking it again until the budget is spent."""
    from replog.client.routing import Routing
    from replog.errors import LeaderUnknownError

    routing = Routing(["a:1", "b:2", "c:3"])
    assert routing.address("orders", 0) == "a:1"
    err = LeaderUnknownError("orders/0: this replica does not lead it and knows no leader")
    assert routing.reroute(err, "orders", 0) is False  # after the backoff
    assert routing.address("orders", 0) == "b:2"
    routing.reroute(err, "orders", 0)
    assert routing.address("orders", 0) == "c:3"
