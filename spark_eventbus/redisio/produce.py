"""Adding one chunk of entries to a stream, at most once per marker, as a transaction.

The sink's chunks arrive here as ``XADD`` commands already encoded as RESP
(:func:`spark_eventbus.chunking.xadd_commands`). One chunk is two round trips on one
connection of the node serving the stream:

1. ``WATCH <marker>``, ``SISMEMBER <marker> <member>``, ``TYPE <stream>`` (and ``TIME`` when
   trimming by age), ``MULTI``. A member already there: an earlier attempt wrote the chunk;
   ``DISCARD``, nothing is added.
2. The ``XADD``s, trimming, ``SADD <marker> <member>``, ``PEXPIRE``, ``EXEC``. ``EXEC`` runs
   all of it, or nothing when another attempt touched the marker since the ``WATCH``; then 1
   again.

The marker set is per (stream, query, batch, partition), so only attempts of the same task
(a retry, a speculative copy) ever touch it: a ``WATCH`` is only lost to the race it guards.
Redis runs these commands as it runs any client's (no script interpreter in between), and
the whole chunk is one ``EXEC``: the same atomicity as ``lua/sink_chunk.lua``, which stays
the path for what this one does not cover (:func:`add_chunk` returns ``None``).
:func:`write_chunk` is what the sink calls: this path, else the script, errors translated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster

from ..connection import ConnectionSpec
from ..resp import command
from .base import Redis
from .boundary import redis_errors
from .client import client
from .retry import CLUSTER_REDIRECTS
from .scripts import run_script
from .streams import text
from .wire import node_for, on_connection

# Retries of step 1-2 after a lost WATCH before the caller falls back to the script (only a
# second attempt of the same task writing the same chunk at the same moment loses one).
WATCH_ROUNDS = 8

log = logging.getLogger("spark_eventbus")

# The commands only this path needs (ACL rules written before it existed lack them).
TRANSACTION_COMMANDS = ("watch", "multi", "exec", "discard", "srem")
_warned_noperm = False

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


NO_TRIM = Trim()


class _Redirected(redis.ResponseError):
    """The node does not serve the stream's slot now (cluster): use the cluster client."""


class _NotPermitted(redis.ResponseError):
    """The ACL user may not run a transaction command: use the script."""


def _refused_by_acl(exc: BaseException) -> bool:
    return isinstance(exc, redis.exceptions.NoPermissionError) or str(exc).startswith("NOPERM")


def _trim_commands(stream: str, trim: Trim, server_ms: int | None) -> list[bytes]:
    approx = "~" if trim.approximate else "="
    out = []
    if trim.max_len is not None:
        out.append(command("XTRIM", stream, "MAXLEN", approx, trim.max_len))
    min_id = trim.min_id
    if trim.min_age_ms is not None and server_ms is not None:
        cutoff = server_ms - trim.min_age_ms
        min_id = f"{cutoff}-0" if cutoff > 0 else None
    if min_id:
        out.append(command("XTRIM", stream, "MINID", approx, min_id))
    return out


def _read(conn: Any) -> Any:
    try:
        return conn.read_response()
    except CLUSTER_REDIRECTS as exc:
        raise _Redirected(f"{type(exc).__name__}: {exc}") from exc
    except redis.ResponseError as exc:
        if _refused_by_acl(exc) and any(f"'{c}'" in str(exc).lower()
                                        for c in TRANSACTION_COMMANDS):
            raise _NotPermitted(str(exc)) from exc
        raise


def _once(conn: Any, stream: str, xadds: bytes, count: int, marker: str | None, member: str,
          ttl_ms: int, trim: Trim) -> tuple[int, bool] | None:
    """Steps 1 and 2 once: (entries added, already written), or ``None`` when the WATCH was
    lost. Raises what Redis refused. ``MULTI`` ends step 1, so that a refused ``MULTI`` (an
    ACL rule without it) is seen before any ``XADD`` is sent."""
    head = [command("TYPE", stream)]
    if marker is not None:
        head = [command("WATCH", marker), command("SISMEMBER", marker, member), *head]
    if trim.min_age_ms is not None:
        head.append(command("TIME"))
    conn.send_packed_command([*head, _MULTI])
    replies = [_read(conn) for _ in head]
    _read(conn)  # +OK of MULTI
    if marker is not None and int(replies[1]) == 1:
        conn.send_packed_command([_DISCARD])  # also drops the WATCH
        conn.read_response()
        return 0, True
    kind = text(replies[2 if marker is not None else 0])
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
    refused: list[BaseException] = []
    for _ in range(count + len(tail)):  # +QUEUED or a refusal per command
        try:
            _read(conn)
        except redis.ResponseError as exc:
            refused.append(exc)
    refused.sort(key=lambda e: not isinstance(e, _Redirected | _NotPermitted))
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
        if marker is not None:  # the chunk was not (wholly) written: do not say it was
            conn.send_packed_command([command("SREM", marker, member)])
            conn.read_response()
        raise failed[0]
    return count, False


def add_chunk(r: Redis, stream: str, xadds: bytes, count: int, marker: str | None,
              member: str, ttl_ms: int, trim: Trim = NO_TRIM) -> tuple[int, bool] | None:
    """Add ``count`` entries (``xadds``: that many ``XADD stream * ...`` in RESP) to
    ``stream`` and, when ``marker`` is given, ``member`` to the set ``marker`` (in the
    stream's slot), atomically, unless ``member`` is already there; then trim.

    Returns (entries added, whether the marker said the chunk was already written), or
    ``None`` when this path cannot do it — on a cluster, the slot moved or the node did not
    answer; anywhere, the WATCH was lost ``WATCH_ROUNDS`` times, or the ACL user may not run
    ``TRANSACTION_COMMANDS`` (logged once per process) — and the caller must run
    the script (``lua/sink_chunk.lua``), which checks the same marker. On a single node,
    connection errors are retried through the client's ``Retry``: with a marker that is
    safe, as the retry first looks for the marker.
    """
    cluster = isinstance(r, RedisCluster)
    node = node_for(r, stream)
    if node is None:
        return None

    def attempt(conn: Any) -> tuple[int, bool] | None:
        for _ in range(WATCH_ROUNDS):
            done = _once(conn, stream, xadds, count, marker, member, ttl_ms, trim)
            if done is not None:
                return done
        return None

    try:
        if cluster:  # not retried on the node: the cluster client's script follows the slot
            try:
                return on_connection(node, attempt, retried=False)
            except (_Redirected, redis.ConnectionError, redis.TimeoutError):
                return None
        return on_connection(node, attempt)
    except _NotPermitted as exc:
        _warn_noperm(exc)
        return None


def _warn_noperm(exc: BaseException) -> None:
    global _warned_noperm
    if not _warned_noperm:
        _warned_noperm = True
        log.warning(
            "spark-eventbus sink: the Redis ACL user may not run a transaction (%s); chunks "
            "are written by the Lua script instead, which costs Redis more per entry. Add %s "
            "to the user's rule (`eventbus acl-rule --role sink` prints it).", exc,
            " ".join(f"+{c}" for c in TRANSACTION_COMMANDS))


def _script_trim(trim: Trim) -> list[str]:
    """``lua/sink_chunk.lua``'s trimming arguments."""
    return [str(trim.max_len) if trim.max_len is not None else "", trim.min_id or "",
            str(trim.min_age_ms) if trim.min_age_ms is not None else "",
            "~" if trim.approximate else "="]


def write_chunk(spec: ConnectionSpec, stream: str, xadds: bytes, count: int,
                marker: str, member: str | None, ttl_ms: int, trim: Trim,
                script_args: Callable[[], list[Any]]) -> tuple[int, int]:
    """One sink chunk (executor side): :func:`add_chunk`, or where it cannot (a cluster slot
    on the move, lost WATCHes, an ACL refusal) ``lua/sink_chunk.lua`` with the same marker
    (``script_args()``: the chunk's entries as the script takes them). ``member`` ``None``:
    no idempotency marker. Returns (entries added, chunks found already written); redis-py
    errors come out as :class:`~spark_eventbus.errors.EventBusError`."""
    r = client(spec)
    with redis_errors(f"writing {count} entries to stream {stream!r}", spec):
        done = add_chunk(r, stream, xadds, count, marker if member is not None else None,
                         member or "", ttl_ms, trim)
        if done is None:
            added, skipped = run_script(
                r, "sink_chunk", [stream, marker],
                [member or "", ttl_ms, *_script_trim(trim), *script_args()])
        else:
            added, skipped = done
    return int(added), int(skipped)
