"""The capability probe (:class:`spark_eventbus.core.capabilities.Capabilities`), one round trip
per node: ``HELLO`` (no arguments: the protocol stays as it is) for the family and version
shown in messages, each of ``OPTIONAL_COMMANDS`` sent without arguments, and ``SCRIPT LOAD``
of a one-line script for Lua.

A command sent without its arguments is answered ``wrong number of arguments`` by a server
that has it and ``unknown command`` by one that does not (or that renamed it away), before
any ACL check and without touching a key: so a feature is known by its command on every
server and for every ACL user, with nothing else in the user's rule (no ``INFO``, no
``COMMAND INFO``)."""

from __future__ import annotations

from typing import Any

from redis.cluster import RedisCluster
from redis.exceptions import NoPermissionError

from ..core.capabilities import OPTIONAL_COMMANDS, Capabilities, parse_version, require_scripting
from ..core.connection import ConnectionSpec
from .base import Redis, ResponseError
from .streams import text
from .wire import pipeline

_PROBE = "return 1"


def _hello(reply: Any) -> dict[str, Any]:
    if isinstance(reply, dict):
        return {text(k): v for k, v in reply.items()}
    return {text(reply[i]): reply[i + 1] for i in range(0, len(reply) - 1, 2)}


def _has(reply: Any) -> bool:
    """The reply to a command sent without arguments: does the server have that command?
    Only "wrong number of arguments" (or an ACL refusal, which comes after the lookup) says
    yes; "unknown command", or anything else a proxy may answer, says no."""
    text = str(reply)
    return isinstance(reply, ResponseError) and (
        text.startswith("wrong number of arguments") or text.startswith("NOPERM"))


def server_capabilities(r: Redis, scripts: bool = True) -> Capabilities:
    """Probe the server of ``r``; on a cluster every primary and replica, and a command counts
    only where every node has it (the oldest version is the one shown). ``scripts``: also
    probe Lua (callers that run scripts; their ACL rule allows ``SCRIPT LOAD``). Callers
    translate errors (:func:`.boundary.redis_errors`)."""
    nodes = ([r.get_redis_connection(node) for node in r.get_nodes()]
             if isinstance(r, RedisCluster) else [r])
    probe = [("HELLO",), *((c.upper(),) for c in OPTIONAL_COMMANDS)]
    hellos, commands = [], set(OPTIONAL_COMMANDS)
    for node in nodes:
        hello, *optional = pipeline(node, probe)
        if isinstance(hello, Exception):
            raise hello
        hellos.append(_hello(hello))
        commands &= {c for c, reply in zip(OPTIONAL_COMMANDS, optional, strict=True)
                     if _has(reply)}
    oldest = min(hellos, key=lambda h: parse_version(text(h.get("version", "0"))))
    family = text(oldest.get("server", "redis")).lower()
    version = parse_version(text(oldest.get("version", "0")))
    has_lua: bool | None = None
    if scripts:
        try:
            r.script_load(_PROBE)
            has_lua = True
        except NoPermissionError:  # the server knows SCRIPT LOAD: the user may not run it
            has_lua = None
        except ResponseError:
            has_lua = False
    return Capabilities(family, version, has_lua, frozenset(commands))


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


def check_scripting(spec: ConnectionSpec, what: str, why: str, role: str) -> Capabilities:
    """At start, before ``what`` (a part that runs Lua scripts: ``why``; its ACL ``role``)
    writes anything: refuse a server without scripting, or a user who may not load scripts
    (:func:`..capabilities.require_scripting`). Returns the capabilities."""
    caps = capabilities_of(spec)
    require_scripting(caps, what, spec.display, why, role)
    return caps


_probed: dict[tuple[ConnectionSpec, bool], Capabilities] = {}
