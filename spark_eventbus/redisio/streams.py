"""Stream commands shared by the reader, the sink, the acking writer and the CLI: type checks,
paged XRANGE, chunked XACK, reply decoding; and, taking a :class:`ConnectionSpec` and
translating errors at this edge, the target checks of the sink and the span of a batch read."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from redis.exceptions import NoPermissionError

from ..core.connection import ConnectionSpec
from ..errors import NotAStreamError
from .base import Redis, ResponseError
from .boundary import redis_errors
from .client import client
from .wire import pipeline, raise_first

# IDs per XACK call: large enough to reach Redis's best per-ID cost, small enough that one call
# stays far below the 50 ms budget of any server-side call.
ACK_CHUNK = 1000


def text(value: Any) -> str:
    """A reply value (bytes or not) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def key_type(r: Redis, key: str) -> str:
    return text(r.type(key))


def stream_exists(r: Redis, key: str, fix: str = "") -> bool:
    """True for a stream, False for a missing key; any other type raises
    :class:`NotAStreamError` — spark-eventbus never overwrites it (``fix`` ends the message)."""
    return is_stream_kind(key, key_type(r, key), fix)


def is_stream_kind(key: str, kind: str, fix: str = "") -> bool:
    """:func:`stream_exists` for a ``TYPE`` reply already read (``kind``)."""
    if kind not in ("stream", "none"):
        raise NotAStreamError(f"key {key!r} holds a {kind}, not a stream; spark-eventbus never "
                              f"overwrites it.{' ' + fix if fix else ''}")
    return kind == "stream"


def xrange(r: Redis, stream: str, start: str, end: str, count: int) -> list[Any]:
    """``XRANGE stream start end COUNT count``, its entries as the server sent them (lists of
    ``[id, [field, value, ...]]``, through :func:`.wire.pipeline`, like every entry the package
    reads: Arrow columns are built from them directly, duplicate field names survive, and no
    Python object is made per field)."""
    return list(raise_first(pipeline(r, [("XRANGE", stream, start, end, "COUNT", count)]))[0]
                or [])


def xrange_pages(r: Redis, stream: str, start: str, end: str, page: int,
                 limit: int | None = None) -> Iterator[list[Any]]:
    """:func:`xrange` in pages of at most ``page`` entries, ``limit`` entries in all (None: the
    whole range); each call is bounded, whatever the range."""
    lo, left = start, limit
    while left is None or left > 0:
        size = page if left is None else min(page, left)
        got = xrange(r, stream, lo, end, size)
        if got:
            yield got
        if len(got) < size:
            return
        if left is not None:
            left -= len(got)
        lo = "(" + text(got[-1][0])


def read_entries(reply: Any) -> Any:
    """The raw entries of a one-stream ``XREAD``/``XREADGROUP`` reply (RESP3: a map of stream
    to entries; RESP2: a list of [stream, entries]; nil when nothing was read)."""
    if not reply:
        return []
    return next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]


def entry_sizes(entries: Sequence[Any]) -> list[int]:
    """Bytes of each raw entry (``[id, [field, value, ...]]``): field names + values, what
    ``maxBytesPerTrigger`` counts."""
    sizes = []
    for e in entries:
        fields = e[1] or []
        if isinstance(fields, dict):
            sizes.append(sum(len(k) + len(v) for k, v in fields.items()))
        else:
            sizes.append(sum(len(x) for x in fields))
    return sizes


def xack_commands(stream: str, group: str, ids: Sequence[str], per_call: int = ACK_CHUNK,
                  delete: bool = False) -> list[tuple[Any, ...]]:
    """``XACK`` of ``ids`` in calls of at most ``per_call`` IDs (a call's work is bounded);
    ``delete``: ``XACKDEL … ACKED`` (Redis >= 8.2: an entry every group has acked is deleted)."""
    parts = (ids[k:k + per_call] for k in range(0, len(ids), per_call))
    if delete:
        return [("XACKDEL", stream, group, "ACKED", "IDS", len(p), *p) for p in parts]
    return [("XACK", stream, group, *p) for p in parts]


def xack(r: Redis, stream: str, group: str, ids: Sequence[str], per_call: int = ACK_CHUNK
         ) -> int:
    """:func:`xack_commands`, pipelined; the number acked."""
    if not ids:
        return 0
    return sum(int(n) for n in raise_first(pipeline(
        r, xack_commands(stream, group, ids, per_call))))


# -- with a spec: the client is taken and redis-py errors are translated here ---------------


def check_streams(spec: ConnectionSpec, keys: Sequence[tuple[str, str]], what: str) -> None:
    """Each ``(key, fix)`` of ``keys`` is a stream or missing; any other type raises
    :class:`NotAStreamError` ending with ``fix``. Redis answering is part of the check. One
    pipelined round trip."""
    with redis_errors(what, spec):
        kinds = raise_first(pipeline(client(spec), [("TYPE", key) for key, _ in keys]))
        for (key, fix), kind in zip(keys, kinds, strict=True):
            is_stream_kind(key, text(kind), fix)


def stream_spans(spec: ConnectionSpec, ranges: Sequence[tuple[str, str, str]], what: str,
                 fix: str) -> list[tuple[Any, Any] | None]:
    """For each ``(stream, start, end)`` of ``ranges``, the IDs of the first and the last entry
    of ``stream`` within ``start``..``end`` (``XRANGE``/``XREVRANGE`` ``COUNT 1``), or ``None``
    where there is none or the key is missing; a key of another type raises
    :class:`NotAStreamError` ending with ``fix``. One pipelined round trip for all of them,
    routed by :func:`.wire.pipeline` (with ``readFrom=replica``, to replicas)."""
    if not ranges:
        return []
    commands: list[tuple[Any, ...]] = []
    for stream, start, end in ranges:
        commands += [("TYPE", stream), ("XRANGE", stream, start, end, "COUNT", 1),
                     ("XREVRANGE", stream, end, start, "COUNT", 1)]
    with redis_errors(what, spec):
        replies = pipeline(client(spec), commands)
        spans: list[tuple[Any, Any] | None] = []
        for i, (stream, _, _) in enumerate(ranges):
            kind, first, last = replies[3 * i:3 * i + 3]
            raise_first([kind])
            if not is_stream_kind(stream, text(kind), fix):
                spans.append(None)
                continue
            raise_first([first, last])
            spans.append((first[0][0], last[0][0]) if first and last else None)
        return spans


def ack_entries(spec: ConnectionSpec, stream: str, group: str, ids: Sequence[str],
                per_call: int, what: str) -> int:
    """:func:`xack` with the process's client for ``spec``, errors translated (``what``: what
    the caller was doing). Idempotent: an ID no longer pending is not counted."""
    with redis_errors(what, spec):
        return xack(client(spec), stream, group, ids, per_call)


def takes_acked_trim(r: Redis, stream: str) -> bool:
    """Whether the server of ``stream`` takes ``XTRIM … ACKED`` (Redis >= 8.2): asked with a
    trim that removes nothing (``MAXLEN =`` the largest length), which a server without the
    policy refuses as a syntax error before it looks at the key."""
    try:
        r.execute_command("XTRIM", stream, "MAXLEN", "=", 2**63 - 1, "ACKED")
    except ResponseError as exc:
        if "syntax" not in str(exc).lower():
            raise
        return False
    return True


def permitted(r: Redis, *command: Any) -> bool:
    """Whether the ACL user may run ``command``, a call that changes nothing (an ack or a
    deletion of ``0-0``, which no entry or group holds): a server checks a command's arity
    before the user's rule, so the capability probe cannot tell."""
    try:
        r.execute_command(*command)
    except NoPermissionError:
        return False
    return True
