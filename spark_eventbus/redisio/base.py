"""What the layer shares from redis-py: the client type other modules annotate with and the
error classes callers catch instead of importing redis (what an error means for a retry:
:mod:`.retry`). Imports nothing of the package: every ``redisio`` module may import it."""

from __future__ import annotations

from typing import TypeAlias

import redis
from redis.cluster import RedisCluster

# The client type other modules annotate with: a single node or a whole cluster.
Redis: TypeAlias = "redis.Redis | RedisCluster"

# What redis-py raises; other modules catch these names instead of importing redis.
RedisError = redis.RedisError
ResponseError = redis.ResponseError
