"""Anonymous producer ids from blocks each node reserves ahead (`control/producer_ids.py`,
Kafka's KIP-730), on a real 3-node cluster: unique across nodes, no metadata write per
producer, a client may not reserve, and a node answers from its block while the metadata
log's leader is dead."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import grpc
import pytest

from replog.devcluster import DevCluster
from replog.server.control.producer_ids import BLOCK_BASE, BLOCK_IDS
from replog.v1 import admin_pb2, admin_pb2_grpc, log_pb2, log_pb2_grpc

pytestmark = pytest.mark.integration

TIMEOUT_S = 30


def init_producer(address: str, **fields: object) -> log_pb2.InitProducerResponse:
    with grpc.insecure_channel(address) as channel:
        stub = log_pb2_grpc.LogStub(channel)  # type: ignore[no-untyped-call]
        reply: log_pb2.InitProducerResponse = stub.InitProducer(
            log_pb2.InitProducerRequest(**fields), timeout=TIMEOUT_S
        )
        return reply


def metadata_log_end(metrics_address: str) -> float:
    with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=TIMEOUT_S) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith("replog_log_end_offset{") and 'topic="__cluster"' in line:
            return float(line.rpartition(" ")[2])
    raise AssertionError("no replog_log_end_offset of __cluster")


def metadata_leader(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        meta = stub.GetMetadata(admin_pb2.GetMetadataRequest(), timeout=TIMEOUT_S)
        return int(meta.metadata_leader_id)


def test_nodes_hand_out_anonymous_ids_from_their_blocks(tmp_path: Path) -> None:
    c = DevCluster(tmp_path / "cluster", 3)
    c.start()
    try:
        nodes = dict(c.addresses)
        first = {i: init_producer(a).producer_id for i, a in nodes.items()}  # (may wait)
        assert all(pid >= BLOCK_BASE for pid in first.values()), first
        assert len({(pid - BLOCK_BASE) // BLOCK_IDS for pid in first.values()}) == 3  # own blocks

        before = metadata_log_end(c.members[1].metrics_address)
        ids = [init_producer(nodes[1 + n % 3]).producer_id for n in range(150)]
        grown = metadata_log_end(c.members[1].metrics_address) - before
        assert len(set(ids) | set(first.values())) == 153  # every id once
        assert grown < 10, grown  # not one metadata command per producer (150 before)

        with pytest.raises(grpc.RpcError) as refused:  # a client may not reserve
            init_producer(nodes[1], reserve_block=True)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT

        leader = metadata_leader(nodes[1])
        last = {i: max(p for n, p in enumerate(ids) if 1 + n % 3 == i) for i in nodes}
        c.members[leader].kill()
        for i in nodes:
            if i != leader:  # from its block: no metadata command, so no metadata leader
                pid = init_producer(nodes[i]).producer_id
                assert last[i] < pid < first[i] + BLOCK_IDS, (i, pid)
    finally:
        c.kill_all()
