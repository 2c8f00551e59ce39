"""Writes that survive a failover: ``WAIT`` / ``WAITAOF`` after the writes the guarantees rest
on (sink chunks and markers, claim plans, dead letters), when ``waitReplicas`` or ``waitAof``
asks for it (docs/high-availability.md).

``WAIT`` counts the replicas that have every write *its own connection* made. The writes here
run on whichever pooled connection (or through a script, or a transaction on a connection of
their own), so the wait is a barrier instead: on one connection of the node that serves the
key, touch a key of ours (``PEXPIRE``: propagated to replicas as ``PEXPIREAT``), then ``WAIT``.
Replicas apply the replication stream in order, so a replica that has the touch has every
write the node applied before it — ours included, and those of an earlier attempt of the same
task that a retry then found already done. One round trip per barrier.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from redis.cluster import RedisCluster

from ..connection import ConnectionSpec
from ..errors import ConfigError, EventBusConnectionError
from .base import Redis
from .boundary import redis_errors

log = logging.getLogger("spark_eventbus")


class ReplicationError(EventBusConnectionError):
    """Fewer replicas (or no AOF fsync) confirmed a write within ``waitTimeoutMs``. Retriable:
    the writes it guards are idempotent, so the task may run again."""


def _node(r: Redis, key: str) -> redis.Redis:
    if isinstance(r, RedisCluster):
        node = r.get_node_from_key(key)
        conn = node.redis_connection or r.get_redis_connection(node)
        return conn
    return r


def _wait_command(spec: ConnectionSpec) -> tuple[Any, ...]:
    if spec.wait_aof:
        return ("WAITAOF", 1, spec.wait_replicas, spec.wait_timeout_ms)
    return ("WAIT", spec.wait_replicas, spec.wait_timeout_ms)


def _shortfall(spec: ConnectionSpec, reply: Any) -> str | None:
    """What the reply to :func:`_wait_command` lacks, or ``None``."""
    if spec.wait_aof:
        local, replicas = (int(x) for x in reply)
        if local < 1 or replicas < spec.wait_replicas:
            aof = "the primary fsynced its AOF" if local else "the primary did NOT fsync its AOF"
            return (f"{aof} and {replicas} of {spec.wait_replicas} replica(s) did (options "
                    "'waitAof', 'waitReplicas')")
        return None
    got = int(reply)
    if got < spec.wait_replicas:
        return (f"{got} of {spec.wait_replicas} replica(s) acknowledged (option "
                "'waitReplicas')")
    return None


def wait_replicated(r: Redis, spec: ConnectionSpec, key: str, ttl_ms: int, what: str,
                    create_member: str | None = None) -> None:
    """Return once the writes made so far on the node serving ``key`` have reached the
    replicas (and AOF) ``spec`` asks for; nothing to do when it asks for none. ``key`` is one
    of ours in the same slot, kept for ``ttl_ms``; ``create_member`` adds that member to it
    (a set) first, for a key that may not exist yet. Raises :class:`ReplicationError` when
    they do not confirm within ``waitTimeoutMs``."""
    if not spec.waits:
        return
    pipe = _node(r, key).pipeline(transaction=False)
    if create_member is not None:
        pipe.sadd(key, create_member)
    pipe.pexpire(key, ttl_ms)
    pipe.execute_command(*_wait_command(spec))
    *_, touched, reply = pipe.execute()
    if not touched:  # nothing was propagated, so the WAIT covers nothing of ours
        raise ReplicationError(
            f"{what}: could not confirm replication, as the key {key!r} is gone. Nothing is "
            "reported written; the task may run again (the write is idempotent).")
    missing = _shortfall(spec, reply)
    if missing:
        raise ReplicationError(
            f"{what}: {missing} within {spec.wait_timeout_ms} ms on {spec.display}. The write "
            "is on the primary but could be lost if it fails now, so it is not reported done: "
            "the task fails (retriable; the write is idempotent). Check the replicas' links "
            "(INFO replication), or raise 'waitTimeoutMs' or lower 'waitReplicas'.")


def _server(r: Redis) -> str:
    hello = r.execute_command("HELLO", "3")
    get = (lambda k: hello.get(k.encode(), hello.get(k))) if isinstance(hello, dict) else None
    if get is None:
        return "the server"

    def s(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)
    return f"{s(get('server'))} {s(get('version'))}"


def _online_replicas(r: Redis) -> int | None:
    try:
        info = r.info("replication")
    except redis.ResponseError as exc:
        log.debug("spark-eventbus: INFO replication refused (%s); replicas not counted", exc)
        return None
    return sum(1 for k, v in info.items()
               if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online")


def check_durability(spec: ConnectionSpec, r: Redis, style: str = "option") -> None:
    """At start (driver), never mid-query: the primary can do what ``waitReplicas`` and
    ``waitAof`` ask — that many replicas online now (``INFO replication``; skipped where the
    ACL user may not run INFO: the writes then say it), and ``WAITAOF`` known with
    ``appendonly`` on. A clear :class:`ConfigError` naming the option and the fix otherwise."""
    if not spec.waits:
        return
    from ..connection import spell

    nodes = (list(r.get_primaries()) if isinstance(r, RedisCluster) else [None])
    with redis_errors("checking options 'waitReplicas'/'waitAof'", spec):
        for node in nodes:
            c = r.get_redis_connection(node) if node is not None and isinstance(
                r, RedisCluster) else r
            where = f"{node.host}:{node.port}" if node is not None else spec.display
            online = _online_replicas(c)
            if online is not None and online < spec.wait_replicas:
                raise ConfigError(
                    f"{spell('waitReplicas', style)} = {spec.wait_replicas} asks for more "
                    f"replicas than the primary at {where} has online ({online}): every write "
                    "would fail. Lower it, or add replicas (a replica that is resyncing counts "
                    "once it is online again).")
            if spec.wait_aof:
                try:
                    c.execute_command("WAITAOF", 1, 0, 1)
                except redis.ResponseError as exc:
                    msg = str(exc)
                    if "unknown command" in msg.lower():
                        raise ConfigError(
                            f"{spell('waitAof', style)} = true needs WAITAOF, which "
                            f"{_server(c)} at {where} lacks (Redis >= 7.2 or Valkey has it). "
                            "Set it to false (waitReplicas still waits for replicas), or "
                            "upgrade the server.") from None
                    if "appendonly" in msg.lower():
                        raise ConfigError(
                            f"{spell('waitAof', style)} = true needs the primary's AOF, and "
                            f"{where} runs with appendonly off: turn it on (CONFIG SET "
                            "appendonly yes, and in redis.conf), or set waitAof to false.") \
                            from None
                    raise


def _node_id(r: Redis, key: str) -> str:
    if isinstance(r, RedisCluster):
        return str(r.get_node_from_key(key).name)
    return ""


def wait_for_writes(spec: ConnectionSpec, keys: list[str], ttl_ms: int, what: str,
                    create: bool = True) -> None:
    """:func:`wait_replicated` once per node serving ``keys`` (one key per node is enough: a
    barrier covers every earlier write of its node). ``create``: the keys are sets of ours that
    may not exist yet (a marker). Errors translated; :class:`ReplicationError` as it is."""
    if not spec.waits or not keys:
        return
    from .client import client

    r = client(spec)
    with redis_errors(what, spec):
        seen: set[str] = set()
        for key in keys:
            node = _node_id(r, key)
            if node not in seen:
                seen.add(node)
                wait_replicated(r, spec, key, ttl_ms, what, WAIT_MEMBER if create else None)


def preflight(spec: ConnectionSpec, style: str = "option") -> None:
    """:func:`check_durability` on this process's client of ``spec`` (once per spec)."""
    if not spec.waits or spec in _checked:
        return
    from .client import client

    check_durability(spec, client(spec), style)
    _checked.add(spec)


# The member a barrier adds to a marker set that may not exist yet (never a chunk's member,
# which is '<partition>:<chunk>', nor an entry ID).
WAIT_MEMBER = "~wait"
_checked: set[ConnectionSpec] = set()
