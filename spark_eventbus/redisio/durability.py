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
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import redis
from redis.cluster import RedisCluster

from ..core.capabilities import Capabilities, require_option
from ..core.connection import ConnectionSpec, spell
from ..errors import ConfigError, ReplicasMissing, ReplicasShort, ReplicationError
from .base import Redis
from .boundary import redis_errors
from .capabilities import capabilities_of
from .credentials import check_credentials
from .retry import Window, WindowRetry
from .wire import on_slot

log = logging.getLogger("spark_eventbus")


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
            return (f"{aof} and {replicas} of {spec.wait_replicas} replica(s) did "
                    f"({spell('waitAof', spec.style)}, {spell('waitReplicas', spec.style)})")
        return None
    got = int(reply)
    if got < spec.wait_replicas:
        return (f"{got} of {spec.wait_replicas} replica(s) acknowledged "
                f"({spell('waitReplicas', spec.style)})")
    return None


@dataclass(frozen=True)
class Barrier:
    """One key's part of a barrier: ``key`` (ours, on the node that took the writes) is
    touched; ``check`` is a command whose reply ``expect`` accepts only when the writes are on
    the node the barrier reached — after a failover the pool may reach a new primary that never
    got them, and a WAIT there would confirm nothing of ours."""

    key: str
    ttl_ms: int
    check: tuple[Any, ...] | None = None
    expect: Callable[[Any], bool] | None = None


def _run(node: redis.Redis, spec: ConnectionSpec, barriers: list[Barrier], what: str) -> None:
    """One round trip on one connection of ``node``: each barrier's check and touch, then one
    WAIT/WAITAOF covering all of them."""
    pipe = node.pipeline(transaction=False)
    for b in barriers:
        if b.check is not None:
            pipe.execute_command(*b.check)
        pipe.pexpire(b.key, b.ttl_ms)
    pipe.execute_command(*_wait_command(spec))
    replies = iter(pipe.execute())
    for b in barriers:
        found = next(replies) if b.check is not None else None
        touched = next(replies)
        if (b.check is not None and b.expect is not None and not b.expect(found)) \
                or not touched:
            raise ReplicationError(
                f"{what}: the writes are not on the primary the connection reaches now (key "
                f"{b.key!r}): a failover lost them. Nothing is reported done; the task or "
                "batch runs again (its writes are idempotent).")
    missing = _shortfall(spec, next(replies))
    if missing:
        online = _online_replicas(node) if spec.wait_replicas else None
        if online is not None and online < spec.wait_replicas:
            raise ReplicasMissing(
                f"{what}: {missing} within {spec.wait_timeout_ms} ms on {spec.display}, whose "
                f"primary has {online} replica(s) online (after a failover, until the old "
                "primary rejoins as a replica; or a replica gone). Waited for them for up to "
                f"{spell('failoverTimeoutMs', spec.style)} = {spec.failover_timeout_ms} ms; "
                "the write is on the primary but could be lost if it fails now, so it is not "
                "reported done: the task fails (retriable; the write is idempotent). Bring a "
                f"replica back (INFO replication), or lower {spell('waitReplicas', spec.style)}.",
                online)
        raise ReplicasShort(
            f"{what}: {missing} within {spec.wait_timeout_ms} ms on {spec.display}. The write "
            "is on the primary but could be lost if it fails now, so it is not reported done: "
            "the task fails (retriable; the write is idempotent). Check the replicas' links "
            f"(INFO replication), or raise {spell('waitTimeoutMs', spec.style)} or lower "
            f"{spell('waitReplicas', spec.style)}.", online)


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
    ACL user may not run INFO: the writes then say it), and ``WAITAOF`` known (the server's
    capabilities, :func:`.capabilities.capabilities_of`: one probe per spec per process) with
    ``appendonly`` on. A clear error naming the option and the fix otherwise: a
    :class:`ConfigError` for what the server cannot do, a retriable :class:`ReplicationError`
    for replicas missing now."""
    if not spec.waits:
        return
    from ..core.connection import spell

    nodes = (list(r.get_primaries()) if isinstance(r, RedisCluster) else [None])
    if spec.wait_aof:
        caps = capabilities_of(spec)
        _require_waitaof(caps, caps.has_waitaof, spec.display, style)
    with redis_errors("checking options 'waitReplicas'/'waitAof'", spec):
        for node in nodes:
            c = r.get_redis_connection(node) if node is not None and isinstance(
                r, RedisCluster) else r
            where = f"{node.host}:{node.port}" if node is not None else spec.display
            online = _online_replicas(c)
            if online is not None and online < spec.wait_replicas:
                raise ReplicationError(
                    f"{spell('waitReplicas', style)} = {spec.wait_replicas} asks for more "
                    f"replicas than the primary at {where} has online ({online}): every write "
                    "would fail. Lower it, or add replicas; a replica that is resyncing counts "
                    "once it is online again (retriable: a restart then carries on).")
            if spec.wait_aof:
                unknown = False
                try:
                    c.execute_command("WAITAOF", 1, 0, 1)
                except redis.ResponseError as exc:
                    msg = str(exc).lower()
                    if "appendonly" in msg:
                        raise ConfigError(
                            f"{spell('waitAof', style)} = true needs the primary's AOF, and "
                            f"{where} runs with appendonly off: turn it on (CONFIG SET "
                            "appendonly yes, and in redis.conf), or set waitAof to false.") \
                            from None
                    if "unknown command" not in msg:
                        raise
                    unknown = True  # the probe found WAITAOF, this node has not got it
                if unknown:
                    _require_waitaof(caps, False, where, style)


def _require_waitaof(caps: Capabilities, have: bool, where: str, style: str) -> None:
    from ..core.connection import spell

    require_option(caps, spell("waitAof", style), "true",
                   "WAITAOF (Redis >= 7.2 or Valkey has it)", have, where,
                   f"set it to false ({spell('waitReplicas', style)} still waits for "
                   "replicas), or upgrade the server")


def _node_id(r: Redis, key: str) -> str:
    if isinstance(r, RedisCluster):
        return str(r.get_node_from_key(key).name)
    return ""


def wait_for_writes(spec: ConnectionSpec, barriers: list[Barrier], what: str, *,
                    no_task_retry: bool = False) -> None:
    """Return once the writes the ``barriers`` name are on the replicas (and AOF) ``spec``
    asks for; nothing to do when it asks for none. One round trip per node serving the keys
    (a WAIT covers every earlier write of its node). Raises :class:`ReplicationError`
    (retriable) when they are missing or not confirmed within ``waitTimeoutMs``; other errors
    translated. ``no_task_retry``: the caller is the driver (the reader's plans), which has no
    Spark task retry to fall back on — a failure there stops the query — so every shortfall
    is waited out within ``failoverTimeoutMs``, not only replicas missing (after a failover
    the old primary may rejoin, count as online and still be loading its snapshot)."""
    if not spec.waits or not barriers:
        return
    from .client import client

    r = client(spec)
    # Replicas missing (not slow): a failover's aftermath — the promoted replica has none
    # until its old master rejoins and resyncs. Waited out within failoverTimeoutMs (from the
    # first try; the last try may add its waitTimeoutMs), as the failover itself is: the
    # driver's plans have no task retry to fall back on. Once replicas were missing, a plain
    # shortfall is waited out too: a replica back from a resync counts as online before it
    # has loaded the snapshot and acknowledged anything.
    clock = Window(WindowRetry(spec.failover_timeout_ms / 1000))
    clock.retry.answered = True
    clock.deadline = time.monotonic() + spec.failover_timeout_ms / 1000
    missing = False
    while True:
        try:
            with redis_errors(what, spec):
                _wait_on(r, spec, barriers, what)
            return
        except ReplicasShort as exc:
            if not (no_task_retry or missing or isinstance(exc, ReplicasMissing)) \
                    or not clock.wait():
                raise
            if not missing:
                log.warning("spark-eventbus: %s: %s; waiting for the replicas for up to %d ms "
                            "(%s)", what,
                            f"{exc.online} replica(s) online, fewer than "
                            f"{spell('waitReplicas', spec.style)} = {spec.wait_replicas}"
                            if isinstance(exc, ReplicasMissing) else
                            "the writes were not confirmed (replicas, or the AOF) within "
                            f"{spell('waitTimeoutMs', spec.style)}",
                            spec.failover_timeout_ms, spell("failoverTimeoutMs", spec.style))
            missing = True


def _wait_on(r: Redis, spec: ConnectionSpec, barriers: list[Barrier], what: str) -> None:
    if not isinstance(r, RedisCluster):  # the client's own Retry waits out a failover
        _run(r, spec, barriers, what)
        return
    # A cluster's node clients do not retry: a master failing over (the connection refused,
    # then CLUSTERDOWN, then MOVED to the promoted replica) is waited out by on_slot. Each
    # round sends, to the node serving the first barrier left, every barrier left that the
    # slot map puts on that node then (grouped inside the retry: a failover or a reshard can
    # move them). On the promoted replica, a barrier's check says whether our writes made it.
    left = list(barriers)
    while left:
        left = on_slot(r, left[0].key, partial(_run_node, r, spec, left, what))


def _run_node(r: RedisCluster, spec: ConnectionSpec, left: list[Barrier], what: str,
              node: redis.Redis) -> list[Barrier]:
    """The barriers of ``left`` the slot map puts on the node of ``left[0]`` now, run on
    ``node`` (that node's client); returns the others."""
    here = _node_id(r, left[0].key)
    on = [_node_id(r, b.key) == here for b in left]
    _run(node, spec, [b for b, yes in zip(left, on, strict=True) if yes], what)
    return [b for b, yes in zip(left, on, strict=True) if not yes]


def preflight(spec: ConnectionSpec, style: str = "option") -> None:
    """What must hold before a part's first write, once per spec and process (the driver, at
    start): the credentials a file or provider gives (:func:`.credentials.check_credentials`),
    and :func:`check_durability` on this process's client of ``spec``."""
    if spec in _checked or not (spec.waits or spec.rotating):
        return
    from .client import client

    check_credentials(spec)
    if spec.waits:
        check_durability(spec, client(spec), style)
    _checked.add(spec)


_checked: set[ConnectionSpec] = set()
