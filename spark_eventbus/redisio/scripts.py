"""The Lua scripts of ``redisio/lua/``, loaded once per process by name and run through
redis-py ``Script`` (EVALSHA, reloaded on NOSCRIPT). Each ``<name>.lua`` is one atomic operation
with a KEYS/ARGV/returns header; ``_lib.lua`` (shared helpers) is prepended to every script."""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from ..core.keys import BOOKKEEPING_TTL_MS
from .base import Redis, ResponseError
from .wire import pipeline

_scripts: dict[str, Script] = {}
_lock = threading.Lock()
# (id of a client, script name) run through that client once: its server knew the script then
# (a restarted server or a failover brings NOSCRIPT back: run_scripts loads it again)
_loaded: set[tuple[int, str]] = set()


# Calls of one script on one node go this many to an EVALSHA of its batched form: a claim round
# over 10,000 streams was 30,000 EVALSHAs, replies packed and parsed one by one on both sides
# (Redis's time in the scripts is theirs either way); 200 calls stay ~2-3 ms long.
SCRIPT_BATCH = 200
# The name of a script's batched form: script name + this
BATCHED = "*"
# The batched form runs the script once per call: ARGV[1] keys per call, ARGV[2] args per call,
# then the calls' keys (KEYS) and args one after the other; it returns each call's reply in
# order (a call that returns nothing gives false: a hole would cut the reply short).
_BATCHED_LOOP = """
local __nk, __na = tonumber(ARGV[1]), tonumber(ARGV[2])
local __out = {}
for __i = 0, (#ARGV - 2) / __na - 1 do
  local __k, __a = {}, {}
  for __j = 1, __nk do __k[__j] = KEYS[__i * __nk + __j] end
  for __j = 1, __na do __a[__j] = ARGV[2 + __i * __na + __j] end
  local __r = __one(__k, __a)
  if __r == nil then __r = false end
  __out[__i + 1] = __r
end
return __out
"""


@cache
def script_text(name: str) -> str:
    """The full text of script ``name`` (helpers included), with ``BOOKKEEPING_TTL_MS`` (the
    one TTL of bookkeeping keys, :data:`spark_eventbus.core.keys.BOOKKEEPING_TTL_MS`) put in;
    ``<name>*`` is its batched form (:func:`run_scripts`): the script as a function of its own
    KEYS and ARGV, run once per call."""
    lua = resources.files("spark_eventbus.redisio") / "lua"
    if name.endswith(BATCHED):
        body = (lua / f"{name[:-len(BATCHED)]}.lua").read_text()
        text = ((lua / "_lib.lua").read_text() + "\nlocal function __one(KEYS, ARGV)\n" + body
                + "\nend\n" + _BATCHED_LOOP)
    else:
        text = (lua / "_lib.lua").read_text() + "\n" + (lua / f"{name}.lua").read_text()
    return text.replace("BOOKKEEPING_TTL_MS", str(BOOKKEEPING_TTL_MS))


def command_at(sha: str, line: int) -> str | None:
    """The Redis command a loaded script calls at ``line`` (for errors that name only the
    script's SHA and line, such as an ACL refusal inside a script)."""
    with _lock:
        scripts = dict(_scripts)
    for name, s in scripts.items():
        if s.sha == sha:
            lines = script_text(name).splitlines()
            if 0 < line <= len(lines):
                found = _CALL.search(lines[line - 1])
                return found.group(1).lower() if found else None
    return None


_CALL = re.compile(r"redis\.call\('([A-Za-z]+)'")


def _script(r: Redis, name: str) -> Script:
    with _lock:
        s = _scripts.get(name)
        if s is None:
            # A Script is bound to the client that made it only for its SHA and as the default
            # client; every call below passes its own client (or pipeline).
            s = _scripts[name] = Script(r, script_text(name))
        return s


def run_script(r: Redis, name: str, keys: Sequence[Any], args: Sequence[Any],
               pipe: Any = None) -> Any:
    """Run script ``name`` on ``r`` (or queue it on pipeline ``pipe``): EVALSHA, loading the
    script first if the server does not know it."""
    return _script(r, name)(keys=list(keys), args=list(args), client=pipe if pipe is not None
                            else r)


def run_scripts(r: Redis, name: str, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]
                ) -> list[Any]:
    """Script ``name`` once per ``(keys, args)`` of ``calls``: on one node,
    :data:`SCRIPT_BATCH` calls per ``EVALSHA`` of its batched form (:func:`script_text`), those
    pipelined; on a cluster, whose commands' keys must share a slot, one ``EVALSHA`` per call,
    pipelined per node (:func:`_run_each`). Each call is the same atomic step either way; a
    batch that fails (an error raised inside a call) stops at that call, and its error is
    raised as any call's is."""
    nk, na = (len(calls[0][0]), len(calls[0][1])) if calls else (0, 0)
    if len(calls) < 2 or na == 0 or isinstance(r, RedisCluster) \
            or any(len(k) != nk or len(a) != na for k, a in calls):
        return _run_each(r, name, calls)
    batches = [calls[i:i + SCRIPT_BATCH] for i in range(0, len(calls), SCRIPT_BATCH)]
    replies = _run_each(r, name + BATCHED, [
        ([k for keys, _ in b for k in keys], [nk, na, *(x for _, args in b for x in args)])
        for b in batches])
    return [x for b, reply in zip(batches, replies, strict=True) for x in _batch_reply(b, reply)]


def _batch_reply(batch: Sequence[Any], reply: Any) -> list[Any]:
    if not isinstance(reply, list) or len(reply) != len(batch):
        raise ResponseError(f"a batched script answered {reply!r:.200} for {len(batch)} calls")
    return reply


def _run_each(r: Redis, name: str, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]
              ) -> list[Any]:
    """Script ``name`` once per ``(keys, args)`` of ``calls``, pipelined: one round trip per
    node (a cluster pipeline groups them by node). Where the server does not know the script
    yet, the first call loads it and the others are sent again; a node still without it (a
    cluster node, after a failover or a reshard) gets its calls one by one, which load it.
    Any other error reply is raised (the first, in call order)."""
    if not calls:
        return []
    if len(calls) == 1:  # one call: redis-py's Script, which loads it on NOSCRIPT
        return [run_script(r, name, *calls[0])]
    replies: list[Any] = [None] * len(calls)
    todo = list(range(len(calls)))
    known = (id(r), name)
    if known not in _loaded:
        # Not yet run through this client: the first call alone loads the script, so that
        # thousands of calls do not come back NOSCRIPT to be sent again
        try:
            replies[0] = run_script(r, name, *calls[0])
        except ResponseError as exc:  # raised after the other calls ran, as for a pipeline
            replies[0] = exc
        todo = todo[1:]
    for attempt in range(2):
        if not todo:
            break
        sha = _script(r, name).sha
        sent = pipeline(r, [("EVALSHA", sha, len(calls[i][0]), *calls[i][0], *calls[i][1])
                            for i in todo])
        for i, reply in zip(todo, sent, strict=True):
            replies[i] = reply
        todo = [i for i in todo if is_noscript(replies[i])]
        if todo and attempt == 0:
            replies[todo[0]] = run_script(r, name, *calls[todo[0]])
            todo = todo[1:]
    for i in todo:
        replies[i] = run_script(r, name, *calls[i])
    _loaded.add(known)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def is_noscript(reply: Any) -> bool:
    return isinstance(reply, NoScriptError) or (
        isinstance(reply, ResponseError) and str(reply).startswith("NOSCRIPT"))
