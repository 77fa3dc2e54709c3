"""A data dir of the earlier single-node mode is imported once, on first start, whole."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from replog.client import Client, RetryPolicy
from replog.errors import InvalidConfigError
from replog.server.partitions.legacy_import import import_legacy_topics
from replog.storage import StorageConfig
from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration

GOLDEN = Path(__file__).parent.parent / "golden" / "legacy-single-node" / "data"
ORDERS_0 = [b"order-%02d-%s" % (i, s) for i in range(0, 20, 2) for s in (b"a", b"b")]
ORDERS_1 = [b"order-%02d-%s" % (i, s) for i in range(1, 20, 2) for s in (b"a", b"b")]


def values(client: Client, topic: str, partition: int) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    end = client.list_offsets(topic, [partition])[0].latest
    while offset < end:
        fetched = client.fetch(topic, partition, offset)
        out.extend(fetched.records.values)
        offset = fetched.next_offset
    return out


def test_a_single_node_data_dir_is_imported_on_first_start_without_losing_a_record(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(GOLDEN, data_dir)
    server = ServerProcess(data_dir, tmp_path)
    try:
        server.start()
        with Client(server.address, timeout_s=30, retry=RetryPolicy(attempts_max=3)) as c:
            assert c.list_topics() == {"orders": 2, "empty": 1}
            # Everything the old node held, the record its HW checkpoint missed included.
            assert values(c, "orders", 0) == [*ORDERS_0, b"order-late"]
            assert values(c, "orders", 1) == ORDERS_1
            assert values(c, "empty", 0) == []
            c.append("orders", 1, [b"after-import"])
            c.delete_topic("empty")
            c.create_topic("new", 1)
        assert server.terminate() == 0
        assert (data_dir / "__cluster" / "partition_0").is_dir()

        server.start()  # the import is done: the metadata log alone says what exists
        with Client(server.address, timeout_s=30, retry=RetryPolicy(attempts_max=3)) as c:
            assert c.list_topics() == {"orders": 2, "new": 1}
            assert values(c, "orders", 1) == [*ORDERS_1, b"after-import"]
        assert server.terminate() == 0
        assert server.log_text().count("legacy.imported") == 1
        assert not (data_dir / "empty").exists()
    finally:
        server.kill()


def test_a_single_node_data_dir_is_not_imported_into_a_larger_cluster(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(GOLDEN, data_dir)
    with pytest.raises(InvalidConfigError, match="start it once as a single node"):
        import_legacy_topics(data_dir, 1, [1, 2, 3], StorageConfig())
    assert not (data_dir / "__cluster").exists()
