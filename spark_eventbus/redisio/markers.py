"""The sink's idempotency markers after a commit (driver side): the query's registry of marker
keys per batch (``HSET``/``HGETALL``/``HDEL``), the seals raised before markers go
(``GET``/``SET``) and the deletion of markers no replay needs any more (``UNLINK``). Errors
come out as :class:`~spark_eventbus.errors.EventBusError`; the caller decides what a failure
means (the batch is committed anyway: markers expire on their own)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

from ..core.connection import ConnectionSpec
from .boundary import redis_errors
from .client import client
from .produce import sealed_batch
from .streams import text
from .wire import pipeline, raise_first

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


def seal_batches(spec: ConnectionSpec, seals: Mapping[str, int], ttl_ms: int) -> None:
    """Raise each seal key of ``seals`` to its batch (a seal never goes down: one already
    higher keeps its batch) and renew its TTL to ``ttl_ms``: two round trips per node. The
    commits of one query run one after another, so nothing writes a seal between its ``GET``
    and its ``SET``. Before the markers of those batches are deleted (:func:`delete_keys`):
    a late attempt that then finds no marker finds the seal. Idempotent."""
    if not seals:
        return
    with redis_errors("sealing the sink's finished batches", spec):
        r = client(spec)
        keys = sorted(seals)
        now = raise_first(pipeline(r, [("GET", k) for k in keys]))
        raise_first(pipeline(r, [("SET", k, str(max(seals[k], sealed_batch(v))), "PX", ttl_ms)
                                 for k, v in zip(keys, now, strict=True)]))


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
