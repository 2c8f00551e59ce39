"""What every read shares: the partitions sent to executors, the tasks' replay of Redis entries
into Arrow, the output schema; and batch reads (``spark.read``).

May import: core, options, redisio.
"""
