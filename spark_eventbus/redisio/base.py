"""What the layer shares from redis-py: the client type other modules annotate with, the error
classes callers catch instead of importing redis, and the replies of a cluster node for a slot
it does not serve. Imports nothing of the package: every ``redisio`` module may import it."""

from __future__ import annotations

from typing import TypeAlias

import redis
from redis.cluster import RedisCluster

# The client type other modules annotate with: a single node or a whole cluster.
Redis: TypeAlias = "redis.Redis | RedisCluster"

# What redis-py raises; other modules catch these names instead of importing redis.
RedisError = redis.RedisError
ResponseError = redis.ResponseError

# Replies a node gives for a key whose slot it does not serve now (cluster): it moved (MOVED),
# is moving (ASK, TRYAGAIN), or no node serves it yet (CLUSTERDOWN). Commands sent on one node's
# connection (the packed acks of :mod:`.acks`, the sink's transaction) are then sent again through
# the cluster client, which follows redirections and refreshes its slot map.
CLUSTER_REDIRECTS = (redis.exceptions.MovedError, redis.exceptions.AskError,
                     redis.exceptions.TryAgainError, redis.exceptions.ClusterDownError)
