"""What a streaming read without a consumer group asks Redis on the driver (read-only
commands, so that a ``+@read`` user is enough): each stream's end (``XINFO STREAM``,
pipelined), and, where a batch must end before a stream's end, the entries after a position
(``XRANGE (<id> <last> COUNT n``)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..core.connection import ConnectionSpec
from ..core.ids import StreamId
from ..core.positions import Tail
from ..errors import NotAStreamError
from .boundary import redis_errors
from .client import client
from .streams import text, xrange_pages
from .wire import as_map, is_no_such_key, pipeline, raise_first


def _tail(stream: str, reply: Any, server: str) -> Tail | None:
    if isinstance(reply, Exception):
        if is_no_such_key(reply, or_wrong_type=False):
            return None
        if is_no_such_key(reply):
            raise NotAStreamError(f"key {stream!r} is not a stream (Server: {server}); "
                                  "spark-eventbus reads streams only. Choose another 'stream' "
                                  "option.")
        raise reply
    info = as_map(reply)  # the keys as sent (bytes): only the five used are decoded
    first = info.get(b"first-entry")
    return Tail(text(info[b"last-generated-id"]), int(info.get(b"entries-added") or 0),
                int(info[b"length"]), text(first[0]) if first else None,
                text(info.get(b"max-deleted-entry-id") or "0-0"))


def tails(spec: ConnectionSpec, streams: Sequence[str]) -> list[Tail | None]:
    """Each stream's :class:`~spark_eventbus.core.positions.Tail` (None: no such key), one round
    trip per node."""
    if not streams:
        return []
    shown = ", ".join(repr(s) for s in streams[:3]) + (
        f" and {len(streams) - 3} more" if len(streams) > 3 else "")
    with redis_errors(f"looking at the ends of streams {shown}", spec):
        replies = pipeline(client(spec), [("XINFO", "STREAM", s) for s in streams])
        return [_tail(s, reply, spec.display) for s, reply in zip(streams, replies,
                                                                  strict=True)]


def wait_for_replica(spec: ConnectionSpec, needed: Mapping[str, str]) -> list[str]:
    """Option readFrom=replica: wait (within ``failoverTimeoutMs``) until the replica ``spec``
    reads holds each stream of ``needed`` up to its ID (its last-generated-id at or past it:
    replication is in order, so every entry up to it is there). Returns the streams it still
    lacks then."""
    streams = sorted(needed)
    deadline = time.monotonic() + spec.failover_timeout_ms / 1000
    pause = 0.01
    while True:
        found = tails(spec, streams)
        streams = [s for s, t in zip(streams, found, strict=True)
                   if t is None or StreamId.parse(t.last_id) < StreamId.parse(needed[s])]
        if not streams or time.monotonic() >= deadline:
            return streams
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(0.5, pause * 2)


def ids_after_each(spec: ConnectionSpec, asks: Sequence[tuple[str, str, str, int]],
                   page: int) -> list[list[str]]:
    """For each ``(stream, after, last, count)``: the IDs of at most ``count`` entries after
    ``after`` up to ``last``, read in ``XRANGE`` pages of at most ``page`` (each command
    bounded), the pages of many streams pipelined in rounds of at most
    :data:`ENTRIES_PER_ROUND` entries asked, one round trip per node each: many streams cost
    few round trips, and no more than a round's entries are held at once."""
    if not asks:
        return []
    shown = ", ".join(repr(a[0]) for a in asks[:3]) + (
        f" and {len(asks) - 3} more" if len(asks) > 3 else "")
    out: list[list[str]] = [[] for _ in asks]
    todo = deque((i, after) for i, (_, after, _, _) in enumerate(asks))  # next page: from
    with redis_errors(f"finding where the next batch of streams {shown} ends", spec):
        while todo:
            sent: list[tuple[int, str, int]] = []  # (ask, after, page size) of this round
            total = 0
            while todo and (not sent or total + page <= ENTRIES_PER_ROUND):
                i, after = todo.popleft()
                size = min(page, asks[i][3] - len(out[i]))
                sent.append((i, after, size))
                total += size
            got = raise_first(pipeline(client(spec), [
                ("XRANGE", asks[i][0], f"({after}", asks[i][2], "COUNT", size)
                for i, after, size in sent]))
            for (i, _, size), entries in zip(sent, got, strict=True):
                ids = [text(e[0]) for e in entries or ()]
                out[i] += ids
                if len(ids) == size and len(out[i]) < asks[i][3]:  # more: its next page
                    todo.append((i, ids[-1]))
    return out


# ids_after_each: entries asked per pipelined round (their IDs are what is kept)
ENTRIES_PER_ROUND = 20_000


def entries_after(spec: ConnectionSpec, stream: str, after: str, last: str, count: int,
                  page: int) -> Iterator[list[Any]]:
    """At most ``count`` raw entries of ``stream`` after ``after`` up to ``last``, in pages of
    at most ``page`` (each call bounded: no long command on the server)."""
    with redis_errors(f"finding where the next batch of stream {stream!r} ends", spec):
        yield from xrange_pages(client(spec), stream, f"({after}", last, page, count)
