"""Driver side of streaming reads: the claim and reclaim loops that fill one batch.

:class:`Claimer` moves entries into this query's consumer PEL, recording each step in the plan
of the batch being built (:mod:`.redisio.claims`, every stream's step of a round pipelined per
node): idle entries of other consumers first (``XAUTOCLAIM``, poison entries to the
dead-letter stream), then new ones (``XREADGROUP >``), each call bounded. How much to take
where is pure, in :mod:`.planning`; which batch, and when, is :mod:`.driver`'s. What it
composes: :class:`.probe_cache.ProbeCache` (where there is anything to take),
:class:`.ledger.BatchLedger` (what was written where, bytes left),
:class:`.loss_reports.LossReports` (``failOnDataLoss``).

One loop per kind of step, for one stream or ten thousand; under ``maxBytesPerTrigger`` it
runs stream by stream (the byte budget is shared in order, and each claim is sized against
what is left), otherwise every stream still taking is asked in the same round.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence

from ..core.ids import StreamId
from ..core.offsets import ClaimedRange, StreamBatch
from ..core.planning import (
    MIN_SHARE,
    claim_chunk_size,
    next_turn,
    share_budget,
    stream_grants,
    takes_turns,
)
from ..errors import EventBusError
from ..options.reader import ReaderOptions
from ..redisio import GROUP_GONE_FIX, ClaimResult, ConsumerOps, Probe, ReclaimResult, claims
from .ledger import BatchLedger
from .loss_reports import LossReports, SourceMetrics
from .probe_cache import ProbeCache

log = logging.getLogger("spark_eventbus")

# XAUTOCLAIM COUNT per script call: it scans at most 10x this many PEL entries.
RECLAIM_PAGE = 500
# ... under maxBytesPerTrigger: XAUTOCLAIM cannot bound bytes, so a reclaim page may pass the
# bound by up to this many entries (docs: the README's maxBytesPerTrigger).
RECLAIM_PAGE_BYTES_BOUND = 10


class Claimer:
    """Claims for the batches of one query run (driver; never pickled). Idempotent per batch:
    every claim script records what it took in the batch's plan in the same atomic step."""

    def __init__(self, options: ReaderOptions, ops: Mapping[str, ConsumerOps],
                 metrics: SourceMetrics) -> None:
        self.options = options
        self.ops = ops
        self.metrics = metrics
        self.stop_after: dict[str, str | None] | None = None  # AvailableNow: last ID per stream
        self.reclaim_cursor: dict[str, str] = {}
        self.reclaim_done: set[str] = set()  # AvailableNow: PEL scanned once
        self.reclaim_checked = False  # a reclaim has run (see reclaim_all)
        self.reclaim_skipped: dict[str, float] = {}  # since when a PEL was not scanned
        # claim_new, when streams take turns: the last stream served (the next turn starts
        # with the first stream with news listed after it)
        self.turn_after: str | None = None
        self.ledger = BatchLedger(options.max_bytes_per_trigger)
        self.reports = LossReports(options, metrics)
        self.probes = ProbeCache(options, ops, self.reports)

    def stop_at(self, last_ids: dict[str, str | None]) -> None:
        """``Trigger.AvailableNow``: claim nothing after these IDs (per stream; ``None``: the
        stream did not exist), and scan each PEL once more from its start."""
        self.stop_after = last_ids
        self.reclaim_done.clear()
        self.reclaim_cursor.clear()

    def deleted(self, names: Sequence[str]) -> None:
        """Streams deleted while subscribed (``streamPattern``): :meth:`LossReports.deleted`."""
        self.probes.forget(names)
        self.reports.deleted(names)

    def _took(self, name: str, claimed: int, reclaimed: int, last: str | None = None,
              since: int | None = None) -> None:
        """``since``: the probe generation when the claim was sent (ProbeCache.claimed)."""
        if reclaimed:
            self.probes.touched([name])
        elif claimed:  # the group's state after it follows from the probe and the claim
            self.probes.claimed(name, claimed, last, since)
        self.reports.took(name, claimed, reclaimed, last)

    def _stop_after(self, name: str) -> str | None:
        return self.stop_after.get(name) if self.stop_after is not None else None

    def fill(self, allowed: int | None, budget: int | None, run: str, seq: int,
             in_flight: Mapping[str, int] | None, stop: threading.Event | None = None
             ) -> tuple[dict[str, StreamBatch], list[Probe] | None]:
        """The one batch filler (``latestOffset`` and the pre-claim): reclaim, then claim new
        entries into batch ``seq`` within ``allowed`` (None: no bound; ``budget``: the batch's
        read limit, for chunk sizes), from one probe of every stream. Entries of the batch
        before (``seq - 1``: committed but not acked yet, or in flight) are never reclaimed.
        ``in_flight``: this consumer's own pending entries per stream (:meth:`reclaim_all`).
        Returns what was taken per stream and the probe (None: nothing was allowed)."""
        if allowed is not None and allowed <= 0:
            return {}, None
        probes = self.probes.probe()
        out: dict[str, StreamBatch] = {}
        for name, got in self.reclaim_all(allowed, run, seq, seq - 1, probes,
                                          in_flight).items():
            out[name] = got
            allowed = None if allowed is None else allowed - got.count
        if allowed is None or allowed > 0:
            for name, got in self.claim_new(allowed, budget, run, seq, stop, probes).items():
                out[name] = out.get(name, StreamBatch()) + got
        return out, probes

    # -- reclaims ------------------------------------------------------------------------------

    def reclaim_all(self, left: int | None, run: str, seq: int, protect_from: int,
                    probes: list[Probe] | None = None,
                    in_flight: Mapping[str, int] | None = None) -> dict[str, StreamBatch]:
        """Reclaim up to ``min(reclaimMaxEntries, left)`` entries, shared across streams.

        ``in_flight``: per stream, this consumer's own pending entries (the batch Spark is
        running, or the committed one not acked yet, and what is planned): a group whose
        pending count is no more than that has nothing else pending, so its stream is not
        scanned now (the next batch looks again; every stream is scanned at least every
        ``claimMinIdleMs``)."""
        o = self.options
        if not o.reclaim_enabled:
            return {}
        budget = o.reclaim_max_entries if left is None else min(o.reclaim_max_entries, left)
        # Only groups with pending entries have anything to reclaim (one pipelined probe); the
        # first stream is asked on the first pass whatever its state, so that a user whose ACL
        # rule lacks a command of the reclaim fails at the query's start, not on a first failure.
        now = time.monotonic()

        def only_mine(name: str, p: Probe) -> bool:
            """Nothing pending but this consumer's own entries in flight: not scanned, for at
            most claimMinIdleMs in a row (a count can be off: entries deleted after a claim
            are acked by the replay, so another consumer's could hide behind them)."""
            if in_flight is None or p.pending is None or p.pending > in_flight.get(name, 0):
                return False
            since = self.reclaim_skipped.setdefault(name, now)
            return (now - since) * 1000 < o.claim_min_idle_ms

        todo = [(name, op) for k, ((name, op), p) in enumerate(zip(
            self.ops.items(), self.probes.probe() if probes is None else probes, strict=True))
            if ((p.has_pending and not only_mine(name, p))
                or (k == 0 and not self.reclaim_checked))
            and name not in self.reclaim_done]
        for name, _ in todo:
            self.reclaim_skipped.pop(name, None)
        self.reclaim_checked = True
        grants = share_budget(budget, [budget] * len(todo))
        items = [(name, op, grant) for (name, op), grant in zip(todo, grants, strict=True)
                 if grant > 0]
        self.ledger.writes(run, seq, (name for name, _, _ in items))
        if o.max_bytes_per_trigger is None:
            return self._reclaim_rounds(items, run, seq, protect_from, RECLAIM_PAGE, False)
        out: dict[str, StreamBatch] = {}
        for item in items:  # the byte budget is shared in order: stream by stream
            out.update(self._reclaim_rounds([item], run, seq, protect_from,
                                            RECLAIM_PAGE_BYTES_BOUND, True))
        return out

    def _reclaim_rounds(self, items: Sequence[tuple[str, ConsumerOps, int]], run: str,
                        seq: int, protect_from: int, page: int, sized: bool
                        ) -> dict[str, StreamBatch]:
        """One page of every stream still taking per pipelined round, as long as it has more
        to scan and budget left (at most a few rounds per batch: every XAUTOCLAIM call is
        bounded server-side). ``sized``: one stream, stopped once the byte budget is used."""
        o = self.options
        taken: dict[str, list[tuple[str, int]]] = {name: [] for name, _, _ in items}
        rounds = {name: max(4, grant // page + 2) for name, _, grant in items}
        want = {name: grant for name, _, grant in items}
        active = [(name, op) for name, op, _ in items]
        while active:
            if sized:
                bytes_left, empty = self.ledger.bytes_left(run, seq)
                if bytes_left is not None and bytes_left <= 0 and not empty:
                    break
            asks = [claims.ReclaimAsk(op, self.reclaim_cursor.get(name, "0-0"),
                                      min(page, want[name] - len(taken[name])))
                    for name, op in active]
            results = claims.reclaim(asks, o.claim_min_idle_ms, run, seq, o.max_deliveries,
                                     protect_from)
            more = []
            for (name, op), res in zip(active, results, strict=True):
                taken[name] += res.taken
                rounds[name] -= 1
                if self._reclaimed(name, op, res, run, seq) and rounds[name] > 0 \
                        and len(taken[name]) < want[name]:
                    more.append((name, op))
            active = more
        return {name: StreamBatch((), tuple(t)) for name, t in taken.items() if t}

    def _reclaimed(self, name: str, op: ConsumerOps, res: ReclaimResult, run: str, seq: int
                   ) -> bool:
        """A reclaim page's outcome: counted, poison entries dead-lettered, deleted ones
        reported, the stream's cursor moved. False when its PEL scan came round."""
        o = self.options
        self.ledger.count(run, seq, len(res.taken), res.bytes)
        self._took(name, 0, len(res.taken))
        dead = 0
        if res.poison:
            assert o.dead_letter_stream is not None
            dead += claims.dead_letter_poison(op, o.dead_letter_stream, [
                (i, f"delivered {n} times (maxDeliveries={o.max_deliveries})", str(n))
                for i, n in res.poison])
        self.metrics.dead_lettered += dead
        if dead or res.deleted:
            self.probes.touched([name])
        if dead:
            log.warning("spark-eventbus: moved %d entries of stream %r delivered more than "
                        "%d times to %r", dead, name, o.max_deliveries, o.dead_letter_stream)
        if res.deleted:
            self.reports.deleted_while_pending(name, res.deleted)
        cursor = res.cursor
        stop_after = self._stop_after(name)
        if cursor == "0-0" or (stop_after is not None
                               and StreamId.parse(cursor) > StreamId.parse(stop_after)):
            self.reclaim_cursor[name] = "0-0"
            if self.stop_after is not None:
                self.reclaim_done.add(name)  # AvailableNow: one pass over the PEL is enough
            return False
        self.reclaim_cursor[name] = cursor
        return True

    # -- claims --------------------------------------------------------------------------------

    def claim_new(self, left: int | None, budget: int | None, run: str, seq: int,
                  stop: threading.Event | None = None,
                  probes: list[Probe] | None = None) -> dict[str, StreamBatch]:
        """Claim up to ``left`` new entries (all when None), shared across streams
        (:func:`.planning.stream_grants`): fair shares, streams that run dry leaving theirs to
        the others; or, when that would give a stream fewer than ``MIN_SHARE``, in turns. Streams
        with nothing added since the group's last delivery (one pipelined probe) are not asked
        at all."""
        found = [(name, op, p.lag) for (name, op), p in zip(
            self.ops.items(), self.probes.probe() if probes is None else probes, strict=True)
            if p.has_new]
        chunk_size = claim_chunk_size(budget, self.options.num_partitions, len(found))
        turns = takes_turns(left, len(found))
        if turns:
            # Too many streams with news for a fair share each worth its cost: they take
            # turns, each up to MIN_SHARE entries, from where the last batch stopped (the
            # streams listed last are not left waiting behind the ones listed first)
            k = next_turn(list(self.ops), [name for name, _, _ in found], self.turn_after)
            found = found[k:] + found[:k]
            chunk_size = max(chunk_size, MIN_SHARE)
        wants = [lag if lag else None for _, _, lag in found]
        grants = stream_grants(left, wants)
        todo = [(name, op) for name, op, _ in found]
        out = self._claim_streams([(name, op, grant) for (name, op), grant
                                   in zip(todo, grants, strict=True)],
                                  chunk_size, run, seq, stop)
        if turns:  # the next turn starts after the streams served (not those a stop skipped)
            served = [name for (name, _), grant in zip(todo, grants, strict=True)
                      if grant and name in out]
            self.turn_after = served[-1] if served else self.turn_after
        claimed = sum(b.count for b in out.values())
        # (a stream whose grant was all its lag has nothing more: its turn took it whole)
        filled = [(name, op) for (name, op), grant, want in zip(todo, grants, wants, strict=True)
                  if grant and name in out and out[name].count >= grant
                  and not (turns and want is not None and want <= grant)]
        spare = 0 if left is None else left - claimed
        # The spare goes to the streams that filled their share, in chunks sized for them
        # (not for every stream: one busy stream among many quiet ones claims big chunks).
        spare_chunk = claim_chunk_size(spare, self.options.num_partitions, len(filled))
        for name, op in filled:
            if spare <= 0:
                break
            got = self._claim_rounds([(name, op, spare)], spare_chunk, run, seq, stop).get(name)
            if got:
                out[name] = out[name] + got
                spare -= got.count
        return out

    def _claim_streams(self, items: Sequence[tuple[str, ConsumerOps, int]], chunk_size: int,
                       run: str, seq: int, stop: threading.Event | None
                       ) -> dict[str, StreamBatch]:
        """Claim up to each stream's budget (a stream that did not exist when
        ``Trigger.AvailableNow`` began gets nothing)."""
        items = [(name, op, budget) for name, op, budget in items if budget > 0 and not (
            self.stop_after is not None and self.stop_after.get(name) is None)]
        self.ledger.writes(run, seq, (name for name, _, _ in items))
        if self.options.max_bytes_per_trigger is None:
            return self._claim_rounds(items, chunk_size, run, seq, stop)
        out: dict[str, StreamBatch] = {}
        for item in items:  # the byte budget is shared in order: stream by stream
            out.update(self._claim_rounds([item], chunk_size, run, seq, stop))
        return out

    def _claim_rounds(self, items: Sequence[tuple[str, ConsumerOps, int]], chunk_size: int,
                      run: str, seq: int, stop: threading.Event | None
                      ) -> dict[str, StreamBatch]:
        """One chunk of every stream still taking per pipelined round, as long as its chunks
        come back full and it has budget left. Under ``maxBytesPerTrigger`` ``items`` is one
        stream, and each claim is sized against the bytes left."""
        sized = self.options.max_bytes_per_trigger is not None
        ranges: dict[str, list[ClaimedRange]] = {name: [] for name, _, _ in items}
        left = {name: budget for name, _, budget in items}
        active = [(name, op) for name, op, _ in items]
        while active and not (stop is not None and stop.is_set()):
            bytes_left, empty = self.ledger.bytes_left(run, seq) if sized else (None, True)
            if bytes_left is not None and bytes_left <= 0 and not empty:
                break
            asks = [claims.ClaimAsk(op, min(chunk_size, left[name]), self._stop_after(name))
                    for name, op in active]
            since = self.probes.generation()
            results = claims.claim(asks, run, seq, self.options.fail_on_data_loss,
                                   bytes_left, empty)
            more = []
            for (name, op), ask, res in zip(active, asks, results, strict=True):
                if not self._claimed(name, res, run, seq, since):
                    continue
                assert res.chunk is not None
                ranges[name].append(res.chunk)
                left[name] -= res.chunk.count
                if left[name] > 0 and res.chunk.count >= ask.count:
                    more.append((name, op))
            active = more
        return {name: StreamBatch(tuple(r)) for name, r in ranges.items() if r}

    def _claimed(self, name: str, res: ClaimResult, run: str, seq: int,
                 since: int | None = None) -> bool:
        """A claim's outcome: losses reported, a destroyed group raised, the chunk counted.
        False when nothing was claimed."""
        if res.lost_after or res.status == "nogroup":
            self.probes.touched([name])
        if res.lost_after:
            self.reports.claim_loss(name, res)
        if res.status == "nogroup":
            raise EventBusError(
                f"consumer group {self.options.group!r} of stream {name!r} no longer exists: "
                f"it was destroyed (XGROUP DESTROY) while the query ran. {GROUP_GONE_FIX}")
        if res.chunk is None:
            return False
        self.ledger.count(run, seq, res.chunk.count, res.bytes)
        self._took(name, res.chunk.count, 0, res.chunk.last, since)
        return True
