"""Writes to Redis: the sink (schema rules, encoding, chunks, the stream and batch writers) and
the ``AckingBatchWriter`` with its executor-side acks and dead letters.

May import: core, options, redisio.
"""
