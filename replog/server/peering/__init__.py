"""Talking to other nodes: forwarded calls and the replication transport.

    peers                  calls to other nodes (forwarded admin calls), one channel per peer
    replication_transport  replication over gRPC: one outgoing `Exchange` stream per peer
    replication_codec      replication messages of the core <-> protobuf `Envelope`s

Beside `partitions` (neither imports the other); below `control`, `cluster` and `services`.
"""
