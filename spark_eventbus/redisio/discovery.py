"""The streams of a subscription by pattern (``streamPattern``): which match
(:func:`discover`), and which of those subscribed are gone (:func:`missing`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.keys import PREFIX
from .boundary import redis_errors
from .client import ConnectionSpec, client
from .group import ConsumerOps, where
from .streams import text
from .wire import fresh_replica_map, pipeline, raise_first, replica_or_master


def discover(spec: ConnectionSpec, pattern: str, exclude: Sequence[str] = ()) -> list[str]:
    """The streams whose names match ``pattern`` (a Redis glob): ``SCAN MATCH … TYPE stream``,
    on every master of a cluster (redis-py's cluster ``scan_iter`` visits each), sorted. The
    connector's own keys (``{…}:eventbus:…``) and ``exclude`` (the dead-letter stream) never
    count."""
    r = client(spec)
    where: dict[str, Any] = {}
    if getattr(r, "reads_replicas", False):  # readFrom=replica on a cluster: a replica a shard
        fresh_replica_map(r)
        where["target_nodes"] = _shard_replicas(r)
    with redis_errors(f"looking for streams matching {pattern!r}", spec):
        found = {text(k) for k in r.scan_iter(match=pattern, count=1000, _type="stream",
                                              **where)}
    own = f":{PREFIX}:"
    return sorted(k for k in found if k not in exclude
                  and not (k.startswith("{") and own in k))


def _shard_replicas(r: Any) -> list[Any]:
    """One node per shard of a cluster: its first replica, as :func:`.wire.pipeline` reads it
    (:func:`.wire.replica_or_master`)."""
    slots = {serving[0].name: slot for slot, serving in r.nodes_manager.slots_cache.items()}
    nodes = (replica_or_master(r, slot) for slot in slots.values())
    return list({node.name: node for node in nodes}.values())


def missing(ops: Sequence[ConsumerOps]) -> list[str]:
    """The streams of ``ops`` that do not exist (``TYPE`` is ``none``), pipelined."""
    if not ops:
        return []
    with redis_errors(f"checking streams ({where(ops)})", ops[0].spec):
        kinds = raise_first(pipeline(ops[0].redis, [("TYPE", op.stream) for op in ops]))
    return [op.stream for op, kind in zip(ops, kinds, strict=True) if text(kind) == "none"]
