"""The vocabulary of one consumer (of one group) on one stream, and group creation.

:class:`ConsumerOps` holds what a stream's consumer is (keys, lease token, the IDs of the
chunks it claimed, kept for their acks) and builds each command and script call the
concern modules send; it sends nothing itself. Each concern takes a list of them and is
written once, pipelined per node — a single stream is a list of one:

* :func:`ensure_groups` here — group creation (``startingPosition``);
* :mod:`.claims` — claims and reclaims (and poison entries to the dead-letter stream);
* :mod:`.acks` — acks; :mod:`.plans` — claim plans and loss records;
* :mod:`.probes` — group state, news, lag; :mod:`.leases` — consumer leases, heartbeat;
* :mod:`.discovery` — the streams of a pattern.

Driver side. Errors are translated (:func:`redis_errors`) naming the streams and group
(:func:`where`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core import resp
from ..core.capabilities import streams_too_old
from ..core.ids import StreamId
from ..core.keys import consumer_keys
from ..core.offsets import ClaimedRange, StreamBatch
from ..errors import ConfigError
from .base import Redis, ResponseError
from .boundary import redis_errors
from .client import ConnectionSpec, client
from .streams import (
    entry_sizes,
    is_stream_kind,
    key_type,
    stream_exists,
    text,
    xack_commands,
)
from .wire import Packed, as_map, pipeline, raise_unless_missing

log = logging.getLogger("spark_eventbus")

# IDs of claimed ranges kept on the driver (RESP-encoded, ~22 bytes each) so that acking a
# committed range is one XACK of its IDs; ranges beyond this budget, and ranges of plans left
# by an earlier driver, read their IDs from the consumer's PEL first (:mod:`.acks`).
ACK_ID_CACHE_BYTES = 64 * 1024 * 1024


def consumer_taken_over(consumer: str, group: str, stream: str, holder: str) -> ConfigError:
    """The error of a query whose consumer lease another query holds now (``holder``:
    ``'<run> <owner>'``): it was not renewed for longer than its TTL."""
    return ConfigError(
        f"option 'consumer' = {consumer!r} of group {group!r} on stream {stream!r} was taken "
        f"over by another query (checkpoint run {holder.split(' ')[0]}) while this one could "
        "not renew its lease; this query stops so that the two do not share pending entries. "
        "Give each concurrent query its own .option('consumer', …).")


@dataclass(frozen=True)
class ClaimResult:
    status: str  # ok, empty, full (the next entry exceeds the byte bound), done, loss, nogroup
    chunk: ClaimedRange | None
    lost_after: str  # entries after this ID ...
    lost_before: str  # ... and before this one ('' unknown; '(' prefix: up to and including)
    lost_count: int  # -1: unknown
    bytes: int = 0  # of the chunk's entries (names + values)


@dataclass(frozen=True)
class ReclaimResult:
    cursor: str
    taken: tuple[tuple[str, int], ...]
    deleted: tuple[str, ...]
    # (id, deliveries) over maxDeliveries, left pending for the caller to move to the
    # dead-letter stream (redisio.deadletter)
    poison: tuple[tuple[str, int], ...] = ()
    bytes: int = 0  # of the taken entries (names + values)


def _pairs(flat: list[Any]) -> tuple[tuple[str, int], ...]:
    return tuple((text(flat[i]), int(flat[i + 1])) for i in range(0, len(flat), 2))


def before_first_entry(r: Redis, stream: str) -> tuple[str, int]:
    """Where ``earliest`` puts a group: just before the first entry still in the stream (so
    entries trimmed long before are not reported as lost), and the entries-read count there."""
    if key_type(r, stream) == "none":
        return "0", 0
    return earliest_in(r.xinfo_stream(stream))


def earliest_in(info: dict[Any, Any], whole_at_zero: bool = False) -> tuple[str, int]:
    """:func:`before_first_entry` from the stream's ``XINFO STREAM`` reply. ``whole_at_zero``
    (the reader's own groups): a stream nothing was ever removed from gets its group at its
    start, 0-0, where the group reads the same entries. A group there tells at once that it
    has delivered nothing; one just before the first entry with entries-read 0 looks like
    Redis 7.0's stale count after a trim (:attr:`.probes.Probe.lag_unsure`), so each progress
    report asked ``XINFO STREAM`` of every such stream until its first claim."""
    first = info.get("first-entry")
    if not first:
        # Empty stream: everything after the last generated ID is new.
        return text(info["last-generated-id"]), int(info.get("entries-added", 0))
    first_id = StreamId.parse(first[0])
    added = info.get("entries-added")
    read = int(added) - int(info["length"]) if added is not None else 0
    if whole_at_zero and read <= 0 and added is not None:
        return "0", 0
    return str(first_id.prev()), max(0, read)


def is_earliest(position: str) -> bool:
    """Whether a parsed ``startingPosition`` (or a CLI position) means the stream's start."""
    return position in ("earliest", "0")


def position_args(position: str, earliest: tuple[str, int] | None) -> list[Any]:
    """Where ``position`` (a parsed ``startingPosition``: latest, earliest, or an ID to start
    after) puts a group, as ``XGROUP CREATE``/``SETID`` arguments: ``$``; just before the first
    entry still in the stream with its entries-read count (``earliest``: what
    :func:`before_first_entry` says; the lag is then exact); or the ID. The one place these
    positions are mapped."""
    if position in ("latest", "$"):
        return ["$"]
    if is_earliest(position):
        start, entries_read = earliest or ("0", 0)
        return [start, "ENTRIESREAD", entries_read]
    return [position]


def xgroup(r: Redis, args: list[Any], server: str = "") -> None:
    """``XGROUP CREATE``/``SETID`` ``args`` through the client; a server whose ``XGROUP`` has
    no ``ENTRIESREAD`` (a syntax error: older than Redis 7.0) is refused."""
    try:
        r.execute_command(*args)
    except ResponseError as exc:
        refused = str(exc).lower()
        if "ENTRIESREAD" in args and any(m in refused for m in (
                "syntax", "unknown subcommand", "wrong number of arguments")):
            raise streams_too_old(server, "XGROUP has no ENTRIESREAD") from exc
        raise


def create_group_args(stream: str, group: str, starting_position: str,
                      earliest: tuple[str, int] | None) -> list[Any]:
    """``XGROUP CREATE … MKSTREAM`` at ``starting_position`` (:func:`position_args`)."""
    at, *rest = position_args(starting_position, earliest)
    return ["XGROUP", "CREATE", stream, group, at, "MKSTREAM", *rest]


class ConsumerOps:
    """Operations of one consumer (of one group) on one stream."""

    def __init__(self, spec: ConnectionSpec, stream: str, group: str, consumer: str,
                 cache_ack_ids: bool = False, delete_acked: bool = False) -> None:
        self.spec = spec
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.plan_key, self.lease_key, self.loss_key = consumer_keys(stream, group, consumer)
        self.redis = client(spec)
        self.cache_ack_ids = cache_ack_ids
        self._ack_ids: dict[ClaimedRange, bytes] = {}  # claimed chunk -> its IDs, RESP bulk strings
        self._ack_ids_bytes = 0
        self._xack_args = resp.bulks([stream.encode(), group.encode()])
        # acks as XACKDEL … ACKED (Redis >= 8.2): an entry every group has acked is deleted
        self.delete_acked = delete_acked
        # '<run> <owner>' while a ConsumerLease holds this consumer: claims and reclaims run
        # only while the lease is still that (lua/_lib.lua lease_fence); '' = unfenced.
        self.lease_token = ""

    # -- claims (:mod:`.claims` sends them) ----------------------------------------------------

    def claim_intent(self, run: str, seq: int, stop_after: str | None, fail_on_loss: bool
                     ) -> tuple[list[Any], list[Any]]:
        """KEYS and ARGV of ``claim.lua``: the claim's intent in the plan of batch ``seq``."""
        return ([self.stream, self.plan_key, self.lease_key],
                [self.group, self.consumer, run, str(seq), stop_after or "",
                 "fail" if fail_on_loss else "skip", self.lease_token])

    def claim_read(self, run: str, seq: int, stop_after: str | None, fail_on_loss: bool,
                   count: int) -> tuple[list[Any], list[Any]]:
        """KEYS and ARGV of ``claim_read.lua``: a claim of at most ``count`` entries in one
        step, recorded in the plan of batch ``seq``."""
        keys, args = self.claim_intent(run, seq, stop_after, fail_on_loss)
        return keys, [*args, count]

    def xreadgroup(self, count: int) -> list[Any]:
        """The ``XREADGROUP >`` of a claim of ``count`` entries."""
        return ["XREADGROUP", "GROUP", self.group, self.consumer, "COUNT", count, "STREAMS",
                self.stream, ">"]

    def claimed(self, ids: list[Any]) -> ClaimedRange | None:
        """The chunk of the claimed IDs ``ids``, in order (None: nothing); they are kept for
        the ack."""
        if not ids:
            return None
        chunk = ClaimedRange(text(ids[0]), text(ids[-1]), len(ids))
        if self.cache_ack_ids and self._ack_ids_bytes < ACK_ID_CACHE_BYTES:
            packed = resp.bulks(ids)
            self._ack_ids[chunk] = packed
            self._ack_ids_bytes += len(packed)
        return chunk

    def claim_record(self, run: str, seq: int, chunk: ClaimedRange | None
                     ) -> tuple[list[Any], list[Any]]:
        """KEYS and ARGV of ``claim_record.lua``: ``chunk`` recorded in the plan."""
        bounds = [chunk.first, chunk.last, chunk.count] if chunk else ["", "", 0]
        return ([self.stream, self.plan_key],
                [self.group, self.consumer, run, str(seq), *bounds])

    @staticmethod
    def claim_result(intent: list[Any], entries: list[Any] | None, chunk: ClaimedRange | None,
                     count: int, sized: bool) -> ClaimResult:
        """The outcome of a claim: ``intent`` is ``claim.lua``'s reply, ``entries`` what the
        ``XREADGROUP`` of ``count`` read (None: not run), ``chunk`` their range
        (:meth:`claimed`)."""
        status, lost_after, lost_before, lost_count = (text(x) for x in intent[:4])
        size = 0
        if entries is not None:
            size = sum(entry_sizes(entries)) if sized and entries else 0
            status = "ok" if chunk else ("full" if count == 0 else "empty")
        return ClaimResult(status, chunk, lost_after, lost_before, int(lost_count), size)

    def claim_read_result(self, reply: list[Any]) -> ClaimResult:
        """``claim_read.lua``'s reply (a lease another query took raises): its chunk, whose IDs
        are kept for the ack (:meth:`claimed`)."""
        self.check_fence(reply)
        status, lost_after, lost_before, lost_count = (text(x) for x in reply[:4])
        chunk = None
        if status == "read":
            chunk = self.claimed(reply[4])
            status = "ok" if chunk else "empty"
        return ClaimResult(status, chunk, lost_after, lost_before, int(lost_count))

    # -- reclaims ------------------------------------------------------------------------------

    def reclaim_call(self, cursor: str, count: int, min_idle_ms: int, run: str, seq: int,
                     max_deliveries: int, protect_from: int) -> tuple[list[Any], list[Any]]:
        """KEYS and ARGV of ``reclaim.lua``: one XAUTOCLAIM pass of at most ``count`` entries
        (scans <= 10x that) into the plan of batch ``seq``; entries of plans ``>= protect_from``
        are never taken."""
        return ([self.stream, self.plan_key, self.lease_key],
                [self.group, self.consumer, min_idle_ms, cursor, count, run, str(seq),
                 max_deliveries, protect_from, self.lease_token])

    def reclaim_result(self, res: list[Any]) -> ReclaimResult:
        """``reclaim.lua``'s reply; a lease another query took raises."""
        self.check_fence(res)
        next_cursor, flat, deleted, poison, size = res
        return ReclaimResult(text(next_cursor), _pairs(flat), tuple(text(d) for d in deleted),
                             _pairs(poison), int(size))

    def check_fence(self, reply: list[Any]) -> None:
        """A claim script's reply ``fenced``: another query holds this consumer now."""
        if text(reply[0]) == "fenced":
            raise consumer_taken_over(self.consumer, self.group, self.stream, text(reply[1]))

    # -- acks (:mod:`.acks` sends them) ----------------------------------------------------------

    def packed_acks(self, batch: StreamBatch) -> tuple[list[ClaimedRange], list[Packed]]:
        """The chunks of ``batch`` whose IDs this process kept, and one ``XACK stream group
        <ids>`` per chunk, packed as RESP from what the claim returned (no per-ID work in
        Python). The chunks leave the cache."""
        known = [c for c in batch.chunks if c in self._ack_ids]
        if self.delete_acked:  # XACKDEL stream group ACKED IDS <n> <ids>
            packed = [Packed(self.stream, resp.array_header(c.count + 6) + resp.bulk(b"XACKDEL")
                             + self._xack_args + resp.bulks([b"ACKED", b"IDS", b"%d" % c.count])
                             + self._ack_ids[c]) for c in known]
        else:
            head = resp.bulk(b"XACK") + self._xack_args
            packed = [Packed(self.stream, resp.array_header(c.count + 3) + head
                             + self._ack_ids[c]) for c in known]
        for c in known:
            self._ack_ids_bytes -= len(self._ack_ids.pop(c))
        return known, packed

    def ack_commands(self, ids: Sequence[str]) -> list[tuple[Any, ...]]:
        """The acks of ``ids`` (:func:`.streams.xack_commands`; with ``delete_acked``, as
        ``XACKDEL … ACKED``)."""
        return xack_commands(self.stream, self.group, ids, delete=self.delete_acked)

    def pending_in(self, chunk: ClaimedRange) -> tuple[Any, ...]:
        """``XPENDING`` of this consumer's entries in ``chunk``: all of them, as one
        ``XREADGROUP`` read the range whole (no entry can join it later), so at most
        ``chunk.count``."""
        return ("XPENDING", self.stream, self.group, chunk.first, chunk.last,
                max(chunk.count, 1), self.consumer)

    # -- plans (:mod:`.plans` sends it) -------------------------------------------------------

    def plan_load(self, run: str, seq: int) -> tuple[list[Any], list[Any]]:
        """KEYS and ARGV of ``plan_load.lua``: what was already claimed for batch (run, seq);
        a claim cut short between ``claim.lua`` and ``claim_record.lua`` is closed first."""
        return ([self.stream, self.plan_key], [self.group, self.consumer, run, str(seq)])

    # -- leases (:mod:`.leases` sends it) ------------------------------------------------------

    def lease_call(self, mode: str, run: str, owner: str, ttl_ms: int,
                   expected: str = "") -> tuple[list[Any], list[Any]]:
        """KEYS and ARGV of ``lease.lua``: acquire, renew, release or steal (``expected``: the
        holder whose heartbeat expired) this consumer's lease."""
        return ([self.lease_key], [mode, run, owner, ttl_ms, expected])



def where(ops: Sequence[ConsumerOps]) -> str:
    """The streams and group of ``ops``, for an error message."""
    if len(ops) == 1:
        return f"stream {ops[0].stream!r}, group {ops[0].group!r}"
    shown = ", ".join(repr(op.stream) for op in ops[:3])
    more = f" and {len(ops) - 3} more" if len(ops) > 3 else ""
    return f"streams {shown}{more}, group {ops[0].group!r}"


def ensure_groups(ops: Sequence[ConsumerOps], positions: Sequence[str]) -> list[bool]:
    """Create each stream's group (and the stream, ``MKSTREAM``) where missing, at its
    position (``positions``: a parsed ``startingPosition`` per op), in three pipelined round
    trips per node (key types and groups; where a group is made at ``earliest``, the streams'
    first entries; the ``XGROUP CREATE``s). Idempotent; True where this call created the
    group.

    Refuses a key that is not a stream. ``earliest`` starts just before the first entry still
    in the stream, so entries trimmed long before the group existed are not reported as lost.
    """
    if not ops:
        return []
    spec = ops[0].spec
    with redis_errors(f"creating consumer groups ({where(ops)})", spec):
        replies = pipeline(ops[0].redis, [c for op in ops for c in (
            ("TYPE", op.stream), ("XINFO", "GROUPS", op.stream))])
        todo: list[ConsumerOps] = []
        position = {op.stream: at for op, at in zip(ops, positions, strict=True)}
        for op, kind, groups in zip(ops, replies[0::2], replies[1::2], strict=True):
            if isinstance(kind, Exception):
                raise kind
            exists = is_stream_kind(op.stream, text(kind), f"Server: {spec.display}. Choose "
                                    "another 'stream' option.")
            if exists and isinstance(groups, Exception):
                raise groups
            if not exists or not any(text(as_map(g)[b"name"]) == op.group for g in groups):
                todo.append(op)
        earliest: dict[str, tuple[str, int]] = {}
        at_start = [op for op in todo if is_earliest(position[op.stream])]
        if at_start:
            infos = pipeline(ops[0].redis, [("XINFO", "STREAM", op.stream) for op in at_start])
            raise_unless_missing(infos)
            for op, info in zip(at_start, infos, strict=True):
                earliest[op.stream] = ("0", 0) if isinstance(info, Exception) \
                    else earliest_in({text(k): v for k, v in as_map(info).items()}, True)
        if not todo:
            return [False] * len(ops)
        created = pipeline(ops[0].redis, [
            create_group_args(op.stream, op.group, position[op.stream],
                              earliest.get(op.stream))
            for op in todo])
        made = set()
        for op, reply in zip(todo, created, strict=True):
            # BUSYGROUP: another query made it meanwhile; another error (a key replaced
            # meanwhile, a cluster slot on the move, a server without ENTRIESREAD): that
            # stream is done again the one-stream way, which knows what to do
            if not isinstance(reply, Exception) or (
                    "BUSYGROUP" not in str(reply) and _create_one(op, position[op.stream])):
                made.add(op.stream)
    return [op.stream in made for op in ops]


def _create_one(op: ConsumerOps, starting_position: str) -> bool:
    """:func:`ensure_groups` of one stream, command by command through the client (its
    retries; a cluster client's slot refresh), for a stream whose pipelined ``XGROUP CREATE``
    failed: the key checked again. True when this call created the group."""
    spec = op.spec
    if stream_exists(op.redis, op.stream, f"Server: {spec.display}. Choose another 'stream' "
                     "option."):
        for g in op.redis.xinfo_groups(op.stream):
            if text(g["name"]) == op.group:
                return False
    earliest = (before_first_entry(op.redis, op.stream)
                if is_earliest(starting_position) else None)
    args = create_group_args(op.stream, op.group, starting_position, earliest)
    try:
        xgroup(op.redis, args, spec.display)
    except ResponseError as exc:
        if "BUSYGROUP" in str(exc):  # another query created it meanwhile
            return False
        raise
    return True
