"""Least-privilege ACL rules, one per role: the commands and key patterns each part of the
connector needs (tested: a user with exactly the rule runs the role end to end). Print one with
``eventbus acl-rule --role streaming-reader --stream orders``; docs/security.md lists them.

Commands run inside the connector's Lua scripts are checked against the caller's ACL too, so
they are listed. Key patterns cover the streams and the connector's own keys for them, which all
start with ``{<tag>}:eventbus:`` (see :mod:`spark_eventbus.core.keys`).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..core.keys import ALIVE, PREFIX, slot_tag

# Every client: the RESP3 handshake, its name, health checks; scripts load on NOSCRIPT.
_CONNECT = ("hello", "client|setname", "ping")
# redis-py's pipelined scripts ask SCRIPT EXISTS before EVALSHA (the reader's acks).
_SCRIPTS = ("evalsha", "script|load", "script|exists")
# waitReplicas: the barrier after the writes the guarantees rest on, and the check at start
# (INFO replication: replicas online; redisio/durability.py). Harmless without the option.
# waitAof also needs +waitaof, which a server without WAITAOF (Redis < 7.2) refuses in
# ACL SETUSER: added by ``wait_aof=True``.
_WAIT = ("wait", "info")
_WAIT_AOF = ("waitaof",)
_WRITERS = {"streaming-reader", "sink", "acking-writer", "cli"}
# redis-py's cluster client reads the topology and the command table at start; reading from
# replicas (readFrom=replica) it puts each connection in READONLY mode.
CLUSTER = ("cluster|slots", "cluster|shards", "command", "readonly")

ROLES: dict[str, tuple[str, ...]] = {
    # spark.readStream: groups, claims (claim.lua, XREADGROUP, claim_record.lua) and plans
    # (plan_load.lua), news of many streams at once (XREAD COUNT 1), reclaim (reclaim.lua), acks
    # (XACK; XPENDING for IDs not kept), the consumer lease (lease.lua), executors' XRANGE
    # replay and loss records (loss_record.lua, XPENDING + XACK of what is gone;
    # loss_settle.lua); probes (XINFO GROUPS with XLEN, XINFO STREAM); trimAcked (trim.lua:
    # XTRIM MINID).
    "streaming-reader": (*_CONNECT, *_SCRIPTS, "type", "xinfo|stream", "xinfo|groups",
                         "xgroup|create", "xreadgroup", "xread", "xautoclaim", "xpending",
                         "xack", "xrange", "xrevrange", "get", "set", "del", "pttl", "hget",
                         "hexists", "hgetall", "hset", "hdel", "pexpire", "scan", "xtrim", "xlen",
                         *_WAIT),
    # spark.read: XRANGE of a range, nothing written; with readFrom=replica a task asks its
    # replica for the stream's last ID first (XINFO STREAM).
    "batch-reader": (*_CONNECT, "type", "xrange", "xrevrange", "xinfo|stream"),
    # spark.readStream without a group: each stream's end (XINFO STREAM), the entries where a
    # batch ends before it (XRANGE), streamPattern's SCAN; nothing written.
    "reader-without-group": (*_CONNECT, "xinfo|stream", "xrange", "scan"),
    # df.write / writeStream: a chunk as WATCH + MULTI/EXEC (XADD, trimming, markers, the
    # seal's GET); the marker registry; the seals (SET) raised before markers are deleted. No
    # scripts.
    "sink": (*_CONNECT, "type", "xadd", "xtrim", "time", "sismember", "sadd", "srem",
             "pexpire", "watch", "multi", "exec", "discard", "hset", "hgetall", "hdel", "unlink",
             "get", "set", *_WAIT, "smismember"),
    # foreachBatch(AckingBatchWriter): XACK; dead letters moved in the marked steps of
    # redisio/deadletter.py (XPENDING, XRANGE, dead_letter_add.lua, XACK).
    "acking-writer": (*_CONNECT, *_SCRIPTS, "xack", "xpending", "xrange", "xadd", "sismember",
                      "sadd", "srem", "pexpire", *_WAIT, "smismember"),
    # The writers' and the CLI's waitReplicas/waitAof barriers: WAIT, INFO, SMISMEMBER (a
    # marker set's members checked on the node the barrier reached).
    # eventbus status (with the loss records), dlq list/show/replay, group create/seek (checks
    # the consumer leases), group accept-loss (loss_accept.lua), consumer forget (XPENDING +
    # XCLAIM, then XGROUP DELCONSUMER), stream trim (trim.lua: XTRIM MINID)
    "cli": (*_CONNECT, *_SCRIPTS, "type", "xinfo|stream", "xinfo|groups", "xinfo|consumers",
            "xlen", "xrange", "xrevrange", "xadd", "xdel", "sismember", "sadd", "srem",
            "pexpire", "xgroup|create", "xgroup|setid", "xgroup|delconsumer", "xpending",
            "xclaim", "get", "pttl", "hgetall", "hset", "scan", "xtrim", *_WAIT, "smismember"),
}
# Roles that also touch the connector's keys of each stream ({<tag>}:eventbus:*).
_OWN_KEYS = {"streaming-reader", "sink", "acking-writer", "cli"}


def key_patterns(role: str, streams: Iterable[str], dead_letter_stream: str | None = None
                 ) -> list[str]:
    """The ``~pattern`` key rules of ``role`` for ``streams`` (and the dead-letter stream)."""
    keys = list(streams) + ([dead_letter_stream] if dead_letter_stream else [])
    patterns = [_glob_escape(k) for k in keys]
    if role in _OWN_KEYS:
        patterns += sorted({f"{{{_glob_escape(slot_tag(k))}}}:{PREFIX}:*" for k in keys})
    if role == "sink":
        patterns.append(f"{{{PREFIX}:*}}:{PREFIX}:sink-registry")
    if role in ("streaming-reader", "cli"):  # the consumer leases' heartbeat
        patterns.append(f"{{{PREFIX}:*}}:{PREFIX}:{ALIVE}")
    return patterns


def rule(role: str, streams: Iterable[str], dead_letter_stream: str | None = None,
         cluster: bool = False, wait_aof: bool = False, xackdel: bool = False,
         xdelex: bool = False) -> str:
    """The ACL SETUSER rule (after the user name and password) of ``role``; ``wait_aof`` adds
    what option ``waitAof`` needs (Redis >= 7.2, Valkey), ``xackdel`` what ``deleteAtAck``
    deletes with, ``xdelex`` what ``dlq replay`` deletes pending references with
    (both Redis >= 8.2; an older server refuses the names)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: one of {', '.join(ROLES)}")
    commands = ROLES[role] + (CLUSTER if cluster else ()) \
        + (_WAIT_AOF if wait_aof and role in _WRITERS else ()) \
        + (("xackdel",) if xackdel and role == "streaming-reader" else ()) \
        + (("xdelex",) if xdelex and role == "cli" else ())
    if role == "streaming-reader" and dead_letter_stream:  # maxDeliveries: the dead-letter move
        commands += ("xadd", "sismember", "sadd", "srem", "smismember")
    keys = key_patterns(role, streams, dead_letter_stream)
    return " ".join(["resetkeys", *(f"~{k}" for k in keys), "resetchannels", "-@all",
                     *(f"+{c}" for c in commands)])


def _glob_escape(key: str) -> str:
    """A key as an ACL glob pattern that matches only itself."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in key)
