"""The Redis access layer: the only part of spark-eventbus that talks to redis-py.

* :mod:`.client` — :class:`ConnectionSpec` (picklable) and the per-process client cache, with
  retries; single node today, the one place a cluster client would be made.
* :mod:`.boundary` — redis-py errors become :mod:`spark_eventbus.errors` here, and only here.
* :mod:`.scripts` — the ``lua/*.lua`` scripts, loaded once by name, run with EVALSHA.
* :mod:`.streams` — type checks, paged XRANGE, chunked XACK, packed commands.
* :mod:`.produce` — a chunk of XADDs with its idempotency marker as one transaction.
* :mod:`.group` — what one consumer of one group does on one stream (claims, plans, acks).
* :mod:`.losses` — entries a replayed batch no longer finds: per-ID replay, acks, loss records.
"""

from __future__ import annotations

from .boundary import GROUP_GONE_FIX, RedisError, ResponseError, redis_errors, translate
from .client import ConnectionSpec, Redis, client, is_cluster, new_client
from .deadletter import dead_letter, replay_page
from .group import ClaimResult, ConsumerOps, GroupStats, ReclaimResult, consumer_taken_over
from .losses import (
    accept_losses,
    ack_gone,
    loss_records,
    record_losses,
    settle_losses,
    xrange_each,
)
from .produce import NO_TRIM, Trim, add_chunk
from .scripts import run_script, script_text
from .streams import ACK_CHUNK, key_type, stream_exists, text, xack, xrange_pages

__all__ = [
    "ACK_CHUNK",
    "GROUP_GONE_FIX",
    "NO_TRIM",
    "ClaimResult",
    "ConnectionSpec",
    "ConsumerOps",
    "GroupStats",
    "ReclaimResult",
    "Redis",
    "RedisError",
    "ResponseError",
    "Trim",
    "accept_losses",
    "ack_gone",
    "add_chunk",
    "client",
    "consumer_taken_over",
    "dead_letter",
    "is_cluster",
    "key_type",
    "loss_records",
    "new_client",
    "record_losses",
    "redis_errors",
    "replay_page",
    "run_script",
    "script_text",
    "settle_losses",
    "stream_exists",
    "text",
    "translate",
    "xack",
    "xrange_each",
    "xrange_pages",
]
