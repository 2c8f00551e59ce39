"""The capability probe (:class:`spark_eventbus.capabilities.Capabilities`): ``HELLO`` (no
arguments: the protocol stays as it is) for the family and version, and ``SCRIPT LOAD`` of a
one-line script for Lua. Both are in every role's ACL rule that runs scripts; nothing else is
needed (no ``INFO``, no ``COMMAND INFO``)."""

from __future__ import annotations

from typing import Any

from redis.cluster import RedisCluster

from ..capabilities import Capabilities, parse_version, require_scripting
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
    """:func:`server_capabilities` of this process's client for ``spec``, errors translated;
    once per spec per process (every part that checks at start shares the one round trip). A
    probe that failed is not kept: the next call probes again."""
    from .boundary import redis_errors
    from .client import client

    for key in ((spec, True), (spec, scripts)):  # a probe with scripts answers both
        if key in _probed:
            return _probed[key]
    with redis_errors("checking the server's capabilities", spec):
        caps = server_capabilities(client(spec), scripts)
    _probed[(spec, scripts)] = caps
    return caps


def check_scripting(spec: ConnectionSpec, what: str, why: str) -> Capabilities:
    """At start, before ``what`` (a part that runs Lua scripts: ``why``) writes anything: refuse
    a server without scripting (:func:`..capabilities.require_scripting`). Returns the
    capabilities."""
    caps = capabilities_of(spec)
    require_scripting(caps, what, spec.display, why)
    return caps


_probed: dict[tuple[ConnectionSpec, bool], Capabilities] = {}
