"""Kafka's wire protocol as a pure codec (no I/O): frames, headers, messages by Kafka's own
specs, record batches v2 with their compression codecs. The Kafka listener builds on it.

Modules: `primitives` (bounded reader, writer), `schema` (Kafka's JSON message specs),
`codec` (messages by spec), `protocol` (frames, headers, API keys, supported versions),
`records` (record batch v2), `compression` (the batch codecs, bounded decompression),
`errors` (the decode errors and Kafka's error codes).
"""
