"""Consumer-group operations of one consumer on one stream: group creation, the consumer
lease, claim plans, claims (``lua/claim.lua``, a client ``XREADGROUP``,
``lua/claim_record.lua``), reclaims (``lua/reclaim.lua``), acks, and group
stats. Driver side. Every method translates Redis errors (:func:`redis_errors`) naming the
stream and group."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .. import resp
from ..errors import ConfigError, EventBusConnectionError
from ..ids import StreamId
from ..keys import lease_key, plan_key
from ..offsets import ClaimedRange, StreamBatch
from ..planning import entries_within
from .base import CLUSTER_REDIRECTS, Redis, ResponseError
from .boundary import redis_errors
from .client import ConnectionSpec, client, is_cluster
from .deadletter import dead_letter, same_slot
from .retention import trim_acked
from .scripts import run_script
from .streams import (
    ACK_CHUNK,
    entry_sizes,
    key_type,
    read_entries,
    send_packed,
    stream_exists,
    text,
)
from .wire import is_no_such_key

log = logging.getLogger("spark_eventbus")

# IDs of claimed ranges kept on the driver (RESP-encoded, ~22 bytes each) so that acking a
# committed range is one plain XACK of its IDs instead of ack_range (XPENDING + XACK in Lua).
# Ranges beyond this budget, and ranges of plans left by an earlier driver, use ack_range.
ACK_ID_CACHE_BYTES = 64 * 1024 * 1024
# minEntriesPerTrigger where the server cannot tell the lag: entries counted with one XRANGE
COUNT_AHEAD_MAX = 10_000


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
    dead_lettered: int
    deleted: tuple[str, ...]
    # (id, deliveries) over maxDeliveries, left pending: their dead-letter stream is in another
    # cluster slot, so the caller moves them (redisio.deadletter)
    poison: tuple[tuple[str, int], ...] = ()
    bytes: int = 0  # of the taken entries (names + values)


@dataclass(frozen=True)
class GroupStats:
    pending: int | None
    lag: int | None  # None: unknown (Redis 7.0 after XDEL/trim, or Redis < 7)
    last_delivered: str | None


def checked_lag(lag: int | None, entries_read: int | None, last_delivered: str | None,
                newest: str | None, oldest: str | None = None, length: int | None = None
                ) -> int | None:
    """The server's ``lag``, checked against the positions the connector knows: the one lag
    rule (``ConsumerOps.stats`` and the pipelined probe's ``Probe.stats`` both apply it).

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


def _pairs(flat: list[Any]) -> tuple[tuple[str, int], ...]:
    return tuple((text(flat[i]), int(flat[i + 1])) for i in range(0, len(flat), 2))


def before_first_entry(r: Redis, stream: str) -> tuple[str, int]:
    """Where ``earliest`` puts a group: just before the first entry still in the stream (so
    entries trimmed long before are not reported as lost), and the entries-read count there."""
    if key_type(r, stream) == "none":
        return "0", 0
    return earliest_in(r.xinfo_stream(stream))


def earliest_in(info: dict[Any, Any]) -> tuple[str, int]:
    """:func:`before_first_entry` from the stream's ``XINFO STREAM`` reply."""
    first = info.get("first-entry")
    if not first:
        # Empty stream: everything after the last generated ID is new.
        return text(info["last-generated-id"]), int(info.get("entries-added", 0))
    first_id = StreamId.parse(first[0])
    added = info.get("entries-added")
    read = int(added) - int(info["length"]) if added is not None else 0
    return str(first_id.prev()), max(0, read)


def create_group_args(stream: str, group: str, starting_position: str,
                      earliest: tuple[str, int] | None) -> list[Any]:
    """``XGROUP CREATE … MKSTREAM`` at ``starting_position`` (``earliest``: where
    :func:`before_first_entry` puts it)."""
    args: list[Any] = ["XGROUP", "CREATE", stream, group]
    pos = starting_position
    if pos in ("latest", "$"):
        args.append("$")
    elif pos in ("earliest", "0"):
        start, entries_read = earliest or ("0", 0)
        args += [start, "MKSTREAM", "ENTRIESREAD", entries_read]
    else:
        args.append(pos)
    if "MKSTREAM" not in args:
        args.append("MKSTREAM")
    return args


class ConsumerOps:
    """Operations of one consumer (of one group) on one stream."""

    def __init__(self, spec: ConnectionSpec, stream: str, group: str, consumer: str,
                 cache_ack_ids: bool = False) -> None:
        self.spec = spec
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.plan_key = plan_key(stream, group, consumer)
        self.lease_key = lease_key(stream, group, consumer)
        self.redis = client(spec)
        self.raw = client(spec, raw_entries=True)  # XREADGROUP replies as hiredis gives them
        self.cache_ack_ids = cache_ack_ids
        self._ack_ids: dict[ClaimedRange, bytes] = {}  # claimed chunk -> its IDs, RESP bulk strings
        self._ack_ids_bytes = 0
        self._xack_args = resp.bulks([stream.encode(), group.encode()])
        # '<run> <owner>' while a ConsumerLease holds this consumer: claims and reclaims run
        # only while the lease is still that (lua/_lib.lua lease_fence); '' = unfenced.
        self.lease_token = ""

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        with redis_errors(f"{what} (stream {self.stream!r}, group {self.group!r})", self.spec):
            yield

    # -- setup ---------------------------------------------------------------------------------

    def ensure_group(self, starting_position: str) -> bool:
        """Create the group (and the stream, ``MKSTREAM``) if missing. Idempotent.

        Refuses a key that is not a stream. ``earliest`` starts just before the first entry
        still in the stream, so entries trimmed long before the group existed are not reported
        as lost. Returns True when this call created the group.
        """
        with self._errors("creating the consumer group"):
            if stream_exists(self.redis, self.stream,
                             f"Server: {self.spec.display}. Choose another 'stream' option."):
                for g in self.redis.xinfo_groups(self.stream):
                    if text(g["name"]) == self.group:
                        return False
            earliest = (before_first_entry(self.redis, self.stream)
                        if starting_position in ("earliest", "0") else None)
            args = create_group_args(self.stream, self.group, starting_position, earliest)
            try:
                self.redis.execute_command(*args)
            except ResponseError as exc:
                if "BUSYGROUP" in str(exc):  # another query created it meanwhile
                    return False
                if "ENTRIESREAD" in str(exc) or "syntax" in str(exc).lower():
                    # Redis < 7.0: no ENTRIESREAD (lag is then unknown anyway).
                    self.redis.execute_command(*args[: args.index("MKSTREAM") + 1])
                    return True
                raise
            return True

    # -- consumer lease ------------------------------------------------------------------------

    def lease(self, mode: str, run: str, owner: str, ttl_ms: int, heartbeat: bool = False,
              expected: str = "") -> tuple[str, str, int]:
        """Acquire, renew, release or steal (``expected``: the holder whose heartbeat expired)
        this consumer's lease (``lua/lease.lua``).

        Returns (status, holder, holder's remaining ms): status ``ok``, ``takeover``, ``held``
        or ``lost``; holder is ``'<run> <owner>'`` (``' hb'`` after it: a heartbeat lease) of
        the query that has it.
        """
        with self._errors("checking the consumer lease"):
            status, holder, pttl = run_script(self.redis, "lease", [self.lease_key],
                                              [mode, run, owner, ttl_ms,
                                               "hb" if heartbeat else "", expected])
        return text(status), text(holder), int(pttl)

    # -- claim plan ----------------------------------------------------------------------------

    def load_plan(self, run: str, seq: int) -> StreamBatch:
        """What was already claimed for batch (run, seq): pre-claimed, or left by a crash
        (a claim cut short between ``claim.lua`` and ``claim_record.lua`` is closed first)."""
        with self._errors("reading the claim plan"):
            raw = run_script(self.redis, "plan_load", [self.stream, self.plan_key],
                             [self.group, self.consumer, run, str(seq)])
        if not raw:
            return StreamBatch()
        plan = json.loads(raw)
        if plan.get("run") != run:
            return StreamBatch()
        return StreamBatch.from_json(plan)

    def claim(self, count: int, run: str, seq: int, stop_after: str | None,
              fail_on_loss: bool, bytes_left: int | None = None, batch_empty: bool = True
              ) -> ClaimResult:
        """Claim at most ``count`` new entries with one ``XREADGROUP >``, recorded in the plan.

        Three steps: ``claim.lua`` checks for lost entries and writes the claim's intent into
        the plan; this client runs the XREADGROUP (raw replies: no Lua table of the entries in
        Redis, no dict per entry here); ``claim_record.lua`` records the chunk. A driver killed
        in between leaves the intent, which the next plan read closes from this consumer's PEL.

        ``bytes_left`` (``maxBytesPerTrigger``): the entries after the group's position are
        sized first (one ``XRANGE``) and only those that fit are claimed
        (:func:`.planning.entries_within`; one oversized entry when ``batch_empty``).
        """
        with self._errors("claiming new entries"):
            res = run_script(self.redis, "claim", *self.claim_intent(run, seq, stop_after,
                                                                     fail_on_loss))
            self._check_fence(res)
            entries: list[Any] | None = None
            chunk = None
            if text(res[0]) == "read":
                if bytes_left is not None:
                    ahead = self.raw.execute_command("XRANGE", self.stream,
                                                     "(" + text(res[4]), "+", "COUNT", count)
                    count = entries_within(entry_sizes(ahead or []), bytes_left, batch_empty)
                entries = read_entries(self.raw.execute_command(
                    *self.xreadgroup(count))) if count > 0 else []
                chunk = self.claimed(entries)
                run_script(self.redis, "claim_record", *self.claim_record(run, seq, chunk))
            return self.claim_result(res, entries, chunk, count, bytes_left is not None)

    # The three steps of a claim, also run for many streams at once, pipelined
    # (:func:`.consumers.claim_many`).

    def claim_intent(self, run: str, seq: int, stop_after: str | None, fail_on_loss: bool
                     ) -> tuple[list[Any], list[Any]]:
        """KEYS and ARGV of ``claim.lua``: the claim's intent in the plan of batch ``seq``."""
        return ([self.stream, self.plan_key, self.lease_key],
                [self.group, self.consumer, run, str(seq), stop_after or "",
                 "fail" if fail_on_loss else "skip", self.lease_token])

    def xreadgroup(self, count: int) -> list[Any]:
        """The ``XREADGROUP >`` of a claim of ``count`` entries."""
        return ["XREADGROUP", "GROUP", self.group, self.consumer, "COUNT", count, "STREAMS",
                self.stream, ">"]

    def claimed(self, entries: list[Any]) -> ClaimedRange | None:
        """The chunk the ``XREADGROUP`` read (None: nothing); its IDs are kept for the ack."""
        if not entries:
            return None
        chunk = ClaimedRange(text(entries[0][0]), text(entries[-1][0]), len(entries))
        if self.cache_ack_ids and self._ack_ids_bytes < ACK_ID_CACHE_BYTES:
            packed = resp.bulks([e[0] for e in entries])
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

    def reclaim(self, cursor: str, count: int, min_idle_ms: int, run: str, seq: int,
                max_deliveries: int, dead_letter_stream: str | None, protect_from: int
                ) -> ReclaimResult:
        """One atomic XAUTOCLAIM pass of at most ``count`` entries (scans <= 10x that) into the
        plan of batch ``seq``; entries of plans ``>= protect_from`` are never taken."""
        with self._errors("reclaiming idle entries"):
            res = run_script(self.redis, "reclaim", *self.reclaim_call(
                cursor, count, min_idle_ms, run, seq, max_deliveries, dead_letter_stream,
                protect_from))
        return self.reclaim_result(res)

    def reclaim_call(self, cursor: str, count: int, min_idle_ms: int, run: str, seq: int,
                     max_deliveries: int, dead_letter_stream: str | None, protect_from: int
                     ) -> tuple[list[Any], list[Any]]:
        """KEYS and ARGV of ``reclaim.lua`` (:meth:`reclaim`)."""
        here = dead_letter_stream is not None and same_slot(self.redis, self.stream,
                                                             dead_letter_stream)
        return ([self.stream, self.plan_key, dead_letter_stream if here else self.stream,
                 self.lease_key],
                [self.group, self.consumer, min_idle_ms, cursor, count, run, str(seq),
                 max_deliveries, protect_from, "1" if here else "0", self.lease_token])

    def reclaim_result(self, res: list[Any]) -> ReclaimResult:
        """``reclaim.lua``'s reply; a lease another query took raises."""
        self._check_fence(res)
        next_cursor, flat, dead, deleted, poison, size = res
        return ReclaimResult(text(next_cursor), _pairs(flat), int(dead),
                             tuple(text(d) for d in deleted), _pairs(poison), int(size))

    def _check_fence(self, reply: list[Any]) -> None:
        if text(reply[0]) == "fenced":
            raise consumer_taken_over(self.consumer, self.group, self.stream, text(reply[1]))

    def dead_letter(self, dlq: str, entries: list[tuple[str, str, str]]) -> int:
        """Move ``entries`` (id, reason, deliveries) to ``dlq`` and ack them, exactly once
        (:func:`redisio.deadletter.dead_letter`); the number moved."""
        with self._errors(f"dead-lettering entries to {dlq!r}"):
            moved, _ = dead_letter(self.spec, self.stream, dlq, self.group, entries)
        return moved

    # -- acks ----------------------------------------------------------------------------------

    def ack(self, batch: StreamBatch) -> int:
        """XACK every entry of ``batch`` still pending for this consumer. Idempotent.

        Chunks whose IDs this process kept when it claimed them are acked with plain XACKs of
        those IDs, sent pre-encoded; the others with ack_range (which reads the IDs from this
        consumer's PEL).
        """
        known, packed = self.packed_acks(batch)
        acked = self._xack_known(packed) if known else None
        rest = batch.chunks if acked is None else [c for c in batch.chunks if c not in known]
        acked = acked or 0
        with self._errors("acking committed entries"):
            pipe = self.redis.pipeline(transaction=False)
            for chunk in rest:
                # A cluster pipeline cannot load a script a node lacks (NOSCRIPT after a
                # failover or reshard): run them one by one there.
                acked_now = run_script(self.redis, "ack_range", *self.ack_range(chunk),
                                       None if is_cluster(self.redis) else pipe)
                if is_cluster(self.redis):
                    acked += int(acked_now)
            for ids in self.reclaimed_acks(batch):
                pipe.xack(self.stream, self.group, *ids)
            for n in pipe.execute():
                acked += int(n)
        return acked

    def packed_acks(self, batch: StreamBatch) -> tuple[list[ClaimedRange], list[bytes]]:
        """The chunks of ``batch`` whose IDs this process kept, and one ``XACK stream group
        <ids>`` per chunk, packed as RESP from what the claim returned (no per-ID work in
        Python). The chunks leave the cache."""
        known = [c for c in batch.chunks if c in self._ack_ids]
        head = resp.bulk(b"XACK") + self._xack_args
        packed = [resp.array_header(c.count + 3) + head + self._ack_ids[c] for c in known]
        for c in known:
            self._ack_ids_bytes -= len(self._ack_ids.pop(c))
        return known, packed

    def ack_range(self, chunk: ClaimedRange) -> tuple[list[Any], list[Any]]:
        """KEYS and ARGV of ``ack_range.lua``: ack ``chunk`` from this consumer's PEL."""
        return [self.stream], [self.group, self.consumer, chunk.first, chunk.last]

    @staticmethod
    def reclaimed_acks(batch: StreamBatch) -> list[list[str]]:
        """The reclaimed IDs of ``batch`` in XACK calls of at most :data:`ACK_CHUNK`."""
        ids = [i for i, _ in batch.reclaimed]
        return [ids[k:k + ACK_CHUNK] for k in range(0, len(ids), ACK_CHUNK)]

    def _xack_known(self, packed: list[bytes]) -> int | None:
        """``packed`` XACKs (:meth:`packed_acks`) in one pipelined round trip, through the
        client's retries; None when Redis stays unreachable: ``ack`` then acks those chunks
        with ack_range (acks are idempotent)."""
        try:
            with self._errors("acking committed entries"):
                try:
                    replies = send_packed(self.redis, self.stream, packed)
                except CLUSTER_REDIRECTS:
                    return None  # the slot moved or is moving: ack_range follows it
        except EventBusConnectionError:
            return None
        return sum(int(n) for n in replies)

    # -- retention -----------------------------------------------------------------------------

    def trim_acked(self) -> int:
        """``trimAcked``: remove the entries every group of the stream has acked, in whole
        stream nodes (``XTRIM MINID ~``, bounded work; :func:`.retention.trim_acked`). The
        number removed."""
        with self._errors("trimming acked entries"):
            return trim_acked(self.redis, None, self.stream, exact=False).entries

    # -- progress ------------------------------------------------------------------------------

    def stats(self) -> GroupStats:
        """Lag and pending of the group (``XINFO GROUPS``); ``None`` where Redis does not know.

        Progress only: a stream deleted or replaced since the last claim, or Redis unreachable
        past the client's retries (a restart, a failover), gives unknowns here; the next claim
        stops the query with the error that names what happened, if it still holds then.
        """
        try:
            with self._errors("reading group info"):
                try:
                    groups = self.redis.xinfo_groups(self.stream)
                except ResponseError as exc:
                    if is_no_such_key(exc):
                        return GroupStats(None, None, None)
                    raise
                for g in groups:
                    if text(g["name"]) == self.group:
                        return GroupStats(int(g["pending"]), self._lag(g),
                                          text(g["last-delivered-id"]))
        except EventBusConnectionError as exc:
            log.warning("spark-eventbus: progress of stream %r shows unknowns: %s",
                        self.stream, exc)
            return GroupStats(None, None, None)
        return GroupStats(None, None, None)

    def available(self, need: int) -> int | None:
        """How many new entries the group can read, counted up to ``need`` at least
        (``minEntriesPerTrigger``): the lag where the server knows it, else the entries after
        ``last-delivered-id`` counted with one bounded ``XRANGE`` (at most
        :data:`COUNT_AHEAD_MAX`); None when still unknown."""
        stats = self.stats()
        if stats.lag is not None or stats.last_delivered is None:
            return stats.lag
        if need > COUNT_AHEAD_MAX:
            return None
        with self._errors("counting new entries"):
            return len(self.raw.execute_command("XRANGE", self.stream,
                                                "(" + stats.last_delivered, "+", "COUNT", need)
                       or [])

    def _lag(self, group: dict[str, Any]) -> int | None:
        """:func:`checked_lag` of ``group`` (an ``XINFO GROUPS`` entry), with the stream's ends
        read here: one ``XREVRANGE`` for a non-zero lag, ``XRANGE`` and ``XLEN`` only where
        ``entries-read`` is 0 after deliveries."""
        lag = group.get("lag")
        if lag is None or int(lag) == 0:
            return None if lag is None else 0
        delivered = text(group["last-delivered-id"])
        entries_read = int(group.get("entries-read") or 0)
        try:
            newest = self.redis.xrevrange(self.stream, count=1)
        except ResponseError:  # e.g. an ACL rule from before this check (no +xrevrange)
            return int(lag)
        newest_id = text(newest[0][0]) if newest else None
        oldest_id: str | None = None
        length: int | None = None
        if newest_id is not None and StreamId.parse(newest_id) > StreamId.parse(delivered) \
                and not entries_read and delivered != "0-0":
            try:
                oldest = self.redis.xrange(self.stream, count=1)
                oldest_id = text(oldest[0][0]) if oldest else None
                if oldest_id is not None and StreamId.parse(oldest_id) > StreamId.parse(
                        delivered):
                    length = int(self.redis.xlen(self.stream))
            except ResponseError:
                pass
        return checked_lag(int(lag), entries_read, delivered, newest_id, oldest_id, length)
