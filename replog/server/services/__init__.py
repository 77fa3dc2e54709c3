"""The gRPC services clients call (consumer groups' `Groups` service is in `groups`).

    log_service    `replog.v1.Log`: Append, AppendStream, InitProducer, Fetch, StreamFrom
    append_stream  AppendStream: appends pipelined over one long-lived stream, in order
    admin_service  `replog.v1.Admin`: topics, offsets, members, moves, metadata for routing
    acl_service    `replog.v1.Acls`: add, remove and list the ACLs in the cluster metadata

The top room below `node`: nothing but `node` imports it.
"""
