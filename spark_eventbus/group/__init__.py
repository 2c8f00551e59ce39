"""Streaming reads through a consumer group, on the driver: claims, reclaims, acks, consumer
leases, the pre-claim thread, progress and telemetry, and Spark's streaming reader
(``EventBusStreamReader``).

May import: core, options, reads, redisio.
"""
