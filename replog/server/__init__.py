"""The replog server: gRPC services over replicated partitions (see `node` for the layout).

A single node is a cluster of one; every request takes the same path. Modules:
`settings` (the one settings object), `node` (composition root, serve loop), `supervisor`
(every background task), `metadata` (typed, versioned metadata commands and the image they
build), `metadata_log` (the `__cluster` replica and its apply loop), `replica_manager`
(the reconciler: local replicas follow the image) with `replica_dirs` (their directories)
and `legacy_import` (single-node data dirs of earlier releases), `routing` (where a request
is served), `topics` (create/delete on the metadata leader), `peers` (calls to other nodes),
`partition` and `replicated` (the partition role over the replication driver),
`replication_transport` and `replication_codec` (replication over gRPC), `flusher`
(interval fsync and HW checkpoints), `log_service` and `admin_service` (the gRPC services),
`rpc` (handler wrappers), `status` (errors to gRPC status, in one place), `metrics`
(Prometheus), `logs` (structured logs).
"""
