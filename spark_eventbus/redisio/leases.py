"""Consumer leases of many streams at once (a single stream is a list of one), pipelined
per node, and a query's heartbeat key (:mod:`spark_eventbus.group.lease` decides when to take,
renew, steal and give them back)."""

from __future__ import annotations

from collections.abc import Sequence

from ..core.keys import alive_key
from .boundary import redis_errors
from .client import ConnectionSpec, client
from .group import ConsumerOps, where
from .scripts import run_scripts
from .streams import text

# The lease keys' own lifetime, renewed every quarter of it (whether their query is alive is
# its heartbeat key, renewed every few seconds).
LEASE_KEY_TTL_MS = 10 * 60_000


def leases(ops: Sequence[ConsumerOps], mode: str, run: str, owner: str,
           expected: str = "") -> list[tuple[str, str, int]]:
    """Acquire, renew, release or steal (``expected``: the holder whose heartbeat expired)
    each stream's consumer lease (``lua/lease.lua``, TTL :data:`LEASE_KEY_TTL_MS`),
    pipelined per node.

    Returns (status, holder, holder's remaining ms) per stream: status ``ok``, ``takeover``,
    ``held`` or ``lost``; holder is ``'<run> <owner>'`` of the query that has it."""
    if not ops:
        return []
    with redis_errors(f"checking the consumer leases ({where(ops)})", ops[0].spec):
        replies = run_scripts(ops[0].redis, "lease", [
            op.lease_call(mode, run, owner, LEASE_KEY_TTL_MS, expected) for op in ops])
    return [(text(status), text(holder), int(pttl)) for status, holder, pttl in replies]


def heartbeat(spec: ConnectionSpec, owner: str, ttl_ms: int) -> bool:
    """Query ``owner`` is alive for ``ttl_ms`` more (``keys.alive_key``). False: its heartbeat
    had expired (another query may have taken its leases over meanwhile)."""
    with redis_errors("renewing the consumer leases' heartbeat", spec):
        return client(spec).set(alive_key(owner), "1", px=ttl_ms, get=True) is not None


def heartbeat_ms(spec: ConnectionSpec, owner: str) -> int:
    """How long query ``owner``'s heartbeat has left (-2: it has none: dead)."""
    with redis_errors("reading a consumer lease's heartbeat", spec):
        return int(client(spec).pttl(alive_key(owner)))


def stop_heartbeat(spec: ConnectionSpec, owner: str) -> None:
    with redis_errors("removing the consumer leases' heartbeat", spec):
        client(spec).delete(alive_key(owner))
