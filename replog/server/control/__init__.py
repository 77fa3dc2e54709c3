"""Requests that need the metadata leader, and where a request is served.

    routing       where a request is served: the one place that decides it (`Router.locate`)
    topics        creating and deleting topics: checked, then proposed on the metadata leader
    producer_ids  producer ids and epochs for idempotent appends (`Log.InitProducer`)

Above `partitions` and `peering` (it asks both), below `groups`, `cluster` and `services`.
"""
