"""The replog server: gRPC services over the storage engine (see `node` for the layout).

Modules: `settings` (the one settings object), `node` (composition root, serve loop),
`partition` (partition roles: the seam replication plugs into), `log_service` and
`admin_service` (the gRPC services), `rpc` (handler wrappers), `status` (errors to gRPC
status, in one place), `metrics` (Prometheus), `logs` (structured logs).
"""
