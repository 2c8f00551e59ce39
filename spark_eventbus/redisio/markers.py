"""The sink's idempotency markers after a commit (driver side): the query's registry of marker
keys per batch (``HSET``/``HGETALL``/``HDEL``) and the deletion of markers no replay needs any
more (``UNLINK``). Errors come out as :class:`~spark_eventbus.errors.EventBusError`; the caller
decides what a failure means (the batch is committed anyway: markers expire on their own)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from ..core.connection import ConnectionSpec
from .boundary import redis_errors
from .client import client
from .streams import text

# Keys per UNLINK call.
_UNLINK_CHUNK = 500


def record_markers(spec: ConnectionSpec, registry: str, batch: int, markers: Sequence[str],
                   ttl_ms: int) -> dict[str, list[str]]:
    """Record ``markers`` as batch ``batch``'s in hash ``registry`` (its TTL renewed to
    ``ttl_ms``) and return the markers of older batches in it, by batch field. Idempotent."""
    with redis_errors("recording the batch's idempotency markers", spec):
        r = client(spec)
        r.hset(registry, str(batch), json.dumps(list(markers)))
        r.pexpire(registry, ttl_ms)
        return {text(f): json.loads(v) for f, v in r.hgetall(registry).items()
                if int(f) < batch}


def delete_keys(spec: ConnectionSpec, keys: Sequence[str]) -> None:
    """``UNLINK`` ``keys`` in calls of at most 500 keys. Idempotent."""
    with redis_errors("pruning idempotency markers", spec):
        r = client(spec)
        for i in range(0, len(keys), _UNLINK_CHUNK):
            r.unlink(*keys[i:i + _UNLINK_CHUNK])


def forget_batches(spec: ConnectionSpec, registry: str, batches: Iterable[str]) -> None:
    """Drop ``batches``' fields from hash ``registry`` (``HDEL``). Idempotent."""
    with redis_errors("pruning idempotency markers", spec):
        client(spec).hdel(registry, *batches)
