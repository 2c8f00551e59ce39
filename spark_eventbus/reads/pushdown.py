"""Filter pushdown of batch reads (option ``filterPushdown``): which part of each stream a
``WHERE`` on ``stream``, ``id`` and ``timestamp`` leaves to read. Pure (driver, planning).

A stream ID is a millisecond timestamp and a sequence number, so a time bound is an ``XRANGE``
bound. Every filter also stays with Spark (``pushFilters`` returns all of them): pushdown only
narrows what Redis returns, to a superset of the rows the filters keep, and Spark applies the
filters as it would without pushdown — the rows are the same either way.

* ``timestamp`` ``>``, ``>=``, ``<``, ``<=``, ``=`` (a time with a zone, as Spark passes a
  ``TIMESTAMP``): exact bounds in milliseconds (an entry's timestamp is its ID's
  milliseconds, up to year 9999: later IDs all show the column's largest value, so a bound
  there reads to the end).
* ``stream`` ``=`` / ``IN``: only those of the read's streams.
* ``id`` ``=`` / ``IN``: from the smallest to the largest of the IDs. ``id`` is a string
  column, so ``>``/``<`` compare text ("9-0" > "10-0"): they bound the range only where the
  stream's first and last IDs have as many millisecond digits as the filter's ID — then so does
  every ID between them, and text order agrees with ID order on the milliseconds (the sequence
  part, compared as text, is left to Spark: the bound is the whole millisecond).

Anything else (``OR`` is not pushed by Spark; ``NOT``, other columns, ``timestamp_ntz``) is
left to Spark alone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from ..core.ids import MAX_TIMESTAMP_MS, StreamId, is_digits

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_MAX_MS = StreamId.MAX.ms


@dataclass(frozen=True)
class Narrowing:
    """What the pushed filters leave of a batch read (ANDed)."""

    streams: frozenset[str] | None = None  # None: every stream of the read
    lo_ms: int = 0  # timestamp bounds, inclusive
    hi_ms: int = _MAX_MS
    lo_id: StreamId = StreamId.MIN  # id = / IN: the smallest and largest
    hi_id: StreamId = StreamId.MAX
    # id > / >= and < / <= (text): the millisecond bound, applied where digits agree
    text_lo: int | None = None
    text_hi: int | None = None

    @property
    def narrows(self) -> bool:
        return self != Narrowing()

    def reads(self, stream: str) -> bool:
        return self.streams is None or stream in self.streams

    def bounds(self, first: StreamId, last: StreamId) -> tuple[StreamId, StreamId] | None:
        """The ID range to read of a stream whose first and last entries in the read's range
        are ``first`` and ``last``; None: nothing there can pass the filters."""
        if self.lo_ms > min(self.hi_ms, _MAX_MS) or self.hi_ms < 0:
            return None
        lo = max(first, StreamId(self.lo_ms, 0), self.lo_id)
        # every ID from the column's last millisecond on shows that one as its timestamp
        hi = min(last, StreamId.MAX if self.hi_ms >= MAX_TIMESTAMP_MS
                 else StreamId(self.hi_ms, StreamId.MAX.seq), self.hi_id)
        digits = len(str(first.ms))
        if len(str(last.ms)) == digits:  # every ID between has as many digits
            if self.text_lo is not None and len(str(self.text_lo)) == digits:
                lo = max(lo, StreamId(self.text_lo, 0))
            if self.text_hi is not None and len(str(self.text_hi)) == digits:
                hi = min(hi, StreamId(self.text_hi, StreamId.MAX.seq))
        return (lo, hi) if lo <= hi else None


def narrowing(filters: Iterable[Any]) -> Narrowing:
    """The :class:`Narrowing` of ``filters`` (``pyspark.sql.datasource`` filters, ANDed);
    filters it does not understand narrow nothing."""
    n = Narrowing()
    for f in filters:
        n = _apply(n, f)
    return n


def _apply(n: Narrowing, f: Any) -> Narrowing:
    kind = type(f).__name__
    column = getattr(f, "attribute", None)
    if column not in (("stream",), ("id",), ("timestamp",)):
        return n
    value = getattr(f, "value", None)
    if column == ("stream",):
        names = _strings(kind, value)
        if names is None:
            return n
        return replace(n, streams=names if n.streams is None else n.streams & names)
    if column == ("id",):
        return _id(n, kind, value)
    us = _micros(value)
    if us is None:
        return n
    floor_ms, ceil_ms = us // 1000, -(-us // 1000)
    if kind == "GreaterThan":
        return replace(n, lo_ms=max(n.lo_ms, floor_ms + 1))
    if kind == "GreaterThanOrEqual":
        return replace(n, lo_ms=max(n.lo_ms, ceil_ms))
    if kind == "LessThan":
        return replace(n, hi_ms=min(n.hi_ms, ceil_ms - 1))
    if kind == "LessThanOrEqual":
        return replace(n, hi_ms=min(n.hi_ms, floor_ms))
    if kind == "EqualTo":  # a time between two milliseconds: no entry has it
        return replace(n, lo_ms=max(n.lo_ms, ceil_ms), hi_ms=min(n.hi_ms, floor_ms))
    return n


def _strings(kind: str, value: Any) -> frozenset[str] | None:
    """The values of an ``=`` or ``IN`` on a string column; None for another filter."""
    if kind == "EqualTo" and isinstance(value, str):
        return frozenset({value})
    if kind == "In" and isinstance(value, tuple) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    return None


def _id(n: Narrowing, kind: str, value: Any) -> Narrowing:
    exact = _strings(kind, value)
    if exact is not None:
        # an ID column holds IDs as Redis writes them: a value written otherwise matches none
        ids = [StreamId.parse(v) for v in exact if _canonical(v)]
        if not ids:
            return replace(n, lo_id=StreamId.MAX, hi_id=StreamId.MIN)
        return replace(n, lo_id=max(n.lo_id, min(ids)), hi_id=min(n.hi_id, max(ids)))
    if not isinstance(value, str) or not _canonical(value):
        return n
    ms = StreamId.parse(value).ms
    if kind in ("GreaterThan", "GreaterThanOrEqual"):
        return replace(n, text_lo=ms if n.text_lo is None else max(n.text_lo, ms))
    if kind in ("LessThan", "LessThanOrEqual"):
        return replace(n, text_hi=ms if n.text_hi is None else min(n.text_hi, ms))
    return n


def _canonical(value: str) -> bool:
    """``value`` is a stream ID as Redis writes one: ``<ms>-<seq>``, no leading zeros."""
    ms, sep, seq = value.partition("-")
    return bool(sep) and all(is_digits(p) and str(int(p)) == p and int(p) <= StreamId.MAX.ms
                             for p in (ms, seq))


def _micros(value: Any) -> int | None:
    """A ``TIMESTAMP`` filter value (a datetime with a zone) in microseconds since the epoch;
    None for anything else (a ``TIMESTAMP_NTZ`` has no zone: not an instant)."""
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        return None
    return (value - _EPOCH) // dt.timedelta(microseconds=1)
