"""The capability probe (:class:`spark_eventbus.capabilities.Capabilities`): ``HELLO`` (no
arguments: the protocol stays as it is) for the family and version, and ``SCRIPT LOAD`` of a
one-line script for Lua. Both are in every role's ACL rule that runs scripts; nothing else is
needed (no ``INFO``, no ``COMMAND INFO``)."""

from __future__ import annotations

from typing import Any

from redis.cluster import RedisCluster

from ..capabilities import Capabilities, parse_version
from ..connection import ConnectionSpec
from .base import Redis, ResponseError
from .streams import text

_PROBE = "return 1"


def _hello(reply: Any) -> dict[str, Any]:
    if isinstance(reply, dict):
        return {text(k): v for k, v in reply.items()}
    return {text(reply[i]): reply[i + 1] for i in range(0, len(reply) - 1, 2)}


def server_capabilities(r: Redis, scripts: bool = True) -> Capabilities:
    """Probe the server of ``r`` (on a cluster, every node: the oldest version counts).
    ``scripts``: also probe Lua (callers that run scripts; their ACL rule allows
    ``SCRIPT LOAD``). Callers translate errors (:func:`.boundary.redis_errors`)."""
    if isinstance(r, RedisCluster):  # every primary and replica: the oldest one decides
        replies = [r.get_redis_connection(node).execute_command("HELLO")
                   for node in r.get_nodes()]
    else:
        replies = [r.execute_command("HELLO")]
    hellos = [_hello(x) for x in replies]
    oldest = min(hellos, key=lambda h: parse_version(text(h.get("version", "0"))))
    family = text(oldest.get("server", "redis")).lower()
    version = parse_version(text(oldest.get("version", "0")))
    has_lua: bool | None = None
    if scripts:
        try:
            r.script_load(_PROBE)
            has_lua = True
        except ResponseError as exc:
            msg = str(exc)
            has_lua = None if msg.startswith("NOPERM") else False
    return Capabilities(family, version, has_lua)


def capabilities_of(spec: ConnectionSpec, scripts: bool = True) -> Capabilities:
    """:func:`server_capabilities` of this process's client for ``spec``, errors translated."""
    from .boundary import redis_errors
    from .client import client

    with redis_errors("checking the server's capabilities", spec):
        return server_capabilities(client(spec), scripts)
