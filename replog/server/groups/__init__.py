"""Consumer groups: committed offsets in `__consumer_offsets`, membership, assignment.

    records      the on-log format of `__consumer_offsets` (JSON, versioned)
    assignor     sticky, balanced server-side assignment (pure)
    state        one shard's groups: membership, reconciliation, fencing, offsets (pure)
    shard        one led partition of `__consumer_offsets`: load from the log, write records
    coordinator  which shards this node runs; routing; expiry and retention tasks
    lag          high watermarks of the groups' partitions; the lag metrics
    wire         checks of every request field
    service      the `replog.v1.Groups` gRPC service

docs/api.md ("Consumer groups") describes the protocol for clients in any language.
"""
