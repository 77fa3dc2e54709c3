"""TLS and peer-listener settings: what a node is given, and what it refuses at start-up."""

from __future__ import annotations

from pathlib import Path

import pytest

from replog import certs
from replog.errors import InvalidConfigError
from replog.server.settings import Settings


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("tls")
    ca = certs.create_ca(d)
    node = certs.issue_node(ca, d, 1)
    return {
        "tls_cert_file": str(node.cert_file),
        "tls_key_file": str(node.key_file),
        "tls_ca_file": str(ca.cert_file),
    }


def test_plaintext_is_the_default() -> None:
    settings = Settings.from_sources({}, env={})
    assert settings.tls is None and settings.peer_listen == ""


def test_peers_name_a_client_address_and_a_peer_address() -> None:
    settings = Settings.from_sources(
        {
            "node_id": "1",
            "peers": "1=a:7070/a:7071,2=b:7070/b:7071",
            "peer_listen": "a:7071",
            "insecure": "true",
        },
        env={},
    )
    assert settings.peer_map() == {1: "a:7070", 2: "b:7070"}
    assert settings.peer_dial_map() == {1: "a:7071", 2: "b:7071"}


def test_tls_files_go_together(tls_files: dict[str, str]) -> None:
    with pytest.raises(InvalidConfigError, match="go together"):
        Settings.from_sources({"tls_cert_file": tls_files["tls_cert_file"]}, env={})
    assert Settings.from_sources(tls_files, env={}).tls is not None


def test_tls_in_a_cluster_needs_a_peer_listener(tls_files: dict[str, str]) -> None:
    peers = "1=a:7070,2=b:7070"
    with pytest.raises(InvalidConfigError, match="needs --peer-listen"):
        Settings.from_sources({**tls_files, "node_id": "1", "peers": peers}, env={})
    with pytest.raises(InvalidConfigError, match="host:peer_port"):
        Settings.from_sources(
            {**tls_files, "node_id": "1", "peers": peers, "peer_listen": "a:7071"}, env={}
        )


def test_statefulset_mode_dials_each_pod_on_the_peer_port() -> None:
    settings = Settings.from_sources(
        {
            "cluster_size": "3",
            "peer_address_template": "replog-{ordinal}.h:7070",
            "peer_listen": "0.0.0.0:7071",
            "insecure": "true",
        },
        env={"HOSTNAME": "replog-1"},
    )
    assert settings.node_id == 2
    assert settings.advertised_address == "replog-1.h:7070"
    assert settings.peer_dial_map()[3] == "replog-2.h:7071"


def test_authorization_and_tokens_need_tls(tls_files: dict[str, str], tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("")
    with pytest.raises(InvalidConfigError, match="needs TLS"):
        Settings.from_sources({"authorization": "acl"}, env={})
    with pytest.raises(InvalidConfigError, match="need TLS"):
        Settings.from_sources({"token_file": str(tokens)}, env={})
    with pytest.raises(InvalidConfigError, match="needs TLS"):
        Settings.from_sources({"tls_client_auth": "require"}, env={})
    settings = Settings.from_sources(
        {**tls_files, "authorization": "acl", "token_file": str(tokens)}, env={}
    )
    assert settings.authorization == "acl"
