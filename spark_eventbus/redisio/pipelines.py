"""One round trip of many commands, replies as the server sent them (:func:`pipeline`): the
driver's per-stream work over thousands of streams. Imports nothing of this package but
:mod:`.base`, so that every module of it may use it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError, ReadOnlyError

from .base import Redis, ResponseError


def pipeline(r: Redis, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """``commands`` in one round trip (per node), their replies as the server sent them: no
    redis-py reply callbacks; an error reply is an exception object in the list, not raised.

    On a single node they are sent lean: packed by hiredis in C, sent at once, replies read
    straight from the connection's hiredis reader (redis-py's pipeline spends several times the
    round trip on its per-command packing and reply handling when there are thousands, one per
    stream of a query over many streams). Through the client's ``Retry`` (its window:
    ``failoverTimeoutMs``): a broken connection, or a ``READONLY`` reply (a primary demoted by a
    failover; with Sentinel the reconnect asks for the new primary), sends them all again, as
    redis-py's pipeline does, so every command sent this way must be safe to run twice. A
    cluster client, or no hiredis: redis-py's pipeline."""
    if not commands:
        return []
    if isinstance(r, RedisCluster):
        pipe = r.pipeline(transaction=False)
        for c in commands:
            pipe.execute_command(*c)
        return list(pipe.execute(raise_on_error=False))
    lean = _lean_reader(r)
    pool = r.connection_pool
    conn = pool.get_connection()
    if lean:
        import hiredis

        packed = b"".join(hiredis.pack_command(tuple(c)) for c in commands)

    def attempt() -> list[Any]:
        if lean:
            conn.send_packed_command([packed])
            replies = _read_replies(conn, len(commands))
        else:
            conn.send_packed_command(conn.pack_commands(commands))
            replies = _read_replies(conn, len(commands))
        for reply in replies:  # the command did not run: retried (LOADING too)
            if isinstance(reply, (ConnectionError, ReadOnlyError)):
                conn.disconnect()
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
        from redis._parsers.hiredis import NOT_ENOUGH_DATA, _HiredisParser  # noqa: F401
        from redis.utils import HIREDIS_AVAILABLE
    except ImportError:
        return False
    parser = r.connection_pool.connection_kwargs.get("parser_class")
    return bool(HIREDIS_AVAILABLE) and parser in (None, _HiredisParser)


def _read_replies(conn: Any, n: int) -> list[Any]:
    """``n`` replies, error replies in place: from the hiredis reader directly, else one by
    one through redis-py (which raises an error reply after reading it)."""
    try:
        from redis._parsers.hiredis import NOT_ENOUGH_DATA, _HiredisParser
    except ImportError:
        _HiredisParser = None  # type: ignore[assignment,misc]
    parser = conn._parser
    if _HiredisParser is None or not isinstance(parser, _HiredisParser) \
            or parser._reader is None:
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
