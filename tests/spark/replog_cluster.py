"""The replog the Spark layer reads: a real 3-node cluster on 127.0.0.1 (separate processes)."""

from __future__ import annotations

from dataclasses import dataclass

from replog.devcluster import DevCluster


@dataclass(frozen=True)
class ReplogCluster:
    cluster: DevCluster

    @property
    def address(self) -> str:
        """Every node, comma-separated: any of them works as the bootstrap."""
        return self.cluster.bootstrap
