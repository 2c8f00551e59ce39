"""Adding one chunk of entries to a stream, at most once per marker, as a transaction: the
sink's one write path (its dead letters included).

The sink's chunks arrive here as ``XADD`` commands already encoded as RESP
(:func:`spark_eventbus.writes.chunking.xadd_commands`). One chunk is two round trips on one
connection of the node serving the stream:

1. ``WATCH <marker> <seal>``, ``SISMEMBER <marker> <member>``, ``GET <seal>``, ``TYPE
   <stream>`` (and ``TIME`` when trimming by age), ``MULTI``. A member already there: an
   earlier attempt wrote the chunk; a seal at or above the chunk's batch: the batch is over
   (committed, its markers gone) and this is a late attempt. Either way ``DISCARD``, nothing
   is added.
2. The ``XADD``s, trimming, ``SADD <marker> <member>``, ``PEXPIRE``, ``EXEC``. ``EXEC`` runs
   all of it, or nothing when another attempt touched the marker, or the driver the seal,
   since the ``WATCH``; then 1 again.

The marker set is per (stream, query, batch, partition), so only attempts of the same task
(a retry, a speculative copy) ever touch it, and a lost ``WATCH`` means the other attempt
wrote a chunk: the rounds end, each one either writing or finding the chunk written. The
seal (per stream and query, :func:`spark_eventbus.core.keys.sink_seal_key`) is what makes
deleting the markers safe: the driver raises it to a batch before it deletes that batch's
markers, so an attempt still running then finds one or the other.
Redis runs these commands as it runs any client's (no script interpreter in between).

On a cluster the transaction goes to the node the slot map names. A slot that moved
(``MOVED``) is followed at once with the map read again; a slot on the move (``ASK``,
``TRYAGAIN``), no master for it (``CLUSTERDOWN``) or a node that does not answer is waited out
with the client's backoff within ``failoverTimeoutMs``, then the transaction is sent again:
safe with a marker, as each attempt looks for it first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import redis
from redis.cluster import RedisCluster

from ..core.connection import ConnectionSpec
from ..core.keys import sink_marker_key, sink_seal_key
from ..errors import ConfigError
from .base import Redis
from .boundary import redis_errors
from .capabilities import capabilities_of
from .client import client
from .retry import CLUSTER_REDIRECTS
from .streams import takes_acked_trim, text
from .wire import on_connection, on_slot, read_many
from .wire import packed as command

# Rounds of steps 1-2 in a row that lose their WATCH before the write fails. Each lost one
# means another attempt of the same task wrote one of its chunks to this marker set, so a
# task of fewer chunks than this always ends; the bound only stops a runaway.
WATCH_ROUNDS = 10_000

# The transaction's commands and the seal's (GET in a chunk's check; SET on the driver, named
# here for the message that lists what to add), which the ACL user needs (``eventbus acl-rule
# --role sink``).
TRANSACTION_COMMANDS = ("watch", "multi", "exec", "discard", "srem", "get", "set")

_MULTI = command("MULTI")
_EXEC = command("EXEC")
_DISCARD = command("DISCARD")


@dataclass(frozen=True)
class Trim:
    """How to trim the stream after adding (``XTRIM``); all ``None``: not at all."""

    max_len: int | None = None
    min_id: str | None = None
    min_age_ms: int | None = None  # MINID = server time minus this age
    approximate: bool = True
    # ACKED (Redis >= 8.2): only entries every group has acked; then always exact ('='):
    # approximate trimming with ACKED removes nothing before Redis 8.2.7 (redis#14623)
    acked_only: bool = False


NO_TRIM = Trim()

# A chunk's seal: the seal key of its stream and query, and the chunk's batch.
Seal = tuple[str, int]

# What became of a chunk: added now; found written by an earlier attempt (its marker); or
# refused because its batch is sealed (a late attempt, or a checkpoint rolled back by hand).
Outcome = Literal["added", "written", "sealed"]
ADDED: Outcome = "added"
WRITTEN: Outcome = "written"
SEALED: Outcome = "sealed"


def sealed_batch(value: bytes | str | None) -> int:
    """The batch a seal holds (its ``GET``): -1 for none, and for a value that is no batch
    number (written by hand), which seals nothing (a chunk goes by its marker) and which the
    driver's next seal overwrites."""
    try:
        return int(value) if value is not None else -1
    except ValueError:
        return -1


class _NotPermitted(redis.ResponseError):
    """The ACL user may not run a transaction command."""


def _refused_by_acl(exc: BaseException) -> bool:
    """An ACL refusal: ``NOPERM``, or the ``EXECABORT`` of an ``EXEC`` the user may not run."""
    return isinstance(exc, redis.exceptions.NoPermissionError) or "NOPERM" in str(exc)


def _trim_commands(stream: str, trim: Trim, server_ms: int | None) -> list[bytes]:
    approx = "~" if trim.approximate and not trim.acked_only else "="
    policy = ("ACKED",) if trim.acked_only else ()
    out = []
    if trim.max_len is not None:
        out.append(command("XTRIM", stream, "MAXLEN", approx, trim.max_len, *policy))
    min_id = trim.min_id
    if trim.min_age_ms is not None and server_ms is not None:
        cutoff = server_ms - trim.min_age_ms
        min_id = f"{cutoff}-0" if cutoff > 0 else None
    if min_id:
        out.append(command("XTRIM", stream, "MINID", approx, min_id, *policy))
    return out


def _refusal(exc: redis.ResponseError) -> redis.ResponseError:
    """A refused command's error as the transaction raises it: an ACL refusal of a
    ``TRANSACTION_COMMANDS`` command as :class:`_NotPermitted`; a cluster redirection as it
    is (:func:`.wire.on_slot` follows it); any other as it is."""
    if (not isinstance(exc, CLUSTER_REDIRECTS) and _refused_by_acl(exc)
            and any(f"'{c}'" in str(exc).lower() for c in TRANSACTION_COMMANDS)):
        return _NotPermitted(str(exc))
    return exc


def _read(conn: Any) -> Any:
    try:
        return conn.read_response()
    except redis.ResponseError as exc:
        refusal = _refusal(exc)
        if refusal is exc:
            raise
        raise refusal from exc


def _once(conn: Any, stream: str, xadds: bytes, count: int, marker: str | None, member: str,
          ttl_ms: int, trim: Trim, seal: Seal | None = None) -> tuple[int, Outcome] | None:
    """Steps 1 and 2 once: (entries added, what became of the chunk), or ``None`` when the
    WATCH was lost. Raises what Redis refused. ``MULTI`` ends step 1, so that a refused
    ``MULTI`` (an ACL rule without it) is seen before any ``XADD`` is sent."""
    head = [command("TYPE", stream)]
    if marker is not None:
        check = [command("SISMEMBER", marker, member)]
        if seal is not None:
            check.append(command("GET", seal[0]))
        watched = (marker, seal[0]) if seal is not None else (marker,)
        head = [command("WATCH", *watched), *check, *head]
    if trim.min_age_ms is not None:
        head.append(command("TIME"))
    conn.send_packed_command([*head, _MULTI])
    replies = [_read(conn) for _ in head]
    _read(conn)  # +OK of MULTI
    kind_at = 0
    if marker is not None:
        kind_at = 3 if seal is not None else 2
        outcome = WRITTEN if int(replies[1]) == 1 else \
            SEALED if seal is not None and sealed_batch(replies[2]) >= seal[1] else ADDED
        if outcome != ADDED:
            conn.send_packed_command([_DISCARD])  # also drops the WATCH
            _read(conn)
            return 0, outcome
    kind = text(replies[kind_at])
    if kind not in ("stream", "none"):
        # Checked here because EXEC has no rollback: a failed XADD would not stop the SADD.
        raise redis.ResponseError(
            f"WRONGTYPE the key {stream!r} holds a {kind}, not a stream")
    server_ms = None
    if trim.min_age_ms is not None:
        secs, micros = replies[-1]
        server_ms = int(secs) * 1000 + int(micros) // 1000
    tail = _trim_commands(stream, trim, server_ms)
    if marker is not None:
        tail += [command("SADD", marker, member), command("PEXPIRE", marker, ttl_ms)]
    conn.send_packed_command([xadds, *tail, _EXEC])
    refused: list[BaseException] = [  # +QUEUED or a refusal per command
        _refusal(r) for r in read_many(conn, count + len(tail))
        if isinstance(r, redis.ResponseError)]
    refused.sort(key=lambda e: not isinstance(e, (*CLUSTER_REDIRECTS, _NotPermitted)))
    try:
        result = _read(conn)
    except redis.exceptions.ExecAbortError:
        raise refused[0] if refused else redis.ResponseError("EXECABORT") from None
    if refused:  # pragma: no cover - Redis and Valkey abort EXEC after any refused command;
        raise refused[0]  # a server that ran it anyway wrote part of the chunk: never "written"
    if result is None:
        return None
    failed = [r for r in result if isinstance(r, BaseException)]
    if failed:
        # an XADD failed: the chunk was not (wholly) written, so the marker must not say it
        # was; only a trim failed: it was, and the marker stays (a retry adds nothing twice)
        if marker is not None and any(isinstance(r, BaseException) for r in result[:count]):
            conn.send_packed_command([command("SREM", marker, member)])
            _read(conn)
        raise failed[0]
    return count, ADDED


def add_chunk(r: Redis, stream: str, xadds: bytes, count: int, marker: str | None,
              member: str, ttl_ms: int, trim: Trim = NO_TRIM, seal: Seal | None = None
              ) -> tuple[int, Outcome]:
    """Add ``count`` entries (``xadds``: that many ``XADD stream * ...`` in RESP) to
    ``stream`` and, when ``marker`` is given, ``member`` to the set ``marker`` (in the
    stream's slot), atomically, unless ``member`` is already there or ``seal`` (its key, in
    the stream's slot too, and the chunk's batch) says the batch is over; then trim.

    Returns (entries added, :data:`ADDED`; or 0 and :data:`WRITTEN` when the marker says the
    chunk was written, :data:`SEALED` when the seal says its batch is over). Connection
    errors are retried through the client's ``Retry`` (on a cluster, see the module's
    docstring): with a marker that is safe, as a retry first looks for the marker; without one
    (``idempotent=false``) a retry after a connection lost during ``EXEC`` can add the chunk
    twice — that mode is at-least-once, as the README says. An ACL
    user that may not run ``TRANSACTION_COMMANDS`` gets a :class:`ConfigError` naming them.
    """

    def attempt(conn: Any) -> tuple[int, Outcome]:
        for _ in range(WATCH_ROUNDS):
            done = _once(conn, stream, xadds, count, marker, member, ttl_ms, trim, seal)
            if done is not None:
                return done
        raise redis.ResponseError(
            f"the chunk's WATCH on {marker!r} was lost {WATCH_ROUNDS} times in a row")

    try:
        if isinstance(r, RedisCluster):  # retried by on_slot, which follows the slot
            return on_slot(r, stream, lambda node: on_connection(node, attempt, retried=False))
        return on_connection(r, attempt)
    except _NotPermitted as exc:
        raise _not_permitted(exc) from exc


def _no_acked_trim(stream: str, detail: object) -> ConfigError:
    return ConfigError(
        f"option 'trimPolicy' = 'acked' needs XTRIM … ACKED (Redis >= 8.2), which the server of "
        f"stream {stream!r} does not have ({detail}); nothing was written to it. Use Redis "
        ">= 8.2, or leave trimPolicy out (trimming then removes entries whether or not a group "
        "has acked them).")


def check_acked_trim(spec: ConnectionSpec, stream: str) -> None:
    """Before the first chunk to ``stream`` (the sink's start for the ``stream`` option, each
    task's first chunk to a stream a column names), once per process: its server takes
    ``XTRIM … ACKED`` — asked with a trim that removes nothing (``MAXLEN`` of the largest
    length), which a server without the policy refuses as a syntax error. A
    :class:`ConfigError` naming option ``trimPolicy`` and the server otherwise. (Inside the
    chunk's transaction the refusal would come only at ``EXEC``, after its ``XADD``s ran.)"""
    if (spec, stream) in _acked_trim:
        return
    with redis_errors("checking that the server trims only acked entries", spec):
        if not takes_acked_trim(client(spec), stream):
            server = capabilities_of(spec, scripts=False).display
            raise _no_acked_trim(stream, f"{spec.display}, {server}: XTRIM … ACKED is a "
                                         "syntax error there")
    _acked_trim.add((spec, stream))


_acked_trim: set[tuple[ConnectionSpec, str]] = set()


def _not_permitted(exc: BaseException) -> ConfigError:
    return ConfigError(
        f"the sink writes each chunk as one transaction, which the Redis ACL user may not run "
        f"({exc}). Add {' '.join(f'+{c}' for c in TRANSACTION_COMMANDS)} to the user's rule "
        "(`eventbus acl-rule --role sink` prints the whole rule).")


def check_transactions(spec: ConnectionSpec, stream: str | None) -> None:
    """At start (driver), before any task, once per process: the ACL user may run the chunk's
    transaction — ``MULTI`` and an empty ``EXEC``, ``MULTI`` and ``DISCARD``, and, when the
    write names its ``stream``, ``WATCH`` and ``SREM`` of a marker key of it and ``GET`` and
    ``SET … XX`` of a seal key of it that no write uses (nothing changes). A
    :class:`ConfigError` naming the commands to add otherwise. On a cluster, on the node of
    ``stream``'s slot (any slot's without one), through a failover as the chunks go
    (:func:`.wire.on_slot`)."""
    if (spec, stream) in _checked:
        return
    cmds = [_MULTI, _EXEC, _MULTI, _DISCARD]
    if stream:
        probe_key = sink_marker_key(stream, "check", "-", 0)
        seal_key = sink_seal_key(stream, "check")
        cmds = [command("WATCH", probe_key), command("SREM", probe_key, "-"),
                command("GET", seal_key), command("SET", seal_key, "-", "XX"), *cmds]

    def probe(conn: Any) -> None:
        conn.send_packed_command(cmds)
        for _ in cmds:
            _read(conn)

    with redis_errors("checking that the sink may run its transactions", spec):
        r = client(spec)
        try:
            if isinstance(r, RedisCluster):
                on_slot(r, stream or "eventbus",
                        lambda node: on_connection(node, probe, retried=False))
            else:
                on_connection(r, probe)
        except _NotPermitted as exc:
            raise _not_permitted(exc) from exc
    _checked.add((spec, stream))


_checked: set[tuple[ConnectionSpec, str | None]] = set()


def write_chunk(spec: ConnectionSpec, stream: str, xadds: bytes, count: int,
                marker: str, member: str | None, ttl_ms: int, trim: Trim,
                seal: Seal | None = None) -> tuple[int, Outcome]:
    """One sink chunk (executor side): :func:`add_chunk` on this process's client for
    ``spec``. ``member`` ``None``: no idempotency marker (nor seal). Returns what
    :func:`add_chunk` does; redis-py errors come out as
    :class:`~spark_eventbus.errors.EventBusError`.
    """
    if trim.acked_only:
        check_acked_trim(spec, stream)
    with redis_errors(f"writing {count} entries to stream {stream!r}", spec):
        return add_chunk(client(spec), stream, xadds, count,
                         marker if member is not None else None, member or "", ttl_ms, trim,
                         seal if member is not None else None)
