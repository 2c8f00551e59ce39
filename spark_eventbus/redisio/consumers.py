"""The driver's per-stream work for many streams at once: one pipelined round trip per node
(redis-py's cluster pipeline groups the commands by node), not one per stream. A quiet stream
then costs a few pipelined commands per batch: whether it has anything new or pending
(:func:`probe`), whether a claim plan exists (:func:`plans`), the committed batch's bookkeeping
(:func:`close_plans`), and the consumer lease's renewal (:func:`renew_leases`).

All the consumers passed share one connection spec (one query), so one client."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import EventBusConnectionError
from ..ids import StreamId
from ..keys import PREFIX, loss_key
from ..offsets import StreamBatch
from .base import ResponseError
from .boundary import redis_errors
from .client import ConnectionSpec, client, is_cluster
from .group import ConsumerOps, GroupStats
from .losses import settle_losses
from .scripts import is_noscript, queue_script
from .streams import text

log = logging.getLogger("spark_eventbus")


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

    @property
    def has_new(self) -> bool:
        """Entries were added after the group's last delivery (to claim, or lost to report)."""
        if not self.group or self.last_generated is None or self.last_delivered is None:
            return True
        return StreamId.parse(self.last_generated) > StreamId.parse(self.last_delivered)

    @property
    def has_pending(self) -> bool:
        return not self.group or self.pending is None or self.pending > 0

    def stats(self) -> GroupStats:
        """Progress: pending, lag and last delivered ID (``ConsumerOps.stats``'s rules: a
        non-zero lag with nothing after the last delivered ID is 0; an ``entries-read`` of 0
        after deliveries is an unknown lag)."""
        if not self.group:
            return GroupStats(None, None, None)
        lag = self.lag
        if lag and self.last_delivered is not None:
            last = StreamId.parse(self.last_delivered)
            if self.newest is None or StreamId.parse(self.newest) <= last:
                lag = 0
            elif not self.entries_read and last != StreamId(0, 0):
                # entries-read 0 after deliveries: untrustworthy, unless every entry still in
                # the stream is after the last delivered one (a group made at `earliest`
                # starts just before the first entry with entries-read 0): then all are lag
                lag = self.length if self.oldest is not None and self.length is not None \
                    and StreamId.parse(self.oldest) > last else None
        return GroupStats(self.pending, lag, self.last_delivered)


def _pipe(ops: Sequence[ConsumerOps]) -> Any:
    return ops[0].redis.pipeline(transaction=False)


def _where(ops: Sequence[ConsumerOps]) -> str:
    shown = ", ".join(repr(op.stream) for op in ops[:3])
    more = f" and {len(ops) - 3} more" if len(ops) > 3 else ""
    return f"streams {shown}{more}, group {ops[0].group!r}"


def probe(ops: Sequence[ConsumerOps]) -> list[Probe]:
    """Each stream's group state, pipelined: ``XINFO GROUPS`` and ``XINFO STREAM`` per stream."""
    if not ops:
        return []
    with redis_errors(f"reading group info ({_where(ops)})", ops[0].spec):
        pipe = _pipe(ops)
        for op in ops:
            pipe.xinfo_groups(op.stream)
            pipe.xinfo_stream(op.stream)
        replies = pipe.execute(raise_on_error=False)
        for reply in replies:
            if isinstance(reply, Exception) and not (
                    isinstance(reply, ResponseError)
                    and str(reply).startswith(("no such key", "WRONGTYPE"))):
                raise reply
    out = []
    for op, groups, info in zip(ops, replies[0::2], replies[1::2], strict=True):
        mine = None if isinstance(groups, Exception) else next(
            (g for g in groups if text(g["name"]) == op.group), None)
        if mine is None or isinstance(info, Exception):
            out.append(Probe(False))
            continue
        last_entry, first_entry = info.get("last-entry"), info.get("first-entry")
        lag = mine.get("lag")
        out.append(Probe(True, int(mine["pending"]), None if lag is None else int(lag),
                         int(mine.get("entries-read") or 0),
                         text(mine["last-delivered-id"]), text(info["last-generated-id"]),
                         text(last_entry[0]) if last_entry else None,
                         text(first_entry[0]) if first_entry else None, int(info["length"])))
    return out


def stats(ops: Sequence[ConsumerOps]) -> list[GroupStats]:
    """Progress of every stream in one pipelined round trip per node; unknowns when Redis stays
    unreachable past the client's retries (progress never fails a query)."""
    try:
        return [p.stats() for p in probe(ops)]
    except EventBusConnectionError as exc:
        log.warning("spark-eventbus: progress of %s shows unknowns: %s", _where(ops), exc)
        return [GroupStats(None, None, None) for _ in ops]


def plans(ops: Sequence[ConsumerOps], run: str, seq: int) -> list[StreamBatch]:
    """``ConsumerOps.load_plan`` of every stream; the streams without a plan for ``seq`` (the
    quiet ones) cost one pipelined ``HEXISTS`` each."""
    if not ops:
        return []
    with redis_errors(f"reading claim plans ({_where(ops)})", ops[0].spec):
        pipe = _pipe(ops)
        for op in ops:
            pipe.hexists(op.plan_key, str(seq))
        exists = pipe.execute()
    return [op.load_plan(run, seq) if there else StreamBatch()
            for op, there in zip(ops, exists, strict=True)]


def committed_plans(ops: Sequence[ConsumerOps], committed_seq: int
                    ) -> list[dict[str, dict[str, Any]]]:
    """``ConsumerOps.committed_plans`` of every stream, pipelined."""
    if not ops:
        return []
    with redis_errors(f"reading claim plans ({_where(ops)})", ops[0].spec):
        pipe = _pipe(ops)
        for op in ops:
            pipe.hgetall(op.plan_key)
        raw = pipe.execute()
    return [{text(f): json.loads(v) for f, v in r.items() if int(f) <= committed_seq}
            for r in raw]


def settle_all_losses(ops: Sequence[ConsumerOps], run: str, seq: int) -> tuple[int, int]:
    """``ConsumerOps.settle_losses`` of every stream; streams without loss records (nearly
    all) cost one pipelined ``PTTL`` each (-2: no such key; ``PTTL``, not ``EXISTS``, is in
    the streaming reader's ACL rule already). Returns the summed (entries, ranges)."""
    if not ops:
        return 0, 0
    with redis_errors(f"settling loss records ({_where(ops)})", ops[0].spec):
        pipe = _pipe(ops)
        for op in ops:
            pipe.pttl(loss_key(op.stream, op.group, op.consumer))
        found = pipe.execute()
        entries = ranges = 0
        for op, there in zip(ops, found, strict=True):
            if there != -2:
                e, r = settle_losses(op.redis, op.stream, op.group, op.consumer, run, seq)
                entries, ranges = entries + e, ranges + r
    return entries, ranges


def drop_plans(ops: Sequence[ConsumerOps], fields: Sequence[Sequence[str]]) -> None:
    """``ConsumerOps.drop_plans`` of every stream, pipelined."""
    todo = [(op, list(f)) for op, f in zip(ops, fields, strict=True) if f]
    if not todo:
        return
    with redis_errors(f"pruning claim plans ({_where(ops)})", ops[0].spec):
        pipe = _pipe(ops)
        for op, f in todo:
            pipe.hdel(op.plan_key, *f)
        pipe.execute()


def leases(ops: Sequence[ConsumerOps], mode: str, run: str, owner: str, ttl_ms: int
           ) -> list[tuple[str, str, int]]:
    """``ConsumerOps.lease`` on every stream: one pipeline on a single node; on a cluster one
    call per stream (a cluster pipeline cannot load a script a node lacks)."""
    if not ops:
        return []
    if is_cluster(ops[0].redis):
        return [op.lease(mode, run, owner, ttl_ms) for op in ops]
    where = f"checking the consumer leases ({_where(ops)})"
    replies: list[Any] = [None] * len(ops)
    todo = list(range(len(ops)))
    for attempt in range(2):
        with redis_errors(where, ops[0].spec):
            pipe = _pipe(ops)
            for i in todo:
                queue_script(ops[i].redis, "lease", [ops[i].lease_key],
                             [mode, run, owner, ttl_ms], pipe)
            for i, reply in zip(todo, pipe.execute(raise_on_error=False), strict=True):
                replies[i] = reply
        todo = [i for i in todo if is_noscript(replies[i])]
        if not todo:
            break
        if attempt == 0:  # not loaded yet (or flushed): one call loads it, then pipeline again
            replies[todo[0]] = ops[todo[0]].lease(mode, run, owner, ttl_ms)
            todo = todo[1:]
    out = []
    for op, reply in zip(ops, replies, strict=True):
        if is_noscript(reply):
            reply = op.lease(mode, run, owner, ttl_ms)
        elif isinstance(reply, Exception):
            with redis_errors(where, ops[0].spec):
                raise reply
        status, holder, pttl = reply
        out.append((text(status), text(holder), int(pttl)))
    return out


def discover(spec: ConnectionSpec, pattern: str, exclude: Sequence[str] = ()) -> list[str]:
    """The streams whose names match ``pattern`` (a Redis glob): ``SCAN MATCH … TYPE stream``,
    on every master of a cluster (redis-py's cluster ``scan_iter`` visits each), sorted. The
    connector's own keys (``{…}:eventbus:…``) and ``exclude`` (the dead-letter stream) never
    count."""
    r = client(spec)
    with redis_errors(f"looking for streams matching {pattern!r}", spec):
        found = {text(k) for k in r.scan_iter(match=pattern, count=1000, _type="stream")}
    own = f":{PREFIX}:"
    return sorted(k for k in found if k not in exclude
                  and not (k.startswith("{") and own in k))


def forget(ops: Sequence[ConsumerOps]) -> None:
    """Streams that left a pattern subscription (deleted): drop this consumer's claim plans,
    loss records and lease of each."""
    if not ops:
        return
    with redis_errors(f"dropping the bookkeeping of {_where(ops)}", ops[0].spec):
        pipe = _pipe(ops)
        for op in ops:
            pipe.delete(op.plan_key)
            pipe.delete(loss_key(op.stream, op.group, op.consumer))
            pipe.delete(op.lease_key)
        pipe.execute()
