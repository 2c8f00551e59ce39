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
from ..keys import PREFIX, alive_key, loss_key
from ..offsets import ClaimedRange, StreamBatch
from .boundary import redis_errors
from .client import ConnectionSpec, client, is_cluster
from .group import (
    ClaimResult,
    ConsumerOps,
    GroupStats,
    ReclaimResult,
    checked_lag,
    create_group_args,
    earliest_in,
)
from .losses import settle_losses
from .scripts import run_scripts
from .streams import is_stream_kind, read_entries, send_packed, text
from .wire import is_no_such_key, pipeline

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
    def has_pending(self) -> bool:
        return not self.group or self.pending is None or self.pending > 0

    def stats(self) -> GroupStats:
        """Progress: pending, lag (:func:`.group.checked_lag`) and last delivered ID."""
        if not self.group:
            return GroupStats(None, None, None)
        lag = self.lag
        if self.full:  # else the stream's ends were not read: the server's lag as it is
            lag = checked_lag(lag, self.entries_read, self.last_delivered, self.newest,
                              self.oldest, self.length)
        return GroupStats(self.pending, lag, self.last_delivered)


def _pipe(ops: Sequence[ConsumerOps]) -> Any:
    return ops[0].redis.pipeline(transaction=False)


def _where(ops: Sequence[ConsumerOps]) -> str:
    shown = ", ".join(repr(op.stream) for op in ops[:3])
    more = f" and {len(ops) - 3} more" if len(ops) > 3 else ""
    return f"streams {shown}{more}, group {ops[0].group!r}"


def _map(reply: Any) -> dict[bytes, Any]:
    """A RESP3 map reply as it comes (a dict), or a RESP2 flat list of pairs as one."""
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[0::2], reply[1::2], strict=True))


def _checked(replies: list[Any]) -> list[Any]:
    """``replies`` of :func:`.streams.pipeline`; the first error among them raised."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _opt_text(value: Any) -> str | None:
    return None if value is None else text(value)


def _raise_unless_missing(replies: list[Any]) -> None:
    for reply in replies:
        if isinstance(reply, Exception) and not is_no_such_key(reply):
            raise reply


def probe(ops: Sequence[ConsumerOps], full: bool = True) -> list[Probe]:
    """Each stream's group state, pipelined: ``XINFO GROUPS`` of every stream, then
    ``XINFO STREAM`` of those whose group has something to read (a ``lag`` other than 0; not
    ``full``: only where the lag is unknown, enough to decide where to claim). A quiet stream
    costs one command. Replies are read as they come (no redis-py reply callbacks: with
    thousands of streams those cost more than the round trip)."""
    if not ops:
        return []
    with redis_errors(f"reading group info ({_where(ops)})", ops[0].spec):
        replies = pipeline(ops[0].redis, [("XINFO", "GROUPS", op.stream) for op in ops])
        _raise_unless_missing(replies)
        mine: list[dict[bytes, Any] | None] = []
        for op, groups in zip(ops, replies, strict=True):
            name = op.group.encode()
            mine.append(None if isinstance(groups, Exception) else next(
                (g for g in map(_map, groups) if g[b"name"] == name), None))
        # lag 0: the group has read every entry ever added (Redis's own count); None:
        # unknown (Redis 7.0 after XDEL or a trim), so the stream is looked at
        ask = [i for i, g in enumerate(mine) if g is not None and g.get(b"lag") != 0
               and (full or g.get(b"lag") is None)]
        infos: dict[int, Any] = {}
        if ask:
            got = pipeline(ops[0].redis, [("XINFO", "STREAM", ops[i].stream) for i in ask])
            _raise_unless_missing(got)
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
        info = _map(info)
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
    ``XREAD COUNT 1`` over all of them, whatever their number (single node: on a cluster the
    keys of one command must share a slot, and redis-py looks each command's keys up with a
    round trip of its own). A missing stream has nothing after."""
    if not ops:
        return set()
    with redis_errors(f"looking for new entries ({_where(ops)})", ops[0].spec):
        reply = _checked(pipeline(ops[0].redis, [
            ("XREAD", "COUNT", 1, "STREAMS", *(op.stream for op in ops), *after)]))[0]
    if isinstance(reply, dict):
        return {text(k) for k in reply}
    return {text(item[0]) for item in reply or ()}


def plans(ops: Sequence[ConsumerOps], run: str, seq: int) -> list[StreamBatch]:
    """``ConsumerOps.load_plan`` of every stream; the streams without a plan for ``seq`` (the
    quiet ones) cost one pipelined ``HEXISTS`` each."""
    if not ops:
        return []
    with redis_errors(f"reading claim plans ({_where(ops)})", ops[0].spec):
        exists = _checked(pipeline(ops[0].redis, [("HEXISTS", op.plan_key, str(seq))
                                                  for op in ops]))
    return [op.load_plan(run, seq) if there else StreamBatch()
            for op, there in zip(ops, exists, strict=True)]


def committed_plans(ops: Sequence[ConsumerOps], committed_seq: int
                    ) -> list[dict[str, dict[str, Any]]]:
    """Each stream's plans of batches Spark has committed (seq <= ``committed_seq``), by
    field, pipelined."""
    if not ops:
        return []
    with redis_errors(f"reading claim plans ({_where(ops)})", ops[0].spec):
        raw = _checked(pipeline(ops[0].redis, [("HGETALL", op.plan_key) for op in ops]))
    return [{text(f): json.loads(v) for f, v in _map(r).items() if int(f) <= committed_seq}
            for r in raw]


def settle_all_losses(ops: Sequence[ConsumerOps], run: str, seq: int) -> tuple[int, int]:
    """Batch ``seq`` of ``run`` is committed: drop every stream's loss records (and older
    ones), for ``lostEntries``; streams without loss records (nearly
    all) cost one pipelined ``PTTL`` each (-2: no such key; ``PTTL``, not ``EXISTS``, is in
    the streaming reader's ACL rule already). Returns the summed (entries, ranges)."""
    if not ops:
        return 0, 0
    with redis_errors(f"settling loss records ({_where(ops)})", ops[0].spec):
        found = _checked(pipeline(ops[0].redis, [
            ("PTTL", loss_key(op.stream, op.group, op.consumer)) for op in ops]))
        entries = ranges = 0
        for op, there in zip(ops, found, strict=True):
            if there != -2:
                e, r = settle_losses(op.redis, op.stream, op.group, op.consumer, run, seq)
                entries, ranges = entries + e, ranges + r
    return entries, ranges


def drop_plans(ops: Sequence[ConsumerOps], fields: Sequence[Sequence[str]]) -> None:
    """Delete plans, pipelined: the offsets in Spark's checkpoint cover those batches now."""
    todo = [(op, list(f)) for op, f in zip(ops, fields, strict=True) if f]
    if not todo:
        return
    with redis_errors(f"pruning claim plans ({_where(ops)})", ops[0].spec):
        _checked(pipeline(todo[0][0].redis, [("HDEL", op.plan_key, *f) for op, f in todo]))


def leases(ops: Sequence[ConsumerOps], mode: str, run: str, owner: str, ttl_ms: int,
           heartbeat: bool = False) -> list[tuple[str, str, int]]:
    """``ConsumerOps.lease`` on every stream, pipelined per node."""
    if not ops:
        return []
    with redis_errors(f"checking the consumer leases ({_where(ops)})", ops[0].spec):
        replies = run_scripts(ops[0].redis, "lease", [
            ([op.lease_key], [mode, run, owner, ttl_ms, "hb" if heartbeat else ""])
            for op in ops])
    return [(text(status), text(holder), int(pttl)) for status, holder, pttl in replies]


def heartbeat(spec: ConnectionSpec, owner: str, ttl_ms: int) -> bool:
    """Query ``owner`` is alive for ``ttl_ms`` more (``keys.alive_key``). False: its heartbeat
    had expired (another query may have taken its leases over meanwhile)."""
    with redis_errors("renewing the consumer leases' heartbeat", spec):
        return client(spec).set(alive_key(owner), "1", px=ttl_ms, get=True) is not None


def heartbeat_ms(spec: ConnectionSpec, owner: str) -> int:
    """How long query ``owner``'s heartbeat has left (-2: it has none: dead)."""
    with redis_errors("reading a consumer lease's heartbeat", spec):
        return int(client(spec).pttl(alive_key(owner)))


def stop_heartbeat(spec: ConnectionSpec, owner: str) -> None:
    with redis_errors("removing the consumer leases' heartbeat", spec):
        client(spec).delete(alive_key(owner))


def ensure_groups(ops: Sequence[ConsumerOps], starting_position: str) -> list[bool]:
    """``ConsumerOps.ensure_group`` of every stream in three pipelined round trips per node
    (key types and groups; where a group is made at ``earliest``, the streams' first entries;
    the ``XGROUP CREATE``s). True where this call created the group."""
    if not ops:
        return []
    spec = ops[0].spec
    with redis_errors(f"creating consumer groups ({_where(ops)})", spec):
        replies = pipeline(ops[0].redis, [c for op in ops for c in (
            ("TYPE", op.stream), ("XINFO", "GROUPS", op.stream))])
        todo: list[ConsumerOps] = []
        for op, kind, groups in zip(ops, replies[0::2], replies[1::2], strict=True):
            if isinstance(kind, Exception):
                raise kind
            exists = is_stream_kind(op.stream, text(kind), f"Server: {spec.display}. Choose "
                                    "another 'stream' option.")
            if exists and isinstance(groups, Exception):
                raise groups
            if not exists or not any(text(_map(g)[b"name"]) == op.group for g in groups):
                todo.append(op)
        earliest: dict[str, tuple[str, int]] = {}
        if todo and starting_position in ("earliest", "0"):
            infos = pipeline(ops[0].redis, [("XINFO", "STREAM", op.stream) for op in todo])
            _raise_unless_missing(infos)
            for op, info in zip(todo, infos, strict=True):
                earliest[op.stream] = ("0", 0) if isinstance(info, Exception) \
                    else earliest_in({text(k): v for k, v in _map(info).items()})
        if not todo:
            return [False] * len(ops)
        created = pipeline(ops[0].redis, [
            create_group_args(op.stream, op.group, starting_position, earliest.get(op.stream))
            for op in todo])
        made = set()
        for op, reply in zip(todo, created, strict=True):
            # BUSYGROUP: another query made it meanwhile; another error (e.g. Redis < 7.0:
            # no ENTRIESREAD): the one-stream path knows what to do
            if not isinstance(reply, Exception) or (
                    "BUSYGROUP" not in str(reply) and op.ensure_group(starting_position)):
                made.add(op.stream)
    return [op.stream in made for op in ops]


def last_generated_ids(ops: Sequence[ConsumerOps]) -> list[str | None]:
    """Each stream's last generated ID (None: the stream does not exist), pipelined."""
    if not ops:
        return []
    with redis_errors(f"reading stream info ({_where(ops)})", ops[0].spec):
        out: list[str | None] = []
        for info in pipeline(ops[0].redis, [("XINFO", "STREAM", op.stream) for op in ops]):
            if is_no_such_key(info, or_wrong_type=False):
                out.append(None)
            elif isinstance(info, Exception):
                raise info
            else:
                out.append(text(_map(info)[b"last-generated-id"]))
    return out


@dataclass(frozen=True)
class ClaimAsk:
    """One stream's claim in a pipelined round (:func:`claim_many`)."""

    op: ConsumerOps
    count: int
    stop_after: str | None


def claim_many(asks: Sequence[ClaimAsk], run: str, seq: int, fail_on_loss: bool
               ) -> list[ClaimResult]:
    """``ConsumerOps.claim`` (without a byte bound) on many streams in three pipelined round
    trips per node: every ``claim.lua`` intent, then every ``XREADGROUP``, then every
    ``claim_record.lua``. Each stream's steps keep their order, so a driver killed in between
    leaves intents that the next plan read closes, stream by stream, as for one claim."""
    if not asks:
        return []
    ops = [a.op for a in asks]
    with redis_errors(f"claiming new entries ({_where(ops)})", ops[0].spec):
        intents = run_scripts(ops[0].redis, "claim", [
            a.op.claim_intent(run, seq, a.stop_after, fail_on_loss) for a in asks])
        for op, res in zip(ops, intents, strict=True):
            op._check_fence(res)
        reading = [i for i, res in enumerate(intents) if text(res[0]) == "read"]
        entries: list[list[Any] | None] = [None] * len(asks)
        chunks: list[ClaimedRange | None] = [None] * len(asks)
        if reading:
            read = pipeline(ops[0].raw, [asks[i].op.xreadgroup(asks[i].count)
                                         for i in reading])
            failed = [reply for reply in read if isinstance(reply, Exception)]
            done = []
            for i, reply in zip(reading, read, strict=True):
                if not isinstance(reply, Exception):
                    entries[i] = read_entries(reply)
                    chunks[i] = asks[i].op.claimed(entries[i] or [])
                    done.append(i)
            # the streams whose read went through are recorded before any failure is raised
            # (an open intent would be closed by the next plan read, but not left needlessly)
            run_scripts(ops[0].redis, "claim_record", [
                asks[i].op.claim_record(run, seq, chunks[i]) for i in done])
            if failed:
                raise failed[0]
    return [ConsumerOps.claim_result(res, got, chunk, a.count, False)
            for a, res, got, chunk in zip(asks, intents, entries, chunks, strict=True)]


@dataclass(frozen=True)
class ReclaimAsk:
    """One stream's reclaim page in a pipelined round (:func:`reclaim_many`)."""

    op: ConsumerOps
    cursor: str
    count: int


def reclaim_many(asks: Sequence[ReclaimAsk], min_idle_ms: int, run: str, seq: int,
                 max_deliveries: int, dead_letter_stream: str | None, protect_from: int
                 ) -> list[ReclaimResult]:
    """``ConsumerOps.reclaim`` of one page on many streams, pipelined per node."""
    if not asks:
        return []
    ops = [a.op for a in asks]
    with redis_errors(f"reclaiming idle entries ({_where(ops)})", ops[0].spec):
        replies = run_scripts(ops[0].redis, "reclaim", [
            a.op.reclaim_call(a.cursor, a.count, min_idle_ms, run, seq, max_deliveries,
                              dead_letter_stream, protect_from) for a in asks])
    return [a.op.reclaim_result(res) for a, res in zip(asks, replies, strict=True)]


def ack_many(pairs: Sequence[tuple[ConsumerOps, StreamBatch]]) -> int:
    """``ConsumerOps.ack`` of many streams' batches: on a single node, the XACKs of every
    chunk this process claimed in one round trip and the rest (``ack_range.lua``, reclaimed
    IDs) in one more; on a cluster, stream by stream. Idempotent; the number acked."""
    pairs = [(op, b) for op, b in pairs if b]
    if not pairs:
        return 0
    if len(pairs) == 1 or is_cluster(pairs[0][0].redis):
        return sum(op.ack(b) for op, b in pairs)
    ops = [op for op, _ in pairs]
    where = f"acking committed entries ({_where(ops)})"
    acked = 0
    rest: list[tuple[ConsumerOps, ClaimedRange]] = []
    packed: list[bytes] = []
    for op, batch in pairs:
        known, p = op.packed_acks(batch)
        packed += p
        rest += [(op, c) for c in batch.chunks if c not in known]
    if packed:
        try:
            with redis_errors(where, ops[0].spec):
                acked += sum(int(n) for n in send_packed(ops[0].redis, ops[0].stream, packed))
        except EventBusConnectionError:  # Redis stayed unreachable: ack_range, idempotent
            rest = [(op, c) for op, batch in pairs for c in batch.chunks]
    with redis_errors(where, ops[0].spec):
        if rest:
            acked += sum(int(n) for n in run_scripts(ops[0].redis, "ack_range", [
                op.ack_range(c) for op, c in rest]))
        pipe = _pipe(ops)
        for op, batch in pairs:
            for ids in op.reclaimed_acks(batch):
                pipe.xack(op.stream, op.group, *ids)
        acked += sum(int(n) for n in pipe.execute())
    return acked


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


def missing(ops: Sequence[ConsumerOps]) -> list[str]:
    """The streams of ``ops`` that do not exist (``TYPE`` is ``none``), pipelined."""
    if not ops:
        return []
    with redis_errors(f"checking streams ({_where(ops)})", ops[0].spec):
        kinds = _checked(pipeline(ops[0].redis, [("TYPE", op.stream) for op in ops]))
    return [op.stream for op, kind in zip(ops, kinds, strict=True) if text(kind) == "none"]


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
