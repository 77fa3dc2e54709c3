"""The wire edge: what every call passes through before and after its handler.

    handler_chain  every call's handler wrapped once per method (guard, refusals, rpc)
    guard          the wire boundary: checks every call before its handler
    rpc            handler wrappers: errors to status, metrics, logs
    status         the one place server errors become gRPC statuses (with ErrorInfo)
    auth           client authentication and authorization (ACLs) on the client listener
    watched_file   a config file (tokens, SCRAM credentials) re-read when it changes
    security       server-side TLS: credentials that follow the files, who a peer is
    listeners      the node's listeners and the channels it dials its peers with
    exposure       no plaintext cluster by accident; no peer call on the client listener
    limits         what clients may hold on a node at once: calls, streams, acks=none bytes
    quotas         how fast each principal may go (quotas of the metadata image, enforced)
    buckets        the token buckets quotas are kept in (pure, bounded)
    memory         giving memory back to the operating system after streams end
    draining       how every stream ends when the node stops (UNAVAILABLE SHUTTING_DOWN)
    readiness      the `replog.ready` health name
    reflection     server reflection under both names clients use

Imports only `meta`, `metrics` and `logs` from the server: every room above may use it.
"""
