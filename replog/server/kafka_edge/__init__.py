"""The Kafka edge: Kafka's wire protocol served by every node (issue 31, docs/kafka.md).

    listener   the asyncio server: connections, frames, bounds, start/stop with the node
    apis       each Kafka API translated into the node's own request path
    convert    Kafka record batches <-> replog records (envelope and raw topics)
    errors     replog's error reasons -> Kafka error codes (the one table)

The wire codec itself is `replog.kafka` (pure, no I/O).
"""
