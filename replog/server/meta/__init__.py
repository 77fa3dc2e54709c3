"""Cluster metadata: the typed commands, the image they build, and the log that orders them.

    metadata      typed, versioned metadata commands and the image they build (pure `apply`)
    acls          access control entries (pure)
    placement     which nodes get a new topic's replicas (pure)
    metadata_log  the `__cluster` replica: the replicated log of commands and its apply loop
    timestamps    how a topic's records are dated for its time index

The bottom room of the server: it imports only `logs`. Who changes the image lives above
(`control` for topics and producer ids, `cluster` for members and reassignments).
"""
