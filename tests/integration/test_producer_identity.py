"""Producer identities on one real node: anonymous ids, named producers that fence their
older instances, and resuming writers whose resent batches are not written twice."""

from __future__ import annotations

import pytest

from replog.client import Client
from replog.errors import DuplicateSequenceError, ProducerFencedError
from tests.integration.servers import ServerProcess

pytestmark = pytest.mark.integration


def values_of(client: Client, topic: str) -> list[bytes]:
    return client.fetch(topic, 0, 0, max_bytes=1 << 20).records.values


def test_anonymous_producers_get_distinct_ids(shared_server: ServerProcess) -> None:
    with Client(shared_server.address) as a, Client(shared_server.address) as b:
        ids = {a.producer_identity().producer_id, b.producer_identity().producer_id}
        assert len(ids) == 2 and 0 not in ids


def test_a_named_producer_fences_its_older_instance(shared_server: ServerProcess) -> None:
    with Client(shared_server.address, idempotent=False) as admin:
        admin.create_topic("named", 1)
    with (
        Client(shared_server.address, producer_name="app") as old,
        Client(shared_server.address) as reader,
    ):
        old.append("named", 0, [b"1"])
        with Client(shared_server.address, producer_name="app") as new:
            assert new.producer_identity().producer_id == old.producer_identity().producer_id
            new.append("named", 0, [b"2"])
            with pytest.raises(ProducerFencedError):
                old.append("named", 0, [b"zombie"])
        assert values_of(reader, "named") == [b"1", b"2"]


def test_a_resumed_writer_resending_its_batches_writes_each_once(
    shared_server: ServerProcess,
) -> None:
    batches = [[b"a%d" % i for i in range(n)] for n in (3, 1, 4, 2, 5, 3, 2)]
    with Client(shared_server.address, idempotent=False) as admin:
        admin.create_topic("resumed", 1)
    with Client(shared_server.address, producer_name="task-7", producer_resume=True) as first:
        offsets = [first.append("resumed", 0, b) for b in batches[:6]]  # then it "dies"
        identity = first.producer_identity()
    with Client(shared_server.address, producer_name="task-7", producer_resume=True) as retry:
        assert retry.producer_identity() == identity  # same id and epoch: nothing fenced
        with pytest.raises(DuplicateSequenceError):  # older than the last 5: written
            retry.append("resumed", 0, batches[0])
        for i, batch in enumerate(batches[1:6], 1):
            again = retry.append("resumed", 0, batch)  # answered, not written
            assert (again.base_offset, again.last_offset) == (
                offsets[i].base_offset,
                offsets[i].last_offset,
            )
        retry.append("resumed", 0, batches[6])
    with Client(shared_server.address) as reader:
        assert values_of(reader, "resumed") == [v for b in batches for v in b]


def test_bad_producer_fields_are_refused_before_anything_is_written(
    shared_server: ServerProcess,
) -> None:
    import grpc

    from replog.v1 import log_pb2, log_pb2_grpc

    with Client(shared_server.address, idempotent=False) as admin:
        admin.create_topic("fields", 1, format="raw")
    with grpc.insecure_channel(shared_server.address) as channel:
        stub = log_pb2_grpc.LogStub(channel)
        pid = stub.InitProducer(log_pb2.InitProducerRequest()).producer_id
        bad = [
            log_pb2.AppendRequest(topic="fields", values=[b"x"], base_sequence=3),
            log_pb2.AppendRequest(topic="fields", values=[b"x"], producer_id=2**63),
            log_pb2.AppendRequest(
                topic="fields", values=[b"x"], producer_id=pid, producer_epoch=2**31
            ),
            log_pb2.AppendRequest(
                topic="fields", values=[b"x", b"y"], producer_id=pid, base_sequence=2**63 - 1
            ),
        ]
        for request in bad:
            with pytest.raises(grpc.RpcError) as err:
                stub.Append(request)
            assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as gap:
            stub.Append(
                log_pb2.AppendRequest(
                    topic="fields", values=[b"x"], producer_id=pid, base_sequence=0
                )
            )
            stub.Append(
                log_pb2.AppendRequest(
                    topic="fields", values=[b"x"], producer_id=pid, base_sequence=5
                )
            )
        assert gap.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(grpc.RpcError) as long_name:
            stub.InitProducer(log_pb2.InitProducerRequest(name="n" * 256))
        assert long_name.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    with Client(shared_server.address) as reader:
        assert values_of(reader, "fields") == [b"x"]
