"""The replog the Spark layer reads: a real 3-node cluster on 127.0.0.1 (separate processes)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from replog.devcluster import DevCluster
from replog.tls import ClientTls


@dataclass(frozen=True)
class ReplogCluster:
    cluster: DevCluster

    @property
    def address(self) -> str:
        """Every node, comma-separated: any of them works as the bootstrap."""
        return self.cluster.bootstrap

    @property
    def tls(self) -> ClientTls | None:
        """What a client needs (None: the cluster is plaintext)."""
        return self.cluster.client_tls

    @property
    def options(self) -> dict[str, str]:
        """The source's and sink's connection options: every node, and TLS when it is on."""
        out = {"kafka.bootstrap.servers": self.address}
        t = self.tls
        if t is not None:
            out["tls.ca"] = str(t.ca_file)
            if t.cert_file is not None and t.key_file is not None:
                out["tls.cert"], out["tls.key"] = str(t.cert_file), str(t.key_file)
        return out

    def tls_args(self) -> list[str]:
        """The same as command-line flags (`replog.spark.pipeline`, the CLI)."""
        names = {"tls.ca": "--tls-ca", "tls.cert": "--tls-cert", "tls.key": "--tls-key"}
        return [x for k, v in self.options.items() if k in names for x in (names[k], v)]


def running_cluster(
    tmp_path_factory: pytest.TempPathFactory, nodes: int, **kwargs: Any
) -> Iterator[ReplogCluster]:
    """A started `DevCluster` for a fixture to yield from; killed afterwards."""
    cluster = DevCluster(tmp_path_factory.mktemp("replog"), nodes, **kwargs).start()
    yield ReplogCluster(cluster)
    cluster.kill_all()
