"""Streaming reads without a consumer group: each stream's position kept in Spark's
checkpoint, where each batch ends (driver).

May import: core, options, reads, redisio.
"""
