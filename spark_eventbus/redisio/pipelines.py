"""One round trip of many commands, replies as the server sent them (:func:`pipeline`): the
driver's per-stream work over thousands of streams. Imports nothing of this package but
:mod:`.base`, so that every module of it may use it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError

from .base import Redis, ResponseError

# Below this many commands redis-py's own pipeline is as good (:func:`pipeline`).
LEAN_PIPELINE_MIN = 64


def pipeline(r: Redis, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """``commands`` in one round trip (per node), their replies as the server sent them: no
    redis-py reply callbacks; an error reply is an exception object in the list, not raised.

    Thousands of commands at once (one per stream of a query over many streams) are sent
    lean on a single node: packed by hiredis in C, sent at once, replies read straight from
    the connection's hiredis reader. redis-py's pipeline spends several times the round trip
    on its per-command packing and reply handling there. Through the client's ``Retry``, as
    redis-py's pipeline does (a retry sends them all again). A cluster client, a few commands,
    or no hiredis: redis-py's pipeline."""
    if not commands:
        return []
    if isinstance(r, RedisCluster) or len(commands) < LEAN_PIPELINE_MIN \
            or not _lean_reader(r):
        pipe = r.pipeline(transaction=False)
        for c in commands:
            pipe.execute_command(*c)
        return list(pipe.execute(raise_on_error=False))
    import hiredis

    packed = b"".join(hiredis.pack_command(tuple(c)) for c in commands)
    pool = r.connection_pool
    conn = pool.get_connection()

    def attempt() -> list[Any]:
        conn.send_packed_command([packed])
        replies = _read_replies(conn, len(commands))
        for reply in replies:  # e.g. LOADING: retried as redis-py would
            if isinstance(reply, ConnectionError):
                raise reply
        return replies

    try:
        return list(conn.retry.call_with_retry(attempt, lambda _err: conn.disconnect()))
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


def _lean_reader(r: redis.Redis) -> bool:
    """True when this client's connections parse with hiredis (redis-py's _HiredisParser)."""
    try:
        from redis._parsers.hiredis import _HiredisParser
        from redis.utils import HIREDIS_AVAILABLE
    except ImportError:
        return False
    parser = r.connection_pool.connection_kwargs.get("parser_class")
    return bool(HIREDIS_AVAILABLE) and parser in (None, _HiredisParser)


def _read_replies(conn: Any, n: int) -> list[Any]:
    from redis._parsers.hiredis import NOT_ENOUGH_DATA, _HiredisParser

    parser = conn._parser
    if not isinstance(parser, _HiredisParser) or parser._reader is None:
        out: list[Any] = []
        for _ in range(n):
            try:
                out.append(conn.read_response())
            except ResponseError as exc:
                out.append(exc)
        return out
    reader = parser._reader
    push = getattr(parser, "_hiredis_PushNotificationType", None)
    out = []
    while len(out) < n:
        reply = reader.gets()
        if reply is NOT_ENOUGH_DATA:
            parser.read_from_socket()
        elif push is None or not isinstance(reply, push):
            out.append(reply)
    return out


