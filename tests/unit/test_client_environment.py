"""`Client.from_env()` reads what the CLI reads (and what `dev-cluster --env-file` writes)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from replog.certs import create_ca, issue_client
from replog.client import AsyncClient, Client, ClientTls
from replog.client.channels import ATTEMPT_TIMEOUT_S
from replog.client.environment import DEFAULT_ADDRESS, from_env


def test_an_empty_environment_is_the_clis_default_plaintext_address() -> None:
    conn = from_env({})
    assert conn.address == DEFAULT_ADDRESS == "127.0.0.1:7070"
    assert conn.tls is None and conn.token is None
    assert conn.attempt_timeout_s == ATTEMPT_TIMEOUT_S


def test_address_list_tls_files_token_and_attempt_timeout_are_read() -> None:
    conn = from_env(
        {
            "REPLOG_ADDRESS": "127.0.0.1:7071,127.0.0.1:7072",
            "REPLOG_TLS_CA": "ca.pem",
            "REPLOG_TLS_CERT": "admin.pem",
            "REPLOG_TLS_KEY": "admin-key.pem",
            "REPLOG_TLS_SERVER_NAME": "node-1",
            "REPLOG_TOKEN": "secret",
            "REPLOG_ATTEMPT_TIMEOUT": "0.5",
        }
    )
    assert conn.address == "127.0.0.1:7071,127.0.0.1:7072"
    assert conn.tls == ClientTls("ca.pem", "admin.pem", "admin-key.pem", "node-1")
    assert conn.token == "secret" and conn.attempt_timeout_s == 0.5


@pytest.mark.parametrize("text", ["soon", "0", "-1", "nan", "inf"])
def test_a_bad_attempt_timeout_is_a_value_error_naming_the_variable(text: str) -> None:
    with pytest.raises(ValueError, match="REPLOG_ATTEMPT_TIMEOUT"):
        from_env({"REPLOG_ATTEMPT_TIMEOUT": text})


def test_a_client_certificate_without_the_ca_is_refused() -> None:
    with pytest.raises(ValueError, match="CA bundle"):
        from_env({"REPLOG_TLS_CERT": "admin.pem", "REPLOG_TLS_KEY": "admin-key.pem"})


def test_client_from_env_connects_where_the_env_says_with_its_tls(tmp_path: Path) -> None:
    ca = create_ca(tmp_path)
    admin = issue_client(ca, tmp_path, "admin")
    env = {
        "REPLOG_ADDRESS": "127.0.0.1:7071,127.0.0.1:7072",
        "REPLOG_TLS_CA": str(ca.cert_file),
        "REPLOG_TLS_CERT": str(admin.cert_file),
        "REPLOG_TLS_KEY": str(admin.key_file),
    }
    with Client.from_env(env, timeout_s=5.0) as client:
        assert client.known_nodes == ("127.0.0.1:7071", "127.0.0.1:7072")
        assert client.tls == ClientTls(ca.cert_file, admin.cert_file, admin.key_file)
        assert client.timeout_s == 5.0 and client.attempt_timeout_s == ATTEMPT_TIMEOUT_S
    # Keywords win over the environment.
    with Client.from_env(env, tls=None, attempt_timeout_s=1.0) as client:
        assert client.tls is None and client.attempt_timeout_s == 1.0


def test_async_client_from_env_reads_the_same_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REPLOG_ADDRESS", "127.0.0.1:7073")
    monkeypatch.setenv("REPLOG_ATTEMPT_TIMEOUT", "1.5")
    for name in ("REPLOG_TLS_CA", "REPLOG_TLS_CERT", "REPLOG_TLS_KEY", "REPLOG_TOKEN"):
        monkeypatch.delenv(name, raising=False)

    async def main() -> None:
        async with AsyncClient.from_env() as client:
            assert client.routing.known == ("127.0.0.1:7073",)
            assert client.tls is None and client.attempt_timeout_s == 1.5

    asyncio.run(main())
