"""The image runs a node that serves over TLS, survives `docker kill` and drains on
`docker stop`.

Single node; the three-node failover scenarios are in `test_cluster_containers.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.errors import UnavailableError
from tests.containers.conftest import free_ports
from tests.containers.nodes import Node, Pki, data_dir_for

HOST = "127.0.0.11"


def test_a_node_in_a_container_serves_and_keeps_acked_records_across_kill_and_stop(
    image: str, tmp_path: Path
) -> None:
    data_dir = data_dir_for(tmp_path / "data")
    port, peer_port, health_port = free_ports(HOST, 3)
    pki = Pki(tmp_path / "tls")
    node = Node(image, HOST, port, data_dir, pki, peer_port, health_port).start()
    # The client listener speaks TLS only: a plaintext client gets no answer.
    with (
        Client(node.address, timeout_s=3, retry=RetryPolicy(attempts_max=1)) as plaintext,
        pytest.raises(UnavailableError),
    ):
        plaintext.list_topics()
    values = [b"record-%05d" % i for i in range(5000)]
    with Client(node.address, tls=pki.client_tls) as client:
        client.create_topic("c", 1)
        for i in range(0, len(values), 500):
            client.append("c", 0, values[i : i + 500], acks="all")
    node.kill()  # SIGKILL: flush=always means every acknowledged record is on disk

    node.restart()  # the same container, on the same bind-mounted data dir
    with Client(node.address, tls=pki.client_tls) as client:
        got: list[bytes] = []
        offset = 0
        while len(got) < len(values):
            fetched = client.fetch("c", 0, offset, max_bytes=64 * 1024)
            got.extend(fetched.records.values)
            offset = fetched.next_offset
        assert got == values
        client.append("c", 0, [b"after restart"], acks="all")
    assert node.stop() == 0, node.logs()  # SIGTERM: drained and flushed, clean exit
    # 5000 records, one more, the epoch markers of the two leaderships (a cluster of one),
    # and the header of each of the 11 idempotent batches.
    assert (data_dir / "c" / "partition_0" / "high-watermark").read_text().strip() == "5014"
    node.remove()
