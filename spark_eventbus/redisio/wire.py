"""The one wire: every "many commands in one round trip" of the package goes through here, on
redis-py's public connection API (``ConnectionPool.get_connection``/``release``,
``Connection.send_packed_command``/``read_response``/``disconnect``, the connection's
``Retry``) and hiredis's public ``pack_command``. Imports nothing of the package but
:mod:`.base`, so that every module of the layer may use it.

* :func:`on_connection` — one pool connection of a node, a job run on it through the
  connection's ``Retry``, the connection dropped on any failure (replies may be left unread,
  a ``WATCH`` may be set) and given back.
* :func:`roundtrip` — commands already encoded as RESP sent at once, one reply read for each,
  error replies in place (or the first raised).
* :func:`pipeline` — commands as argument tuples: the driver's per-stream work over thousands
  of streams, replies as the server sent them (no redis-py reply callbacks).

Replies are read with ``read_response``, so RESP3 push messages are redis-py's to handle (it
reads them aside, or hands them to their handler), never taken for a reply. Measured before
this path replaced one reading hiredis's reader through redis-py's private parser: 10,000
``XINFO GROUPS`` replies in one round trip cost the same within the machine's noise (40-60 ms
either way); ``make bench``'s many-streams part is the figure that counts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError, ReadOnlyError

from .base import Redis, ResponseError

T = TypeVar("T")

_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:  # hiredis packs a command in C; redis[hiredis] is a dependency, so this is the path taken
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - only without hiredis installed
    _hiredis_pack = None

# Which packer :func:`pack` uses ("hiredis" on every supported install; a test pins it).
PACKER = "hiredis" if _hiredis_pack is not None else "redis-py"


def pack(commands: Sequence[Sequence[Any]]) -> list[bytes]:
    """``commands`` (argument tuples) as RESP, ready for ``send_packed_command``."""
    if _hiredis_pack is not None:
        return [b"".join(_hiredis_pack(tuple(c)) for c in commands)]
    # pragma: no cover - without hiredis: redis-py's packer (a Connection never connected)
    return list(redis.connection.Connection().pack_commands(commands))


def read_replies(conn: Any, n: int) -> list[Any]:
    """``n`` replies from ``conn``, an error reply as the exception object in its place
    (redis-py raises it after reading it whole, so later replies stay aligned)."""
    out: list[Any] = []
    for _ in range(n):
        try:
            out.append(conn.read_response())
        except ResponseError as exc:
            out.append(exc)
    return out


def as_map(reply: Any) -> dict[Any, Any]:
    """A RESP3 map reply as it comes (a dict), or a RESP2 flat list of pairs as one."""
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[0::2], reply[1::2], strict=True))


def raise_first(replies: list[Any]) -> list[Any]:
    """``replies`` of :func:`pipeline`, the first error among them raised."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def raise_unless_missing(replies: list[Any]) -> None:
    """The first error among ``replies`` raised, unless it says the key is missing or not a
    stream (:func:`is_no_such_key`): that reply stays in place for the caller."""
    for reply in replies:
        if isinstance(reply, Exception) and not is_no_such_key(reply):
            raise reply


def is_no_such_key(reply: Any, *, or_wrong_type: bool = True) -> bool:
    """An error reply (or raised error) of ``XINFO`` on a missing key (``no such key``) or,
    with ``or_wrong_type``, on a key that is not a stream (``WRONGTYPE``): the one place this
    reply is matched as text."""
    prefixes = ("no such key", "WRONGTYPE") if or_wrong_type else ("no such key",)
    return isinstance(reply, ResponseError) and str(reply).startswith(prefixes)


def node_for(r: Redis, key: str) -> redis.Redis | None:
    """The single-node client that serves ``key``: ``r`` itself, or on a cluster the client of
    the node the slot map names (``None`` when it names none)."""
    if isinstance(r, RedisCluster):
        node = r.get_node_from_key(key)
        return None if node is None else node.redis_connection
    return r


def on_connection(node: redis.Redis, job: Callable[[Any], T], *, retried: bool = True) -> T:
    """``job(conn)`` on one pool connection of ``node``; through the connection's ``Retry``
    when ``retried`` (the job must then be safe to run twice: a retry runs it again on a new
    connection). The connection is dropped on any failure and always given back."""
    pool = node.connection_pool
    conn = pool.get_connection()
    try:
        if retried:
            return conn.retry.call_with_retry(lambda: job(conn),
                                              lambda _error: conn.disconnect())
        return job(conn)
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


# Replies that say a command did not run: the commands are sent again (a READONLY reply is a
# primary demoted by a failover; with Sentinel the reconnect asks for the new primary).
NOT_RUN = (ConnectionError, ReadOnlyError)


def roundtrip(node: redis.Redis, packed: Sequence[bytes], n: int, *,
              resend_on: tuple[type[BaseException], ...] = (),
              raise_errors: bool = False) -> list[Any]:
    """``packed`` (RESP, ``n`` commands) sent at once on one connection of ``node``, ``n``
    replies read, through the client's ``Retry`` (so only commands safe to run twice). A
    reply of a type in ``resend_on`` (a command that did not run) sends them all again, as a
    broken connection does. Error replies stay in place, or with ``raise_errors`` the first
    is raised once all are read."""

    def attempt(conn: Any) -> list[Any]:
        conn.send_packed_command(list(packed))
        replies = read_replies(conn, n)
        for reply in replies:
            if resend_on and isinstance(reply, resend_on):
                conn.disconnect()
                raise reply
        return replies

    replies = on_connection(node, attempt)
    if raise_errors:
        for reply in replies:
            if isinstance(reply, ResponseError):
                raise reply
    return replies


def pipeline(r: Redis, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """``commands`` in one round trip (per node), their replies as the server sent them: no
    redis-py reply callbacks; an error reply is an exception object in the list, not raised.

    On a single node: packed by hiredis, sent at once, read with :func:`read_replies`
    (redis-py's pipeline spends several times the round trip on its per-command packing and
    reply handling when there are thousands, one per stream of a query over many streams).
    Through the client's ``Retry`` (its window: ``failoverTimeoutMs``): a broken connection,
    or a ``READONLY`` reply, sends them all again, as redis-py's pipeline does, so every
    command sent this way must be safe to run twice. A cluster client: redis-py's pipeline,
    which routes each command to its node and follows redirections (one command: the cluster
    client's ``execute_command``, which also waits out ``CLUSTERDOWN``)."""
    if not commands:
        return []
    if isinstance(r, RedisCluster):
        if len(commands) == 1:  # the cluster client's own retries (CLUSTERDOWN: slot refresh)
            try:
                return [r.execute_command(*commands[0])]
            except ResponseError as exc:
                return [exc]
        pipe = r.pipeline(transaction=False)
        for c in commands:
            pipe.execute_command(*c)
        return list(pipe.execute(raise_on_error=False))
    packed = pack(commands)  # once: a retry sends the same bytes again
    return roundtrip(r, packed, len(commands), resend_on=NOT_RUN)
