"""`ClientTls` takes `str` or any `os.PathLike` for every path, as docs/api.md writes it."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from replog.certs import create_ca, issue_client
from replog.tls import ClientTls


def test_paths_given_as_strings_are_kept_as_paths() -> None:
    tls = ClientTls("ca.pem", "client.pem", "client.key")
    assert tls.ca_file == Path("ca.pem")
    assert tls.cert_file == Path("client.pem") and tls.key_file == Path("client.key")
    assert tls == ClientTls(Path("ca.pem"), Path("client.pem"), Path("client.key"))


def test_a_certificate_without_its_key_is_refused() -> None:
    with pytest.raises(ValueError, match="needs its key"):
        ClientTls("ca.pem", "client.pem")


def test_credentials_build_from_string_paths(tmp_path: Path) -> None:
    ca = create_ca(tmp_path)
    issued = issue_client(ca, tmp_path, "alice")
    tls = ClientTls(str(ca.cert_file), str(issued.cert_file), str(issued.key_file))
    assert isinstance(tls.credentials(), grpc.ChannelCredentials)
