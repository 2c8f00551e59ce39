"""The Redis access layer: the only part of spark-eventbus that talks to redis-py.

* :mod:`.base` — what the layer shares from redis-py: the ``Redis`` client type, the error
  classes, the cluster redirect replies. Imports nothing of the package.
* :mod:`.client` — clients made from a :class:`~spark_eventbus.core.connection.ConnectionSpec` and
  cached per process, with retries: a single node, or a cluster client when the URL names a
  cluster node.
* :mod:`.boundary` — redis-py errors become :mod:`spark_eventbus.errors` here, and only here.
* :mod:`.scripts` — the ``lua/*.lua`` scripts, loaded once by name, run with EVALSHA.
* :mod:`.streams` — type checks, paged XRANGE, chunked XACK, packed commands.
* :mod:`.durability` — WAIT/WAITAOF barriers after the writes the guarantees rest on.
* :mod:`.produce` — a chunk of XADDs with its idempotency marker as one transaction.
* :mod:`.markers` — the sink's marker registry, seals and marker pruning after a commit.
* :mod:`.wire` — the one wire: many commands in one round trip, on redis-py's public API.
* :mod:`.group` — one consumer of one group on one stream: the commands of each concern, and
  group creation. Each concern below takes a list of them (one stream is a list of one) and
  is pipelined per node: :mod:`.claims` (claims, reclaims), :mod:`.acks`, :mod:`.plans`
  (claim plans, loss records), :mod:`.probes` (group state, news, lag, progress),
  :mod:`.leases` (consumer leases, heartbeat), :mod:`.discovery` (``streamPattern``).
* :mod:`.losses` — entries a replayed batch no longer finds: per-ID replay, acks, loss records.
* :mod:`.manifests` — the contents of large batches, which their offsets name.

May import: core.
"""

from __future__ import annotations

from . import acks, claims, discovery, leases, manifests, plans, probes
from .base import RedisError, ResponseError
from .boundary import GROUP_GONE_FIX, redis_errors, translate
from .capabilities import capabilities_of, check_scripting, server_capabilities
from .client import ConnectionSpec, Redis, client, is_cluster, new_client
from .deadletter import dead_letter, dead_letter_entries, replay_page
from .durability import Barrier, preflight, wait_for_writes
from .group import ClaimResult, ConsumerOps, ReclaimResult, consumer_taken_over, ensure_groups
from .losses import (
    accept_losses,
    ack_gone,
    loss_records,
    record_losses,
    settle_losses,
    xrange_each,
)
from .markers import delete_keys, forget_batches, record_markers, seal_batches
from .probes import GroupStats, Probe, checked_lag, total
from .produce import (
    ADDED,
    NO_TRIM,
    SEALED,
    WRITTEN,
    Trim,
    add_chunk,
    check_acked_trim,
    check_transactions,
    write_chunk,
)
from .scripts import run_script, script_text
from .streams import (
    ACK_CHUNK,
    ack_entries,
    check_streams,
    key_type,
    stream_exists,
    stream_spans,
    text,
    xack,
    xrange_pages,
)

__all__ = [
    "ACK_CHUNK",
    "ADDED",
    "GROUP_GONE_FIX",
    "NO_TRIM",
    "SEALED",
    "WRITTEN",
    "Barrier",
    "ClaimResult",
    "ConnectionSpec",
    "ConsumerOps",
    "GroupStats",
    "Probe",
    "ReclaimResult",
    "Redis",
    "RedisError",
    "ResponseError",
    "Trim",
    "accept_losses",
    "ack_entries",
    "ack_gone",
    "acks",
    "add_chunk",
    "capabilities_of",
    "check_acked_trim",
    "check_scripting",
    "check_streams",
    "check_transactions",
    "checked_lag",
    "claims",
    "client",
    "consumer_taken_over",
    "dead_letter",
    "dead_letter_entries",
    "delete_keys",
    "discovery",
    "ensure_groups",
    "forget_batches",
    "is_cluster",
    "key_type",
    "leases",
    "loss_records",
    "manifests",
    "new_client",
    "plans",
    "preflight",
    "probes",
    "record_losses",
    "record_markers",
    "redis_errors",
    "replay_page",
    "run_script",
    "script_text",
    "seal_batches",
    "server_capabilities",
    "settle_losses",
    "stream_exists",
    "stream_spans",
    "text",
    "total",
    "translate",
    "wait_for_writes",
    "write_chunk",
    "xack",
    "xrange_each",
    "xrange_pages",
]
