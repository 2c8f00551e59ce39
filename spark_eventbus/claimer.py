"""Driver side of streaming reads: the claim and reclaim loops that fill one batch.

:class:`Claimer` moves entries into this query's consumer PEL, recording each step in the plan
of the batch being built (through :class:`.redisio.ConsumerOps`, one per stream): idle entries
of other consumers first (``XAUTOCLAIM``, poison entries to the dead-letter stream), then new
ones (``XREADGROUP >``), each call bounded. How much to take where is pure, in
:mod:`.planning`; which batch, and when, is :class:`.stream_reader.EventBusStreamReader`'s.
Entries found deleted or trimmed before they were read are reported here (``failOnDataLoss``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .errors import ConfigError, DataLossError, EventBusConnectionError, EventBusError
from .ids import StreamId
from .offsets import ClaimedRange, StreamBatch
from .options import ReaderOptions
from .planning import MANY_STREAMS, claim_chunk_size, share_budget, stream_grants
from .redisio import (
    GROUP_GONE_FIX,
    ClaimResult,
    ConsumerOps,
    GroupStats,
    ReclaimResult,
    client,
    consumers,
    is_cluster,
)

log = logging.getLogger("spark_eventbus")

# XAUTOCLAIM COUNT per script call: it scans at most 10x this many PEL entries.
RECLAIM_PAGE = 500
# ... under maxBytesPerTrigger: XAUTOCLAIM cannot bound bytes, so a reclaim page may pass the
# bound by up to this many entries (docs: the README's maxBytesPerTrigger).
RECLAIM_PAGE_BYTES_BOUND = 10


@dataclass
class SourceMetrics:
    """What the progress report counts (``reportLatestOffset``)."""

    lost_ranges: int = 0
    lost_entries: int = 0
    dead_lettered: int = 0
    reported_losses: set[tuple[str, str]] = field(default_factory=set)
    # the batch planned last, per stream: (claimed new entries, reclaimed idle ones)
    planned: dict[str, tuple[int, int]] = field(default_factory=dict)


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
        # (run, seq) -> [entries, bytes] this process claimed and reclaimed into that batch's
        # plan: what maxBytesPerTrigger has left for it (a plan left by another driver: unknown)
        self.sizes: dict[tuple[str, int], list[int]] = {}
        # (run, seq) -> the streams whose plan of that batch this process may have written
        # (a claim or reclaim script ran there): where the reader looks for plans once no
        # driver before this one can have left any (stream_reader: ClaimState.full_until)
        self.wrote: dict[tuple[str, int], set[str]] = {}
        # What a stream deleted while subscribed (streamPattern) takes with it unread, per
        # stream: its group's lag at the last probe (None: unknown), what this process claimed
        # since, and what it claimed or reclaimed into batches not returned to Spark yet
        # (lag or None, last generated ID, the group has other consumers) at the last probe
        self.seen: dict[str, tuple[int | None, str | None, bool]] = {}
        self.claimed_since: dict[str, int] = {}
        self.claimed_to: dict[str, str] = {}  # the last ID claimed since that probe
        self.turn = 0  # claim_new: where the next turn starts when not every stream gets some
        self.unshipped: dict[str, int] = {}
        # What each stream's group looked like when last probed (Claimer.probe), the streams
        # this query changed since (claims, reclaims, acks), and when every stream was last
        # probed; watch False: the ACL user may not XREAD, every probe asks every stream
        self.probed: dict[str, consumers.Probe] = {}
        self.dirty: set[str] = set()
        self.probed_all_at = float("-inf")
        self.watch = True
        self.cluster = is_cluster(client(options.connection))
        self._probing = threading.Lock()  # the pre-claim thread and the progress report
        self._marks = threading.Lock()  # dirty: the pre-claim thread, acks and probes

    def _writes(self, run: str, seq: int, names: Iterable[str]) -> None:
        self.wrote.setdefault((run, seq), set()).update(names)

    def written(self, run: str, seq: int) -> set[str]:
        """The streams whose plan of batch ``seq`` this process may have written."""
        return set(self.wrote.get((run, seq), ()))

    def written_up_to(self, run: str, up_to: int) -> set[str]:
        """The streams whose plans of batches up to ``up_to`` this process may have written."""
        out: set[str] = set()
        for (r, seq), names in self.wrote.items():
            if r == run and seq <= up_to:
                out |= names
        return out

    def forget_written(self, run: str, up_to: int) -> None:
        """Batches up to ``up_to`` are committed and closed: their plans are gone."""
        for key in [k for k in self.wrote if k[0] != run or k[1] <= up_to]:
            del self.wrote[key]

    def knows_size(self, run: str, seq: int) -> bool:
        """Whether this process claimed everything in the plan of batch ``seq``, so that
        maxBytesPerTrigger can top it up; a plan of a driver that died is shipped as it is."""
        return (run, seq) in self.sizes

    def _bytes_left(self, run: str, seq: int) -> tuple[int | None, bool]:
        """maxBytesPerTrigger's room left in batch ``seq`` (None: no bound), and whether the
        batch is still empty."""
        entries, size = self.sizes.setdefault((run, seq), [0, 0])
        for key in [k for k in self.sizes if k[1] < seq - 2]:
            del self.sizes[key]
        bound = self.options.max_bytes_per_trigger
        return (None if bound is None else bound - size), entries == 0

    def _count(self, run: str, seq: int, entries: int, size: int) -> None:
        got = self.sizes.setdefault((run, seq), [0, 0])
        got[0] += entries
        got[1] += size

    def stop_at(self, last_ids: dict[str, str | None]) -> None:
        """``Trigger.AvailableNow``: claim nothing after these IDs (per stream; ``None``: the
        stream did not exist), and scan each PEL once more from its start."""
        self.stop_after = last_ids
        self.reclaim_done.clear()
        self.reclaim_cursor.clear()

    def probe(self, planning: bool = True) -> list[consumers.Probe]:
        """Every stream's group state, for one planning round's :meth:`reclaim_all` and
        :meth:`claim_new` (``planning``: where there is news, only as much as that decision
        needs) and for the progress report (one pipelined round trip per node).

        On a single node, from :data:`MANY_STREAMS` streams on, a quiet stream costs nothing:
        one ``XREAD COUNT 1`` over every stream this query has not changed since its last
        probe, from the group's last delivered ID then, names those with new entries, and only
        they (and the streams this query claimed, reclaimed or acked on) are probed; the
        others' last probe stands. Every stream is probed at least every ``claimMinIdleMs`` or
        ``discoveryIntervalMs``, whichever is shorter: what only that shows (entries of
        another consumer turning idle, entries trimmed or a group destroyed or moved on a
        stream that got nothing new) is seen within that time. (On Redis Cluster a multi-key
        ``XREAD`` needs one slot, and redis-py resolves the keys of each with a round trip of
        its own: every stream is probed, pipelined per node.)"""
        with self._probing:
            names = list(self.ops)
            before = self.probed_all_at
            with self._marks:
                dirty, self.dirty = self.dirty, set()  # marks made meanwhile: the next probe
            try:
                ask, recheck = self._to_probe(names, dirty)
                if not planning:  # progress: the streams last probed only for planning too
                    known = set(ask)
                    recheck = [n for n in names if n not in known and not self.probed[n].full]
                fresh = consumers.probe([self.ops[n] for n in ask], full=not planning)
                # a lag that said news where XREAD finds none (Redis 7.0's lag after a trim or
                # XDEL): looked at in full, or it would be claimed from every trigger
                ask += recheck
                fresh += consumers.probe([self.ops[n] for n in recheck])
            except BaseException:
                self.probed_all_at = before
                with self._marks:
                    self.dirty |= dirty
                raise
            for name, p in zip(ask, fresh, strict=True):
                self.probed[name] = p
                # What a deleted stream took unread (deleted()) is counted from the planning
                # probes only: a progress probe may run while the pre-claim claims
                if planning and p.group:
                    self.seen[name] = (p.stats().lag if p.has_new else 0, p.last_generated,
                                       (p.consumers or 0) > 1)
                    self.claimed_since.pop(name, None)
                    self.claimed_to.pop(name, None)
            return [self.probed[n] for n in names]

    def _to_probe(self, names: list[str], dirty: set[str]) -> tuple[list[str], list[str]]:
        """The streams :meth:`probe` asks: every one, or those that may have changed; and
        the streams to look at in full (a lag that said news where XREAD finds none)."""
        o = self.options
        now = time.monotonic()
        if not self.watch or len(names) < MANY_STREAMS or self.cluster or \
                (now - self.probed_all_at) * 1000 >= min(o.claim_min_idle_ms,
                                                         o.discovery_interval_ms):
            self.probed_all_at = now
            return names, []
        clean = [n for n in names if n not in dirty and (p := self.probed.get(n)) is not None
                 and p.group and p.last_delivered is not None]
        try:
            news = consumers.news([self.ops[n] for n in clean],
                                  [str(self.probed[n].last_delivered) for n in clean])
        except EventBusConnectionError:
            raise
        except ConfigError as exc:  # NOPERM: an ACL rule made before the reader used XREAD
            self.watch = False
            log.warning("spark-eventbus: the Redis user may not run XREAD, so every trigger "
                        "asks each stream's group for news (one command per stream); add "
                        "+xread to its ACL rule (eventbus acl-rule streaming-reader): %s", exc)
            return names, []
        except EventBusError as exc:  # e.g. WRONGTYPE: a key replaced; every stream looks
            log.debug("spark-eventbus: looking for news failed, probing every stream: %s", exc)
            return names, []
        known = set(clean)
        return ([n for n in names if n not in known or n in news],
                [n for n in clean if n not in news and not self.probed[n].full])

    def touched(self, names: Iterable[str]) -> None:
        """This query changed these streams' groups (acks): the next probe asks them."""
        with self._marks:
            self.dirty.update(names)

    def stats(self) -> list[GroupStats]:
        """Progress of every stream (:meth:`probe`); unknowns when Redis stays unreachable
        past the client's retries (progress never fails a query)."""
        try:
            return [p.stats() for p in self.probe(planning=False)]
        except EventBusConnectionError as exc:
            log.warning("spark-eventbus: progress shows unknowns: %s", exc)
            return [GroupStats(None, None, None) for _ in self.ops]

    def _took(self, name: str, claimed: int, reclaimed: int, last: str | None = None) -> None:
        if claimed or reclaimed:
            self.touched([name])
        if claimed:
            self.claimed_since[name] = self.claimed_since.get(name, 0) + claimed
        if last is not None:
            self.claimed_to[name] = last
        if claimed or reclaimed:
            self.unshipped[name] = self.unshipped.get(name, 0) + claimed + reclaimed

    def shipped(self, batches: Mapping[str, StreamBatch]) -> None:
        """``latestOffset`` returned these: their entries are the replay's to account for."""
        for name, b in batches.items():
            if name in self.unshipped:
                self.unshipped[name] = max(0, self.unshipped[name] - b.count)

    def deleted(self, names: Sequence[str]) -> None:
        """Streams deleted while subscribed (``streamPattern``): the entries their groups had
        not read when last looked at are lost, and follow ``failOnDataLoss`` (entries claimed
        but not yet read back are the replay's to report, as for any deleted entry). A group
        with other consumers may have read some of them elsewhere: then the count is a bound
        and not added to ``lostEntries``."""
        lost: dict[str, tuple[int | None, bool]] = {}
        for n in names:
            self.probed.pop(n, None)
            lag, generated, shared = self.seen.pop(n, (0, None, False))
            since, unshipped = self.claimed_since.pop(n, 0), self.unshipped.pop(n, 0)
            to = self.claimed_to.pop(n, None)
            if lag is None and generated is not None and to is not None \
                    and StreamId.parse(to) >= StreamId.parse(generated):
                lag, since = 0, 0  # unknown lag, but this query claimed up to the last entry
            k = None if lag is None else max(0, lag - since) + unshipped
            if k != 0:
                lost[n] = (k, shared)
        if not lost:
            return
        def count(k: int | None, shared: bool) -> str:
            return "an unknown number of" if k is None else f"{'up to ' if shared else ''}{k}"
        shown = ", ".join(f"{n!r} ({count(k, shared)} entries)"
                          for n, (k, shared) in list(lost.items())[:10])
        more = f" and {len(lost) - 10} more" if len(lost) > 10 else ""
        text = (f"stream(s) {shown}{more} matching option 'streamPattern' were deleted while "
                f"consumer group {self.options.group!r} had not read them (as last seen by "
                "this query; entries added after that are not counted)")
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"{text}. Restart the query to go on without them (a deleted stream is not "
                "subscribed again), or set option 'failOnDataLoss' to 'false' to skip such "
                "entries with a warning.")
        self.metrics.lost_ranges += len(lost)
        self.metrics.lost_entries += sum(k for k, shared in lost.values()
                                         if k is not None and not shared)
        log.warning("spark-eventbus: %s; skipping them (failOnDataLoss=false)", text)

    def reclaim_all(self, left: int | None, run: str, seq: int, protect_from: int,
                    probes: list[consumers.Probe] | None = None,
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
        out: dict[str, StreamBatch] = {}
        # Only groups with pending entries have anything to reclaim (one pipelined probe); the
        # first stream is asked on the first pass whatever its state, so that a user whose ACL
        # rule lacks a command of the reclaim fails at the query's start, not on a first failure.
        now = time.monotonic()

        def only_mine(name: str, p: consumers.Probe) -> bool:
            """Nothing pending but this consumer's own entries in flight: not scanned, for at
            most claimMinIdleMs in a row (a count can be off: entries deleted after a claim
            are acked by the replay, so another consumer's could hide behind them)."""
            if in_flight is None or p.pending is None or p.pending > in_flight.get(name, 0):
                return False
            since = self.reclaim_skipped.setdefault(name, now)
            return (now - since) * 1000 < o.claim_min_idle_ms

        todo = [(name, op) for k, ((name, op), p) in enumerate(zip(
            self.ops.items(), self.probe() if probes is None else probes, strict=True))
            if ((p.has_pending and not only_mine(name, p))
                or (k == 0 and not self.reclaim_checked))
            and name not in self.reclaim_done]
        for name, _ in todo:
            self.reclaim_skipped.pop(name, None)
        self.reclaim_checked = True
        grants = share_budget(budget, [budget] * len(todo))
        self._writes(run, seq, (name for (name, _), grant in zip(todo, grants, strict=True)
                                if grant > 0))
        if o.max_bytes_per_trigger is not None or len(todo) == 1:
            for (name, op), grant in zip(todo, grants, strict=True):
                got = self._reclaim(name, op, grant, run, seq, protect_from)
                if got:
                    out[name] = got
            return out
        # Many streams: one page of every stream per pipelined round (per node), as long as
        # a stream has more to scan and budget left.
        taken: dict[str, list[tuple[str, int]]] = {name: [] for name, _ in todo}
        rounds = {name: max(4, grant // RECLAIM_PAGE + 2)
                  for (name, _), grant in zip(todo, grants, strict=True)}
        want = {name: grant for (name, _), grant in zip(todo, grants, strict=True)}
        active = [(name, op) for (name, op), grant in zip(todo, grants, strict=True)
                  if grant > 0]
        while active:
            asks = [consumers.ReclaimAsk(op, self.reclaim_cursor.get(name, "0-0"),
                                         min(RECLAIM_PAGE, want[name] - len(taken[name])))
                    for name, op in active]
            results = consumers.reclaim_many(asks, o.claim_min_idle_ms, run, seq,
                                             o.max_deliveries, o.dead_letter_stream,
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

    def claim_new(self, left: int | None, budget: int | None, run: str, seq: int,
                  stop: threading.Event | None = None,
                  probes: list[consumers.Probe] | None = None) -> dict[str, StreamBatch]:
        """Claim up to ``left`` new entries (all when None), shared fairly across streams:
        streams that run dry leave their share to the others. Streams with nothing added
        since the group's last delivery (one pipelined probe) are not asked at all."""
        todo = [(name, op) for (name, op), p in zip(
            self.ops.items(), self.probe() if probes is None else probes, strict=True)
            if p.has_new]
        if left is not None and 0 < left < len(todo):
            # More streams with news than entries to take: each gets one, in turns, so that
            # the streams listed last are not left waiting behind busy ones listed first
            k = self.turn % len(todo)
            todo = todo[k:] + todo[:k]
            self.turn += left
        chunk_size = claim_chunk_size(budget, self.options.num_partitions, len(todo))
        grants = stream_grants(left, len(todo))
        out = self._claim_streams([(name, op, grant) for (name, op), grant
                                   in zip(todo, grants, strict=True)],
                                  chunk_size, run, seq, stop)
        claimed = sum(b.count for b in out.values())
        filled = [(name, op) for (name, op), grant in zip(todo, grants, strict=True)
                  if grant and name in out and out[name].count >= grant]
        spare = 0 if left is None else left - claimed
        # The spare goes to the streams that filled their share, in chunks sized for them
        # (not for every stream: one busy stream among many quiet ones claims big chunks).
        spare_chunk = claim_chunk_size(spare, self.options.num_partitions, len(filled))
        for name, op in filled:
            if spare <= 0:
                break
            got = self._claim(name, op, spare, spare_chunk, run, seq, stop)
            if got:
                out[name] = out[name] + got
                spare -= got.count
        return out

    def _claim_streams(self, items: Sequence[tuple[str, ConsumerOps, int]], chunk_size: int,
                       run: str, seq: int, stop: threading.Event | None
                       ) -> dict[str, StreamBatch]:
        """Claim up to each stream's budget: stream by stream under ``maxBytesPerTrigger``
        (each claim sizes what is left), else one chunk of every stream per pipelined round
        (per node), as long as a stream's chunks come back full."""
        items = [(name, op, budget) for name, op, budget in items if budget > 0 and not (
            self.stop_after is not None and self.stop_after.get(name) is None)]
        self._writes(run, seq, (name for name, _, _ in items))
        if self.options.max_bytes_per_trigger is not None or len(items) <= 1:
            out = {}
            for name, op, budget in items:
                got = self._claim(name, op, budget, chunk_size, run, seq, stop)
                if got:
                    out[name] = got
            return out
        ranges: dict[str, list[ClaimedRange]] = {name: [] for name, _, _ in items}
        left = {name: budget for name, _, budget in items}
        active = [(name, op) for name, op, _ in items]
        while active and not (stop is not None and stop.is_set()):
            asks = [consumers.ClaimAsk(op, min(chunk_size, left[name]),
                                       self.stop_after.get(name) if self.stop_after else None)
                    for name, op in active]
            results = consumers.claim_many(asks, run, seq, self.options.fail_on_data_loss)
            more = []
            for (name, op), ask, res in zip(active, asks, results, strict=True):
                if not self._claimed(name, res, run, seq):
                    continue
                assert res.chunk is not None
                ranges[name].append(res.chunk)
                left[name] -= res.chunk.count
                if left[name] > 0 and res.chunk.count >= ask.count:
                    more.append((name, op))
            active = more
        return {name: StreamBatch(tuple(r)) for name, r in ranges.items() if r}

    def _claimed(self, name: str, res: ClaimResult, run: str, seq: int) -> bool:
        """A claim's outcome: losses reported, a destroyed group raised, the chunk counted.
        False when nothing was claimed."""
        if res.lost_after or res.status == "nogroup":
            self.touched([name])
        if res.lost_after:
            self._report_loss(name, res)
            # reported: not counted again if the stream is deleted before the next probe
            self.claimed_since[name] = self.claimed_since.get(name, 0) + max(0, res.lost_count)
        if res.status == "nogroup":
            raise EventBusError(
                f"consumer group {self.options.group!r} of stream {name!r} no longer exists: "
                f"it was destroyed (XGROUP DESTROY) while the query ran. {GROUP_GONE_FIX}")
        if res.chunk is None:
            return False
        self._count(run, seq, res.chunk.count, res.bytes)
        self._took(name, res.chunk.count, 0, res.chunk.last)
        return True

    def _claim(self, name: str, op: ConsumerOps, budget: int, chunk_size: int, run: str,
               seq: int, stop: threading.Event | None = None) -> StreamBatch:
        stop_after = self.stop_after.get(name) if self.stop_after is not None else None
        if self.stop_after is not None and stop_after is None:
            return StreamBatch()  # the stream did not exist when AvailableNow began
        ranges = []
        self._writes(run, seq, [name])
        while budget > 0 and not (stop is not None and stop.is_set()):
            bytes_left, empty = self._bytes_left(run, seq)
            if bytes_left is not None and bytes_left <= 0 and not empty:
                break
            res = op.claim(min(chunk_size, budget), run, seq, stop_after,
                           self.options.fail_on_data_loss, bytes_left, empty)
            if not self._claimed(name, res, run, seq):
                break
            assert res.chunk is not None
            ranges.append(res.chunk)
            budget -= res.chunk.count
            if res.chunk.count < chunk_size:
                break
        return StreamBatch(tuple(ranges))

    def _reclaim(self, name: str, op: ConsumerOps, budget: int, run: str, seq: int,
                 protect_from: int) -> StreamBatch:
        o = self.options
        if budget <= 0 or name in self.reclaim_done:
            return StreamBatch()
        taken: list[tuple[str, int]] = []
        self._writes(run, seq, [name])
        # At most a few passes per batch: every XAUTOCLAIM call is bounded server-side.
        page = RECLAIM_PAGE if o.max_bytes_per_trigger is None else RECLAIM_PAGE_BYTES_BOUND
        for _ in range(max(4, budget // page + 2)):
            bytes_left, empty = self._bytes_left(run, seq)
            if bytes_left is not None and bytes_left <= 0 and not empty:
                break
            res = op.reclaim(self.reclaim_cursor.get(name, "0-0"),
                             min(page, budget - len(taken)), o.claim_min_idle_ms,
                             run, seq, o.max_deliveries, o.dead_letter_stream, protect_from)
            taken += res.taken
            if not self._reclaimed(name, op, res, run, seq) or len(taken) >= budget:
                break
        return StreamBatch((), tuple(taken))

    def _reclaimed(self, name: str, op: ConsumerOps, res: ReclaimResult, run: str, seq: int
                   ) -> bool:
        """A reclaim page's outcome: counted, poison entries dead-lettered, deleted ones
        reported, the stream's cursor moved. False when its PEL scan came round."""
        o = self.options
        self._count(run, seq, len(res.taken), res.bytes)
        self._took(name, 0, len(res.taken))
        dead = res.dead_lettered
        if res.poison:
            assert o.dead_letter_stream is not None
            dead += op.dead_letter(o.dead_letter_stream, [
                (i, f"delivered {n} times (maxDeliveries={o.max_deliveries})", str(n))
                for i, n in res.poison])
        self.metrics.dead_lettered += dead
        if dead or res.deleted:
            self.touched([name])
        if dead:
            log.warning("spark-eventbus: moved %d entries of stream %r delivered more than "
                        "%d times to %r", dead, name, o.max_deliveries, o.dead_letter_stream)
        if res.deleted:
            self._deleted_while_pending(name, res.deleted)
        cursor = res.cursor
        stop_after = self.stop_after.get(name) if self.stop_after is not None else None
        if cursor == "0-0" or (stop_after is not None
                               and StreamId.parse(cursor) > StreamId.parse(stop_after)):
            self.reclaim_cursor[name] = "0-0"
            if self.stop_after is not None:
                self.reclaim_done.add(name)  # AvailableNow: one pass over the PEL is enough
            return False
        self.reclaim_cursor[name] = cursor
        return True

    def _report_loss(self, name: str, res: ClaimResult) -> None:
        m = self.metrics
        what = f"{res.lost_count} entries" if res.lost_count >= 0 else "entries"
        where = f"with IDs after {res.lost_after}"
        if res.lost_before.startswith("("):
            where += f" up to {res.lost_before[1:]}"
        elif res.lost_before:
            where += f" and before {res.lost_before}"
        text = (f"{what} of stream {name!r} {where} were deleted or trimmed before consumer "
                f"group {self.options.group!r} read them")
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"{text}. Keep the stream longer (MAXLEN/MINID) than the query's lag, or set "
                "option 'failOnDataLoss' to 'false' to skip them with a warning.")
        key = (name, res.lost_after)
        if key not in m.reported_losses:
            m.reported_losses.add(key)
            m.lost_ranges += 1
            m.lost_entries += max(0, res.lost_count)
            log.warning("spark-eventbus: %s; skipping them (failOnDataLoss=false)", text)

    def _deleted_while_pending(self, name: str, ids: Sequence[str]) -> None:
        shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"{len(ids)} pending entries of stream {name!r} were deleted before they were "
                f"processed: {shown}. Redis has removed them from group "
                f"{self.options.group!r}'s pending list. Set option 'failOnDataLoss' to "
                "'false' to skip such entries with a warning.")
        self.metrics.lost_ranges += 1
        self.metrics.lost_entries += len(ids)
        log.warning("spark-eventbus: %d pending entries of stream %r were deleted before they "
                    "were processed (failOnDataLoss=false): %s", len(ids), name, shown)
