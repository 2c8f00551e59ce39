"""What an executor task sends to replay its part of a micro-batch (``partition_reader``): paged
``XRANGE`` of claimed ranges and batch-read ranges, pipelined ``XRANGE id id`` of reclaimed IDs,
and the bookkeeping of entries found missing. Entries as the server sent them
(:func:`.wire.pipeline`); redis-py errors are translated here, naming the stream."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..core.losses import RangeLoss
from .boundary import redis_errors
from .client import ConnectionSpec, client
from .losses import ack_gone, record_losses, xrange_each
from .streams import xrange_pages
from .wire import pipeline, raise_first


def read_ranges(spec: ConnectionSpec, ranges: Sequence[tuple[str, str, str, int]]
                ) -> list[list[Any]]:
    """``XRANGE stream first last COUNT n`` of each ``(stream, first, last, n)``, pipelined
    (one round trip per node): small ranges of many streams read together. Raw replies."""
    if not ranges:
        return []
    streams = list(dict.fromkeys(r[0] for r in ranges))
    shown = ", ".join(repr(s) for s in streams[:3]) + (
        f" and {len(streams) - 3} more" if len(streams) > 3 else "")
    with redis_errors(f"reading streams {shown}", spec):
        got = raise_first(pipeline(client(spec), [
            ("XRANGE", stream, first, last, "COUNT", n) for stream, first, last, n in ranges]))
        return [list(g or []) for g in got]


class StreamReplay:
    """Reads of one stream for one task. Idempotent: every call reads, or writes bookkeeping
    that a retry writes again to the same effect."""

    def __init__(self, spec: ConnectionSpec, stream: str) -> None:
        self.spec = spec
        self.stream = stream
        self.redis = client(spec)

    def pages(self, first: str, last: str, page: int) -> Iterator[list[Any]]:
        """``XRANGE stream first last`` in pages of at most ``page`` raw entries."""
        with redis_errors(f"reading stream {self.stream!r}", self.spec):
            yield from xrange_pages(self.redis, self.stream, first, last, page)

    def entries(self, ids: Sequence[str]) -> list[Any]:
        """Each of ``ids``: the raw entry, or None where the stream no longer holds it."""
        with redis_errors(f"reading stream {self.stream!r}", self.spec):
            return xrange_each(self.redis, self.stream, ids)

    def record_losses(self, group: str, consumer: str, run: str, seq: int, now_ms: int,
                      fail: bool, lost: list[RangeLoss]) -> bool:
        """Record ``lost`` for batch ``seq``; True when the replay may move past it
        (:func:`.losses.record_losses`)."""
        with redis_errors(f"recording entries lost from stream {self.stream!r}", self.spec):
            return record_losses(self.redis, self.stream, group, consumer, run, seq, now_ms,
                                 fail, lost)

    def ack_gone(self, group: str, lost: list[RangeLoss]) -> int:
        with redis_errors(f"acking entries lost from stream {self.stream!r}", self.spec):
            return ack_gone(self.redis, self.stream, group, lost)
