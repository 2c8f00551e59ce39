"""The one wire: every "many commands in one round trip" of the package goes through here, on
redis-py's public connection API (``ConnectionPool.get_connection``/``release``,
``Connection.send_packed_command``/``read_response``/``disconnect``, the connection's
``Retry``) and hiredis's public ``pack_command``. Imports nothing of the package but
:mod:`.base`, :mod:`.retry` and the pure core's :mod:`..worker_gc`, so that every module of the
layer may use it.

* :func:`on_connection` — one pool connection of a node, a job run on it through the
  connection's ``Retry``, the connection dropped on any failure (replies may be left unread,
  a ``WATCH`` may be set) and given back.
* :func:`pipeline` — commands as argument tuples (or :class:`Packed`, already RESP): the
  driver's per-stream work over thousands of streams, replies as the server sent them (no
  redis-py reply callbacks).
* :func:`on_slot` — one slot's work on a cluster (the sink's transaction, a node's barriers),
  following the slot through a failover or a reshard.

Replies are read with ``read_response``, so RESP3 push messages are redis-py's to handle (it
reads them aside, or hands them to their handler), never taken for a reply: 10,000
``XINFO GROUPS`` replies in one round trip take 40-60 ms here; ``make bench``'s many-streams
part is the figure that counts. :func:`read_many`, for thousands of one-word replies (a sink
chunk's ``+QUEUED``), asks the connection's parser directly, which does the same.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import (
    AskError,
    ConnectionError,
    MovedError,
    RedisClusterException,
    SlotNotCoveredError,
    TimeoutError,
    TryAgainError,
)

from ..core.worker_gc import paused_gc
from .base import Redis, ResponseError
from .retry import CLUSTER_SEND_AGAIN, NOT_RUN, Window, WindowRetry, cluster_in_flux

log = logging.getLogger("spark_eventbus")

T = TypeVar("T")

_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:  # hiredis packs a command in C; an install from PyPI has it (redis[hiredis])
    from hiredis import pack_command as _hiredis_pack
except ImportError:
    # Kept, not dead: a cluster whose executors get the package as --py-files (pyfiles.py) has
    # redis-py there but cannot have hiredis, a C extension no zip carries; redis-py's packer
    # then (test_standalone's pipe job runs this way).
    _hiredis_pack = None

# Which packer :func:`pack` uses ("hiredis" on every install from PyPI; a test pins it).
PACKER = "hiredis" if _hiredis_pack is not None else "redis-py"


@dataclass(frozen=True)
class Packed:
    """A command already encoded as RESP (``data``) whose key (``key``, routed on a cluster) is
    its first: :func:`pipeline` sends it as it is, like the argument tuples it packs."""

    key: str
    data: bytes


def pack(commands: Sequence[Sequence[Any] | Packed]) -> list[bytes]:
    """``commands`` (argument tuples, or :class:`Packed`) as RESP, ready for
    ``send_packed_command``."""
    if _hiredis_pack is not None:
        hp = _hiredis_pack
        return [b"".join(c.data if isinstance(c, Packed) else hp(tuple(c)) for c in commands)]
    conn = redis.connection.Connection()
    return [c.data if isinstance(c, Packed) else b"".join(conn.pack_command(*c))
            for c in commands]


def packed(*args: Any) -> bytes:
    """One command (its arguments) as RESP."""
    return b"".join(pack([args]))


def read_replies(conn: Any, n: int) -> list[Any]:
    """``n`` replies from ``conn``, an error reply as the exception object in its place
    (redis-py raises it after reading it whole, so later replies stay aligned). The cyclic
    garbage collector is paused meanwhile (:func:`..worker_gc.paused_gc`: replies of thousands
    of entries would trigger it every 700 lists, to find nothing)."""
    with paused_gc():
        return read_many(conn, n)


def _read_each(conn: Any, n: int) -> list[Any]:
    """:func:`read_many` through ``conn.read_response``, one reply at a time."""
    out: list[Any] = []
    for _ in range(n):
        try:
            out.append(conn.read_response())
        except ResponseError as exc:
            out.append(exc)
    return out


def read_many(conn: Any, n: int) -> list[Any]:
    """``n`` replies from ``conn`` as :func:`read_replies` gives them (an error reply as the
    exception object in its place), without pausing the garbage collector: for many small
    replies (a sink chunk's ``+QUEUED`` for each of its thousands of ``XADD``\\ s; within
    :func:`read_replies`, a pipelined round over thousands of streams). redis-py's
    ``Connection.read_response`` costs about a microsecond per reply around its parser (its
    host string for an error message that is never made, the health-check clock): half of a
    sink task's CPU went there. Here each reply comes from the connection's parser
    (``Connection._parser.read_response``, called as ``Connection.read_response`` calls it in
    redis-py 6.0 to 8.1, hiredis or not; RESP3 push messages are still the parser's to
    handle), with the connection's own handling of a failure kept: the connection is dropped
    and a timeout or socket error raised as redis-py's ``TimeoutError``/``ConnectionError``,
    which its ``Retry`` knows. Read reply by reply with ``Connection.read_response`` instead
    (:func:`_read_each`): a connection class that reads otherwise (client-side caching's
    proxy, Sentinel's connection) and any redis-py after 8, whose ``read_response`` nobody has
    compared with this yet."""
    parser = getattr(conn, "_parser", None)
    if (parser is None or _CONNECTION_READ is None or redis.VERSION[0] > _CHECKED_UP_TO
            or getattr(type(conn), "read_response", None) is not _CONNECTION_READ):
        return _read_each(conn, n)
    read = parser.read_response
    out: list[Any] = []
    try:
        for _ in range(n):
            out.append(read())
    except socket.timeout:  # noqa: UP041 - TimeoutError is redis-py's in this module
        conn.disconnect()
        raise TimeoutError(f"Timeout reading from {_where(conn)}") from None
    except OSError as exc:
        conn.disconnect()
        raise ConnectionError(f"Error while reading from {_where(conn)}: {exc.args}") from exc
    except BaseException:
        conn.disconnect()
        raise
    interval = getattr(conn, "health_check_interval", 0)
    if interval:
        conn.next_health_check = time.monotonic() + interval
    return out


# The redis-py method :func:`read_many` stands in for (None: a redis-py without it), and the
# last major version whose method was compared with it.
_CONNECTION_READ = getattr(getattr(redis.connection, "AbstractConnection", None),
                           "read_response", None)
_CHECKED_UP_TO = 8


def _where(conn: Any) -> str:
    """Where ``conn`` reads from, as redis-py's own errors say it (a Unix socket's path too)."""
    host_error = getattr(conn, "_host_error", None)
    if callable(host_error):
        return str(host_error())
    return f"{getattr(conn, 'host', '?')}:{getattr(conn, 'port', '?')}"


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


def node_for(r: Redis, key: str) -> redis.Redis:
    """The single-node client that serves ``key``: ``r`` itself, or on a cluster the client of
    the node the slot map names (made if the map names a node new to it). A slot the map gives
    no node raises ``SlotNotCoveredError``."""
    if isinstance(r, RedisCluster):
        node = r.get_node_from_key(key)
        return node.redis_connection or r.get_redis_connection(node)
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


def pipeline(r: Redis, commands: Sequence[Sequence[Any] | Packed]) -> list[Any]:
    """``commands`` in one round trip per node, their replies as the server sent them: no
    redis-py reply callbacks; an error reply is an exception object in the list, not raised.

    Packed by hiredis, sent at once, read with :func:`read_replies` (redis-py's pipeline spends
    several times the round trip on its per-command packing and reply handling when there are
    thousands, one per stream of a query over many streams). Within the client's window
    (``failoverTimeoutMs``): a broken connection, or a ``READONLY`` reply, sends them again, so
    every command sent this way must be safe to run twice. On a cluster, :func:`_per_node`:
    the same per node, following redirections."""
    if not commands:
        return []
    if isinstance(r, RedisCluster):
        return _per_node(r, commands)
    packed = pack(commands)  # once: a retry sends the same bytes again

    def attempt(conn: Any) -> list[Any]:
        conn.send_packed_command(packed)
        replies = read_replies(conn, len(commands))
        if any(isinstance(reply, NOT_RUN) for reply in replies):
            conn.disconnect()  # on_connection's Retry sends them all again
            raise next(reply for reply in replies if isinstance(reply, NOT_RUN))
        return replies

    return on_connection(r, attempt)


def command_key(command: Sequence[Any] | Packed) -> Any:
    """The key a command of this package routes by on a cluster (its first key), or ``None``
    for a command without one."""
    if isinstance(command, Packed):
        return command.key
    name = str(command[0]).upper() if not isinstance(command[0], bytes) else \
        command[0].decode().upper()
    if name in ("EVALSHA", "EVAL", "FCALL"):
        return command[3] if int(command[2]) > 0 else None
    if name in ("XREADGROUP", "XREAD"):
        words = [str(c).upper() if isinstance(c, str) else c for c in command]
        return command[words.index("STREAMS") + 1]
    if name in ("XINFO", "XGROUP", "OBJECT", "MEMORY"):
        return command[2]
    return command[1] if len(command) > 1 else None


# MOVED/ASK redirections followed at once, without backoff, per call (redis-py's request TTL
# is 16 hops); past that they wait like the rest.
HOPS = 16


# readFrom=replica on a cluster: the slot map is read again when older than this. A replica
# promoted by a failover serves reads without a redirection, so a map read before it would go
# on sending reads to the new master.
REPLICA_MAP_SECONDS = 5.0
# ... and, at the moment a read finds a slot the map names no replica for, when older than this
# (doubled at each such read again that still finds none, up to REPLICA_MAP_SECONDS): nodes
# learn of a replica by gossip (CLUSTER SLOTS lists one only once the node answering knows it
# has synced, measured at up to ~3.5 s after a cluster was made), so a map read just after a
# replica joined may lack it for a moment.
REPLICA_MAP_LACKING_SECONDS = 1.0


def fresh_replica_map(r: Any) -> None:
    """A replica-reading cluster client (:func:`.client.client`, option ``readFrom``): its slot
    map read again when older than :data:`REPLICA_MAP_SECONDS`."""
    if not getattr(r, "reads_replicas", False):
        return
    now = time.monotonic()
    if now - r.map_read_at > REPLICA_MAP_SECONDS:
        r.map_read_at = now
        read_slot_map(r)


def replica_or_master(r: Any, slot: int) -> ClusterNode:
    """readFrom=replica: the first replica the slot map names for ``slot``, the same one for
    every call. Where it names none, the map is read again first if it is older than
    :data:`REPLICA_MAP_LACKING_SECONDS` (that wait doubling while it still names none); then
    the slot's master, said once per master in a warning."""
    serving = _serving(r, slot)
    if len(serving) > 1:
        return serving[1]
    now = time.monotonic()
    if now - r.map_read_at > r.lacking_wait:
        r.map_read_at = now
        read_slot_map(r)
        serving = _serving(r, slot)
        if len(serving) > 1:
            r.lacking_wait = REPLICA_MAP_LACKING_SECONDS
            return serving[1]
        r.lacking_wait = min(REPLICA_MAP_SECONDS, r.lacking_wait * 2)
    master = serving[0]
    if master.name not in r.read_masters:
        r.read_masters.add(master.name)
        log.warning("spark-eventbus: readFrom=replica: the cluster names no replica of master "
                    "%s (none, or one it does not know to have synced yet); the streams it "
                    "serves are read from it until it does.", master.name)
    return master


def _serving(r: RedisCluster, slot: int) -> Sequence[ClusterNode]:
    """The nodes of ``slot`` in the slot map, its master first."""
    serving = r.nodes_manager.slots_cache.get(slot)
    if not serving:
        raise SlotNotCoveredError(f'Slot "{slot}" is not covered by the cluster.')
    return serving


def _per_node(r: RedisCluster, commands: Sequence[Sequence[Any] | Packed]) -> list[Any]:
    """:func:`pipeline` on a cluster: the commands grouped by the node that serves each key's
    slot, one packed round trip per node. A reply that says the slot moved or is moving, or no
    master serves it (a failover), and the commands of a node that did not answer, are sent
    again — ``ASK`` at once to the node it names (after ``ASKING``), the rest after the
    client's backoff with the slot map read again — until its window (``failoverTimeoutMs``)
    has passed; then the last error reply stays in place, or a connection error is raised."""
    clock = Window(cluster_window(r))
    fresh_replica_map(r)
    replies: list[Any] = [None] * len(commands)
    todo = list(range(len(commands)))
    ask: dict[int, Any] = {}  # command index -> the node an ASK named
    hops = 0
    while todo:
        again: list[int] = []
        failed: BaseException | None = None
        moved = False
        try:
            groups = _by_node(r, commands, todo, ask)
        except SlotNotCoveredError:  # no master serves a slot now (a failover in progress)
            if not clock.wait():
                raise
            read_slot_map(r)
            continue
        for node, indexes in groups.values():
            sends: list[Sequence[Any] | Packed] = []
            for i in indexes:
                if i in ask:
                    sends.append(("ASKING",))
                sends.append(commands[i])
            try:
                got = on_connection(r.get_redis_connection(node), _sender(sends),
                                    retried=False)
            except (ConnectionError, TimeoutError) as exc:
                if not clock.retry.retries(exc):  # refused credentials that do not rotate
                    raise
                failed = exc
                again += indexes
                continue
            got_iter = iter(got)
            for i in indexes:
                if ask.pop(i, None) is not None:
                    next(got_iter)  # ASKING's OK
                reply = next(got_iter)
                replies[i] = reply
                if isinstance(reply, CLUSTER_SEND_AGAIN):
                    again.append(i)
                    if isinstance(reply, MovedError):
                        moved = True  # the slot map is read again, and they go at once
                    elif isinstance(reply, AskError):  # a node the map may not list yet
                        ask[i] = r.get_node(host=reply.host, port=reply.port) or ClusterNode(
                            reply.host, reply.port)
                    elif not isinstance(reply, TryAgainError):
                        failed = failed or reply  # CLUSTERDOWN, READONLY: wait, read the map
        todo = sorted(again)
        if not todo:
            break
        redirected_only = failed is None and all(
            i in ask or isinstance(replies[i], MovedError) for i in todo)
        if redirected_only and (hops := hops + 1) <= HOPS:
            if moved:
                read_slot_map(r)
            continue  # MOVED/ASK: follow them now, whatever the window (as redis-py does)
        waited = clock.wait()
        if moved or failed is not None:
            read_slot_map(r)  # after the backoff: a promotion may show by now
        if not waited:
            if failed is not None and isinstance(failed, (ConnectionError, TimeoutError)):
                raise failed
            break  # the error replies stay in place
    return replies


def _sender(commands: Sequence[Sequence[Any] | Packed]) -> Callable[[Any], list[Any]]:
    def send(conn: Any) -> list[Any]:
        conn.send_packed_command(pack(commands))
        return read_replies(conn, len(commands))
    return send


def _by_node(r: RedisCluster, commands: Sequence[Sequence[Any] | Packed], todo: list[int],
             ask: dict[int, Any]) -> dict[str, tuple[Any, list[int]]]:
    """``todo``'s command indexes grouped by node: the node an ``ASK`` named, else the one the
    slot map names for the command's key (any node for a command without one)."""
    groups: dict[str, tuple[Any, list[int]]] = {}  # by name: redis-py 5's nodes do not hash
    replica = getattr(r, "reads_replicas", False)  # readFrom=replica: a client that only reads
    for i in todo:
        node = ask.get(i)
        if node is None:
            ask.pop(i, None)
            key = command_key(commands[i])
            if key is None:
                node = r.get_default_node()
            elif replica:
                node = replica_or_master(r, r.keyslot(key))
            else:
                node = r.get_node_from_key(key)
        groups.setdefault(node.name, (node, []))[1].append(i)
    return groups


def on_slot(r: RedisCluster, key: str, job: Callable[[redis.Redis], T]) -> T:
    """``job`` on the client of the node serving ``key``'s slot, through a cluster changing
    hands: a slot that moved (``MOVED``) is followed at once, the slot map read again (up to
    :data:`HOPS` times); a slot on the move (``ASK``, ``TRYAGAIN``), no master for it, a node
    that does not answer (:func:`.retry.cluster_in_flux`, and the client's rule for
    connection errors) is waited out with the client's backoff within its window
    (``failoverTimeoutMs``), the map read again. ``job`` may then run again: it must be safe
    to run twice. What a single node's ``Retry`` does for its client, for one slot's work."""
    clock = Window(cluster_window(r))
    hops = 0
    while True:
        try:
            return job(node_for(r, key))
        except (redis.RedisError, RedisClusterException) as exc:
            if isinstance(exc, MovedError) and (hops := hops + 1) <= HOPS:
                read_slot_map(r)
                continue
            waits = clock.retry.retries(exc) if isinstance(exc, (ConnectionError, TimeoutError)) \
                else cluster_in_flux(exc)
            if not waits or not clock.wait():
                raise
            read_slot_map(r)


def cluster_window(r: RedisCluster) -> WindowRetry:
    """The time window (``failoverTimeoutMs``) of a cluster client made by
    :func:`.client.client`; none for another."""
    window = getattr(r, "window", None)
    return window if isinstance(window, WindowRetry) else WindowRetry(0)


def read_slot_map(r: RedisCluster) -> None:
    """The cluster's slot map read again (a promoted replica, a moved slot); a failure to read
    it is only logged: the next try meets the same errors and waits again."""
    try:
        r.nodes_manager.initialize()
    except (redis.RedisError, RedisClusterException) as exc:
        log.debug("spark-eventbus: the cluster's slot map could not be read (%s)", exc)
