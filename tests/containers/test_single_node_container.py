"""The image runs a node that serves, survives `docker kill` and drains on `docker stop`.

Single node; the three-node failover scenarios are in `test_cluster_containers.py`.
"""

from __future__ import annotations

from pathlib import Path

from replog.client import Client
from tests.containers.conftest import free_port
from tests.containers.nodes import Node, data_dir_for

HOST = "127.0.0.11"


def test_a_node_in_a_container_serves_and_keeps_acked_records_across_kill_and_stop(
    image: str, tmp_path: Path
) -> None:
    data_dir = data_dir_for(tmp_path / "data")
    node = Node(image, HOST, free_port(HOST), data_dir).start()
    values = [b"record-%05d" % i for i in range(5000)]
    with Client(node.address) as client:
        client.create_topic("c", 1)
        for i in range(0, len(values), 500):
            client.append("c", 0, values[i : i + 500], acks="all")
    node.kill()  # SIGKILL: flush=always means every acknowledged record is on disk

    node.restart()  # the same container, on the same bind-mounted data dir
    with Client(node.address) as client:
        got: list[bytes] = []
        offset = 0
        while len(got) < len(values):
            fetched = client.fetch("c", 0, offset, max_bytes=64 * 1024)
            got.extend(fetched.records.values)
            offset = fetched.next_offset
        assert got == values
        client.append("c", 0, [b"after restart"], acks="all")
    assert node.stop() == 0, node.logs()  # SIGTERM: drained and flushed, clean exit
    # 5000 records, one more, and the epoch markers of the two leaderships (a cluster of one).
    assert (data_dir / "c" / "partition_0" / "high-watermark").read_text().strip() == "5003"
    node.remove()
