"""`make run` and `replog dev-cluster` serve Kafka: a 3-node TLS cluster with ACLs
(`DevCluster(kafka=True)`), each node advertising its own listener; the demo's Kafka step
(librdkafka produces with the operator's certificate, replog's client reads the same keys,
values and offsets back) runs against it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from replog.demo import KAFKA_RECORDS, kafka_step
from replog.devcluster import DevCluster

admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_every_node_of_the_dev_cluster_serves_kafka_at_the_address_it_advertises(
    tmp_path: Path,
) -> None:
    cluster = DevCluster(tmp_path / "dev", 3, tls=True, acl=True, kafka=True)
    with cluster:
        config = cluster.kafka_client_config()
        assert config["security.protocol"] == "SSL"  # TLS with the operator's certificate
        for address in cluster.kafka_addresses.values():
            # each node alone is a bootstrap server, and lists every node where it serves
            # (once the nodes have told each other their Kafka addresses)
            assert brokers_seen(config | {"bootstrap.servers": address}, cluster)
        got = kafka_step(cluster)
        assert len(got) == KAFKA_RECORDS


def brokers_seen(config: dict[str, Any], cluster: DevCluster) -> bool:
    client = admin.AdminClient(config)
    deadline = time.monotonic() + 60
    brokers: dict[int, str] = {}
    while time.monotonic() < deadline:
        meta = client.list_topics(timeout=30)
        brokers = {b.id: f"{b.host}:{b.port}" for b in meta.brokers.values()}
        if brokers == cluster.kafka_addresses:
            return True
        time.sleep(0.2)
    raise AssertionError(f"{config['bootstrap.servers']} lists {brokers}")
