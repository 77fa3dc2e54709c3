"""`replog dev-cluster --env-file`: a file a shell sources to reach the cluster."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from replog.devcluster import DevCluster, env_file_text, write_atomically

NAMES = ("REPLOG_ADDRESS", "REPLOG_TLS_CA", "REPLOG_TLS_CERT", "REPLOG_TLS_KEY", "REPLOG_TOKEN")


def sourced(path: Path, stale: dict[str, str]) -> dict[str, str]:
    """The REPLOG_* variables of a bash that held `stale` and sourced `path`."""
    script = f". {path}\n" + "".join(f'echo "{n}=${{{n}-<unset>}}"\n' for n in NAMES)
    env = {"PATH": os.environ["PATH"], **stale}
    out = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, check=True, timeout=30
    )
    return dict(line.split("=", 1) for line in out.stdout.splitlines())


def test_a_tls_clusters_env_file_exports_its_nodes_and_the_operators_absolute_files(
    tmp_path: Path,
) -> None:
    cluster = DevCluster(tmp_path / "dev data", 3, tls=True, acl=True)
    try:
        env = cluster.client_env()
    finally:
        cluster.release_ports()
    assert env["REPLOG_ADDRESS"] == cluster.bootstrap
    assert len(env["REPLOG_ADDRESS"].split(",")) == 3
    for name in ("REPLOG_TLS_CA", "REPLOG_TLS_CERT", "REPLOG_TLS_KEY"):
        assert Path(env[name]).is_absolute() and Path(env[name]).is_file(), name
    path = tmp_path / "dev.env"
    write_atomically(path, env_file_text(env, 4242))
    assert path.read_text().startswith("# replog dev-cluster (pid 4242)")
    got = sourced(path, {"REPLOG_TOKEN": "stale", "REPLOG_ADDRESS": "127.0.0.1:1"})
    assert {k: got[k] for k in env} == env  # a path with a space survives the shell
    assert got["REPLOG_TOKEN"] == "<unset>"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_plaintext_clusters_env_file_unsets_tls_a_shell_held_before(tmp_path: Path) -> None:
    cluster = DevCluster(tmp_path / "dev", 1)
    try:
        env = cluster.client_env()
    finally:
        cluster.release_ports()
    assert list(env) == ["REPLOG_ADDRESS"]
    path = tmp_path / "dev.env"
    write_atomically(path, "old")
    write_atomically(path, env_file_text(env, 7))
    got = sourced(path, {"REPLOG_TLS_CA": "/old/ca.pem", "REPLOG_TLS_CERT": "/old/c.pem"})
    assert got["REPLOG_ADDRESS"] == cluster.bootstrap
    assert got["REPLOG_TLS_CA"] == got["REPLOG_TLS_CERT"] == "<unset>"
