"""No plaintext cluster by accident: what a node refuses at start-up (edge/exposure.py)."""

from __future__ import annotations

import argparse

import pytest

from replog.errors import InvalidConfigError
from replog.server.edge.exposure import is_loopback
from replog.server.settings import Settings

TLS = ["--tls-cert-file", "n.pem", "--tls-key-file", "n-key.pem", "--tls-ca-file", "ca.pem"]
PEERS = "1=127.0.0.1:7070/127.0.0.1:7071,2=127.0.0.1:7080/127.0.0.1:7081"
CLUSTER = ["--node-id", "1", "--peers", PEERS, "--peer-listen", "127.0.0.1:7071"]


def parse(argv: list[str], env: dict[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    Settings.add_arguments(parser)
    return Settings.from_sources(vars(parser.parse_args(argv)), env or {})


def refused(argv: list[str], env: dict[str, str] | None = None) -> str:
    with pytest.raises(InvalidConfigError) as err:
        parse(argv, env)
    return err.value.message


def test_a_single_node_on_loopback_starts_with_no_flags_at_all() -> None:
    s = parse([])
    assert (s.tls, s.insecure, s.peers) == (None, False, "")
    assert parse(["--listen", "[::1]:0"]).listen == "[::1]:0"
    assert parse(["--listen", "localhost:7070"]).listen == "localhost:7070"


@pytest.mark.parametrize("listen", ["0.0.0.0:7070", "10.1.2.3:7070", "[::]:7070", "db1:7070"])
def test_a_node_listening_beyond_loopback_refuses_plaintext_naming_the_flag(listen: str) -> None:
    message = refused(["--listen", listen])
    assert "--insecure" in message and "TLS" in message and listen in message
    assert "\n" not in message  # one line


def test_a_peer_listener_beyond_loopback_counts_too() -> None:
    assert "0.0.0.0:7071" in refused(["--peer-listen", "0.0.0.0:7071"])


def test_a_node_with_peers_refuses_plaintext_even_on_loopback() -> None:
    message = refused(CLUSTER)
    assert "it has peers" in message and "--insecure" in message


def test_a_node_with_peers_needs_a_peer_listener_even_insecure_or_with_tls() -> None:
    plain = ["--node-id", "1", "--peers", "1=127.0.0.1:7070,2=127.0.0.1:7080"]
    for extra in (["--insecure"], TLS):
        assert "--peer-listen" in refused([*plain, *extra])


def test_insecure_on_purpose_starts_by_flag_or_by_env() -> None:
    assert parse([*CLUSTER, "--insecure"]).insecure is True
    assert parse(["--listen", "0.0.0.0:7070", "--insecure"]).insecure is True
    assert parse(CLUSTER, {"REPLOG_INSECURE": "true"}).insecure is True
    assert parse(CLUSTER, {"REPLOG_INSECURE": "1"}).insecure is True
    assert "--insecure" in refused(CLUSTER, {"REPLOG_INSECURE": "false"})
    assert "insecure must be true or false" in refused(CLUSTER, {"REPLOG_INSECURE": "maybe"})


def test_tls_is_enough_for_a_cluster_and_for_any_address() -> None:
    assert parse([*CLUSTER, *TLS]).tls is not None
    assert parse(["--listen", "0.0.0.0:7070", *TLS]).tls is not None


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1:1", True),
        ("127.8.9.10:1", True),
        ("[::1]:1", True),
        ("localhost:1", True),
        ("LOCALHOST:1", True),
        ("0.0.0.0:1", False),
        ("[::]:1", False),
        ("192.168.1.1:1", False),
        ("localhost.example.com:1", False),
        ("replog-0.replog-headless:7070", False),
    ],
)
def test_only_loopback_addresses_count_as_loopback(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback
