"""Each stream's group as the driver sees it, many streams at once (a single stream is a
list of one), pipelined per node: :func:`probe` (``XINFO GROUPS`` and ``XLEN``, and ``XINFO
STREAM`` where the group has something to read or its lag of 0 is unsure), :func:`news` (one
``XREAD COUNT 1`` naming the streams with entries after a position), the one lag rule
(:func:`checked_lag`) and the one rule for totals (:func:`total`), progress
(:func:`stats`), ``minEntriesPerTrigger``'s count (:func:`available`) and
``Trigger.AvailableNow``'s end (:func:`last_generated_ids`). Replies are read as they come (no
redis-py reply callbacks: with thousands of streams those cost more than the round trip)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.capabilities import streams_too_old
from ..core.ids import StreamId
from ..core.keys import key_slot
from ..errors import EventBusConnectionError
from .boundary import redis_errors
from .client import is_cluster
from .group import ConsumerOps, where
from .streams import text
from .wire import as_map, is_no_such_key, pipeline, raise_first, raise_unless_missing

log = logging.getLogger("spark_eventbus")

# minEntriesPerTrigger where the server cannot tell the lag: entries counted with one XRANGE
COUNT_AHEAD_MAX = 10_000
# Streams per XREAD that looks for news (news): ~1.2 ms of the server's time each
NEWS_PER_XREAD = 1_000


@dataclass(frozen=True)
class GroupStats:
    pending: int | None
    lag: int | None  # None: unknown (Redis 7.0 after XDEL/trim)
    last_delivered: str | None


def checked_lag(lag: int | None, entries_read: int | None, last_delivered: str | None,
                newest: str | None, oldest: str | None = None, length: int | None = None
                ) -> int | None:
    """The server's ``lag``, checked against the positions the connector knows: the one lag
    rule (:meth:`Probe.stats`).

    ``lag`` is ``entries-added - entries-read``; a promoted Redis 7.0 replica can hold an
    ``entries-read`` that restarted from 0, and then reports up to the whole stream as lag with
    nothing left to read, and too much ever after. So a non-zero lag with nothing after
    ``last_delivered`` (``newest``: the stream's last entry, ``None`` when empty) is 0, whatever
    the server says; entries after it with an ``entries-read`` of 0 while the group has
    delivered entries are an unknown lag, unless every entry still in the stream (``oldest``
    its first, ``length`` their number) is after the last delivered one (a group made at
    ``earliest`` starts just before the first entry with entries-read 0): then all are lag."""
    if not lag or last_delivered is None:
        return lag
    last = StreamId.parse(last_delivered)
    if newest is None or StreamId.parse(newest) <= last:
        return 0
    if not entries_read and last != StreamId(0, 0):
        return length if oldest is not None and length is not None \
            and StreamId.parse(oldest) > last else None
    return lag


def total(values: Sequence[int | None]) -> int | None:
    """The one rule for a total over streams (entries behind, pending): the sum, unknown (None)
    when any part is (progress shows it null, telemetry leaves the total out)."""
    return None if None in values else sum(x for x in values if x is not None)


@dataclass(frozen=True)
class Probe:
    """One stream's group as ``XINFO GROUPS`` and ``XINFO STREAM`` show it. ``group`` False: the
    stream or the group is missing (a claim then raises the error that names it)."""

    group: bool
    pending: int | None = None
    lag: int | None = None
    entries_read: int | None = None
    last_delivered: str | None = None
    last_generated: str | None = None
    newest: str | None = None  # the last entry still in the stream
    oldest: str | None = None  # the first entry still in the stream
    length: int | None = None
    consumers: int | None = None  # consumers of the group (XINFO GROUPS)
    # False: XINFO STREAM was not asked (a lag above 0 says there is news); the last generated
    # ID and the stream's ends are unknown, and stats() gives the server's lag as it is
    full: bool = True

    @property
    def has_new(self) -> bool:
        """Entries were added after the group's last delivery (to claim, or lost to report)."""
        if not self.group or self.last_generated is None or self.last_delivered is None:
            return True
        if self.last_generated == self.last_delivered:
            return False
        return StreamId.parse(self.last_generated) > StreamId.parse(self.last_delivered)

    @property
    def lag_unsure(self) -> bool:
        """A lag above 0 with an ``entries-read`` of 0 after entries were delivered: only the
        stream's ends tell whether it is all there is to read or a stale count
        (:func:`checked_lag`), so progress asks ``XINFO STREAM`` before showing it."""
        return bool(self.lag) and not self.entries_read \
            and self.last_delivered not in (None, "0-0")

    @property
    def has_pending(self) -> bool:
        return not self.group or self.pending is None or self.pending > 0

    def stats(self) -> GroupStats:
        """Progress: pending, lag (:func:`checked_lag`) and last delivered ID."""
        if not self.group:
            return GroupStats(None, None, None)
        lag = self.lag
        if self.full:  # else the stream's ends were not read: the server's lag as it is
            lag = checked_lag(lag, self.entries_read, self.last_delivered, self.newest,
                              self.oldest, self.length)
        return GroupStats(self.pending, lag, self.last_delivered)




def unsure_lag(group: dict[bytes, Any], length: Any) -> bool:
    """``XINFO GROUPS`` says lag 0 of a group on an empty stream (``length``, XLEN's reply):
    Redis 8.2 says 0 there even when entries were added and trimmed or deleted before the group
    read them (7.0 and Valkey 9.1 count them), so only ``XINFO STREAM`` (entries added, last
    generated ID) tells whether the group missed some. A loss on a quiet stream would go
    unseen otherwise."""
    return group.get(b"lag") == 0 and length == 0


def group_of(groups: Any, group: str, server: str) -> dict[bytes, Any] | None:
    """Group ``group`` in an ``XINFO GROUPS`` reply of ``server`` (None: it has none); a
    server whose reply has no ``entries-read`` (older than Redis 7.0) is refused."""
    name = group.encode()
    for g in map(as_map, groups):
        if g[b"name"] == name:
            if b"entries-read" not in g:
                raise streams_too_old(server, "XINFO GROUPS has no entries-read")
            return g
    return None


def _opt_text(value: Any) -> str | None:
    return None if value is None else text(value)


def probe(ops: Sequence[ConsumerOps], full: bool = True) -> list[Probe]:
    """Each stream's group state, pipelined: ``XINFO GROUPS`` and ``XLEN`` of every stream (one
    round trip), then ``XINFO STREAM`` of those whose group has something to read (a ``lag``
    other than 0; not ``full``: only where the lag is unknown, enough to decide where to claim)
    or whose lag of 0 is unsure (:func:`unsure_lag`). A quiet stream costs two commands in one
    round trip. Replies are read as they come (no redis-py reply callbacks: with
    thousands of streams those cost more than the round trip)."""
    if not ops:
        return []
    with redis_errors(f"reading group info ({where(ops)})", ops[0].spec):
        replies = pipeline(ops[0].redis, [c for op in ops for c in (
            ("XINFO", "GROUPS", op.stream), ("XLEN", op.stream))])
        raise_unless_missing(replies)
        mine = [None if isinstance(groups, Exception)
                else group_of(groups, op.group, op.spec.display)
                for op, groups in zip(ops, replies[0::2], strict=True)]
        # lag 0: the group has read every entry ever added (Redis's own count), except on an
        # empty stream (emptied: :func:`unsure_lag`); None: unknown (Redis 7.0 after XDEL or
        # a trim), so the stream is looked at
        ask = [i for i, (g, n) in enumerate(zip(mine, replies[1::2], strict=True))
               if g is not None and (unsure_lag(g, n) or (g.get(b"lag") != 0
                                     and (full or g.get(b"lag") is None)))]
        infos: dict[int, Any] = {}
        if ask:
            got = pipeline(ops[0].redis, [("XINFO", "STREAM", ops[i].stream) for i in ask])
            raise_unless_missing(got)
            infos = dict(zip(ask, got, strict=True))
    out = []
    for i, g in enumerate(mine):
        if g is None:
            out.append(Probe(False))
            continue
        pending, delivered = int(g[b"pending"]), _opt_text(g[b"last-delivered-id"])
        lag = g.get(b"lag")
        if i not in infos and lag:  # news (not full): XINFO STREAM not asked
            out.append(Probe(True, pending, int(lag), int(g.get(b"entries-read") or 0),
                             delivered, consumers=int(g.get(b"consumers") or 0), full=False))
            continue
        if i not in infos:  # nothing new: the last generated ID is the last delivered one
            out.append(Probe(True, pending, 0, int(g.get(b"entries-read") or 0), delivered,
                             delivered, consumers=int(g.get(b"consumers") or 0)))
            continue
        info = infos[i]
        if isinstance(info, Exception):  # deleted between the two round trips
            out.append(Probe(False))
            continue
        info = as_map(info)
        last_entry, first_entry = info.get(b"last-entry"), info.get(b"first-entry")
        out.append(Probe(True, pending, None if lag is None else int(lag),
                         int(g.get(b"entries-read") or 0), delivered,
                         _opt_text(info[b"last-generated-id"]),
                         text(last_entry[0]) if last_entry else None,
                         text(first_entry[0]) if first_entry else None, int(info[b"length"]),
                         int(g.get(b"consumers") or 0)))
    return out


def news(ops: Sequence[ConsumerOps], after: Sequence[str]) -> set[str]:
    """The streams of ``ops`` with an entry after ``after`` (each stream's ID): one
    ``XREAD COUNT 1`` per :data:`NEWS_PER_XREAD` streams (on a cluster, whose commands' keys
    must share a slot, per slot), pipelined: one round trip per node, whatever their number,
    and no command long enough to hold up the server's other clients (one XREAD over 100,000
    streams is ~140 ms of its time). A missing stream has nothing after."""
    if not ops:
        return set()
    cluster = is_cluster(ops[0].redis)
    by_slot: dict[int, list[int]] = {}
    for i, op in enumerate(ops):
        by_slot.setdefault(key_slot(op.stream) if cluster else 0, []).append(i)
    groups = [g[k:k + NEWS_PER_XREAD] for g in by_slot.values()
              for k in range(0, len(g), NEWS_PER_XREAD)]
    with redis_errors(f"looking for new entries ({where(ops)})", ops[0].spec):
        replies = raise_first(pipeline(ops[0].redis, [
            ("XREAD", "COUNT", 1, "STREAMS", *(ops[i].stream for i in group),
             *(after[i] for i in group)) for group in groups]))
    found: set[str] = set()
    for reply in replies:
        if isinstance(reply, dict):
            found |= {text(k) for k in reply}
        else:
            found |= {text(item[0]) for item in reply or ()}
    return found


def stats(ops: Sequence[ConsumerOps]) -> list[GroupStats]:
    """Lag and pending of each stream's group (:func:`probe` in full, :meth:`Probe.stats`);
    ``None`` where Redis does not know.

    Progress only: a stream deleted or replaced since the last claim, or Redis unreachable
    past the client's retries (a restart, a failover), gives unknowns here; the next claim
    stops the query with the error that names what happened, if it still holds then."""
    try:
        return [p.stats() for p in probe(ops)]
    except EventBusConnectionError as exc:
        log.warning("spark-eventbus: progress of %s shows unknowns: %s", where(ops), exc)
        return [GroupStats(None, None, None) for _ in ops]


def available(ops: Sequence[ConsumerOps], need: int) -> list[int | None]:
    """How many new entries each group can read, counted up to ``need`` at least
    (``minEntriesPerTrigger``): the lag where the server knows it, else the entries after
    ``last-delivered-id`` counted with one bounded ``XRANGE`` (at most
    :data:`COUNT_AHEAD_MAX`); None when still unknown."""
    found = stats(ops)
    count = [i for i, s in enumerate(found) if s.lag is None and s.last_delivered is not None]
    out = [s.lag for s in found]
    if count and need <= COUNT_AHEAD_MAX:
        with redis_errors(f"counting new entries ({where(ops)})", ops[0].spec):
            ahead = raise_first(pipeline(ops[0].redis, [
                ("XRANGE", ops[i].stream, "(" + str(found[i].last_delivered), "+", "COUNT",
                 need) for i in count]))
        for i, got in zip(count, ahead, strict=True):
            out[i] = len(got or [])
    return out


def last_generated_ids(ops: Sequence[ConsumerOps]) -> list[str | None]:
    """Each stream's last generated ID (None: the stream does not exist), pipelined."""
    if not ops:
        return []
    with redis_errors(f"reading stream info ({where(ops)})", ops[0].spec):
        out: list[str | None] = []
        for info in pipeline(ops[0].redis, [("XINFO", "STREAM", op.stream) for op in ops]):
            if is_no_such_key(info, or_wrong_type=False):
                out.append(None)
            elif isinstance(info, Exception):
                raise info
            else:
                out.append(text(as_map(info)[b"last-generated-id"]))
    return out


