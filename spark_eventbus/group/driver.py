"""The streaming reader's live parts on the driver, and which batch comes next.

:class:`ReaderDriver` is made at the first offset call (:mod:`.stream_reader` only adapts
Spark's calls to it) and composes, each owning its state:

* :class:`.subscription.Subscription` — which streams (a list, or ``streamPattern``);
* :class:`.lease.ConsumerLease` — one live query per consumer; **its own thread** renews the
  query's heartbeat key (and its leases) and touches nothing else but ``ConsumerOps.lease_token``;
* :class:`.claimer.Claimer` — fills a batch (:meth:`.claimer.Claimer.fill`), with its probe
  cache, ledger and loss reports;
* :class:`.closing.Closer` — acks, plans and trims of committed batches;
* :class:`.prefetch.Prefetcher` — **the pre-claim thread**: while Spark runs a batch, it
  closes the committed one (:class:`.closing.Closer`) and fills the next
  (:meth:`.claimer.Claimer.fill`); ``latestOffset`` stops it (after the claim in progress)
  before it touches any of these itself, so the two never run at once;
* :class:`.ledger.ClaimState` and :class:`.loss_reports.SourceMetrics` — the bookkeeping.

The budget policy (how much to claim where) is pure, in :mod:`.planning`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from ..core.capabilities import require_scripting
from ..core.keys import BOOKKEEPING_TTL_MS, batch_key
from ..core.offsets import BatchOffset, StreamBatch
from ..core.planning import first_claim_allowance, preclaim_allowance, should_wait
from ..errors import EventBusError
from ..options.reader import ReaderOptions
from ..redisio import (
    Barrier,
    ConsumerOps,
    Probe,
    acks,
    capabilities_of,
    manifests,
    plans,
    preflight,
    probes,
    text,
    wait_for_writes,
)
from .claimer import Claimer
from .closing import Closer
from .lease import ConsumerLease
from .ledger import ClaimState
from .loss_reports import SourceMetrics
from .prefetch import Prefetcher
from .progress import report
from .subscription import Subscription
from .telemetry import Telemetry

log = logging.getLogger("spark_eventbus")


def _plan_barrier(key: str, run: str, seq: int, batch: StreamBatch) -> Barrier:
    """waitReplicas: the plan of batch ``seq`` must be on the primary as planned."""

    def same(raw: Any) -> bool:
        if raw is None:
            return False
        plan = json.loads(raw)
        return bool(plan.get("run") == run and StreamBatch.from_json(plan).count == batch.count)
    return Barrier(key, BOOKKEEPING_TTL_MS, ("HGET", key, str(seq)), same)


def _contents_barrier(key: str, body: str) -> Barrier:
    """waitReplicas: a large batch's contents, kept under ``key``, must be on the primary."""
    return Barrier(key, BOOKKEEPING_TTL_MS, ("GET", key),
                   lambda raw: raw is not None and text(raw) == body)


class ReaderDriver:
    def __init__(self, opts: ReaderOptions) -> None:
        assert opts.group is not None
        preflight(opts.connection)  # waitReplicas / waitAof: what the server can do
        # Capabilities checked once, before anything is created: never mid-query.
        self.capabilities = capabilities_of(opts.connection)
        require_scripting(self.capabilities, "spark.readStream (a streaming read)",
                          opts.connection.display)
        caps = self.capabilities
        log.info("spark-eventbus: the server at %s is %s; optional commands it has: %s%s",
                 opts.connection.display, caps.display,
                 ", ".join(sorted(c.upper() for c in caps.commands)) or "none",
                 f" ({', '.join(caps.not_used)}: not used yet, see docs/redis-8.md)"
                 if caps.not_used else "")
        self.opts = opts
        self.subscription = Subscription(opts)
        self.ops: dict[str, ConsumerOps] = self.subscription.ops
        if self.ops:
            # the XREAD that asks every stream for news, once now: a rule without +xread is
            # refused at start, not at the first probe that is not a full one
            probes.news(list(self.ops.values())[:1], ["0-0"])
            if opts.delete_at_ack:
                self._delete_at_ack()
        self.lease = ConsumerLease(self.ops, opts.group, opts.consumer_name, opts.connection)
        self.prefetch = Prefetcher("eventbus-preclaim")
        self.claims = ClaimState()
        self.metrics = SourceMetrics()
        # OpenTelemetry, when this process has it (metricsProvider: the MeterProvider to use)
        self.telemetry = Telemetry(opts.group, opts.metrics_provider)
        self.claimer = Claimer(opts, self.ops, self.metrics)
        self.closer = Closer(opts, self.ops, self.claims, self.claimer, self.metrics)
        # latestOffset's probe when it claimed nothing: what reportLatestOffset shows then
        self.quiet_probes: list[Probe] | None = None
        # the last two batches returned or read, by (run, seq): commit(end) and the next
        # latestOffset(start) give them back
        self._recent: dict[tuple[str, int], BatchOffset] = {}

    def _delete_at_ack(self) -> None:
        """deleteAtAck: on a server with ``XACKDEL`` each ack also deletes what every group has
        acked (``ACKED``). A server without it, or a user whose rule lacks ``+xackdel``, keeps
        plain ``XACK``s (trimAcked's pass, if on, removes what every group acked), and is told
        once."""
        if not self.capabilities.has_xackdel:
            log.warning("spark-eventbus: option 'deleteAtAck' has no effect on %s (%s), which "
                        "has no XACKDEL (Redis >= 8.2): acks stay XACK; option 'trimAcked' "
                        "removes what every group acked, every trimIntervalMs.",
                        self.opts.connection.display, self.capabilities.display)
            return
        if not acks.may_delete_acked(next(iter(self.ops.values()))):
            log.warning("spark-eventbus: deleteAtAck: the server has XACKDEL, which deletes an "
                        "entry once every group has acked it, but the Redis user may not run "
                        "it; acks stay XACK (option 'trimAcked' removes what every group "
                        "acked, every trimIntervalMs). Add +xackdel to the user's rule "
                        "(`eventbus acl-rule --role streaming-reader --xackdel`).")
            return
        self.subscription.delete_acked = True
        for op in self.ops.values():
            op.delete_acked = True

    def rediscover(self, run: str) -> bool:
        """``streamPattern``, every ``discoveryIntervalMs`` (between batches: the pre-claim is
        stopped): new matching streams join (group at ``startingPosition``, the consumer lease
        taken; a lease another live query holds stops this query, as at start), deleted ones
        leave (this consumer's plans, loss records and lease on them are dropped)."""
        if not self.subscription.due():
            return False
        left, names = self.subscription.refresh()
        pattern = self.opts.stream_pattern
        if left:
            gone = [op.stream for op in left]
            self.lease.leave(left, run)
            plans.forget(left)
            log.info("spark-eventbus: %d streams no longer match %r (deleted): %s", len(gone),
                     pattern, ", ".join(gone[:10]))
            self.claimer.deleted(gone)  # unread entries: failOnDataLoss
        joined = self.subscription.join(names)  # after the deleted ones are accounted for
        if joined:
            self.lease.join(joined, run)
            if self.claims.earlier is not None:
                self.claims.earlier |= plans.left_behind(joined)
            log.info("spark-eventbus: %d new streams match %r: %s", len(joined), pattern,
                     ", ".join(op.stream for op in joined[:10]))
        return bool(joined)

    def offset(self, data: dict, exact: bool = False) -> BatchOffset:
        """An offset Spark gives back, parsed; the last two batches this driver returned or
        read are not parsed again (with thousands of streams that costs more than a quiet
        trigger's Redis work). An offset that names its batch (:data:`.offsets.NAME_FROM`) is
        read from the contents kept in Redis; if they are gone, from the batch's claim plans
        (:meth:`_rebuilt`; ``exact``: a batch Spark runs again, which must be the same)."""
        key = (data.get("run"), data.get("seq"))
        known = self._recent.get(key)  # type: ignore[arg-type]
        if known is not None:
            return known
        if not BatchOffset.names_contents(data):
            return BatchOffset.from_json(data)
        run, seq = str(data["run"]), int(data["seq"])
        name = batch_key(str(data["at"]), self.opts.group or "", self.opts.consumer_name, run,
                         seq)
        body = manifests.read(self.opts.connection, name)
        batch = BatchOffset.from_named(data, body) if body is not None \
            else self._rebuilt(data, name, exact)
        self._remember(batch, name)
        return batch

    def _rebuilt(self, data: dict, name: str, exact: bool) -> BatchOffset:
        """A batch whose kept contents are gone (a failover that lost them, a key deleted or
        expired), from the plans of its claims, which stay until the batch after it closes.
        Exact when they hold the streams and entries the offset names; otherwise a batch
        Spark runs again (``exact``) cannot be, and the query stops; an acked one is acked
        as far as the plans say (what is left stays pending and is reclaimed)."""
        run, seq = str(data["run"]), int(data["seq"])
        ops = list(self.ops.values())
        streams = {op.stream: b for op, b in zip(ops, plans.plans(ops, run, seq), strict=True)
                   if b}
        batch = BatchOffset(run, seq, streams)
        if len(streams) == data.get("count") and batch.count == data.get("entries"):
            log.warning("spark-eventbus: the contents of batch %d (key %s) were gone from "
                        "Redis; rebuilt from its claim plans (%d streams, %d entries, as its "
                        "offset names)", seq, name, len(streams), batch.count)
            return batch
        what = (f"batch {seq} of this query (checkpoint run {run}) names its contents in Redis "
                f"({name}: {data.get('count')} streams, {data.get('entries')} entries), and "
                f"they are gone; its claim plans hold {len(streams)} streams, {batch.count} "
                "entries")
        if exact:
            raise EventBusError(
                f"{what}, so Spark cannot run it again as it was. Start the query with a new "
                "checkpointLocation: nothing is lost, the entries of that batch stay pending "
                "in the group and are reclaimed after claimMinIdleMs (with waitReplicas the "
                "contents reach the replicas before Spark logs a batch, and a failover keeps "
                "them).")
        log.warning("spark-eventbus: %s; acking what the plans hold (the rest stays pending "
                    "and is reclaimed after claimMinIdleMs: delivered again, never lost)", what)
        return batch

    def _remember(self, batch: BatchOffset, name: str | None) -> None:
        """The last two batches returned or read (``name``: the key of their contents in
        Redis, dropped when the batch after them closes)."""
        self._recent[(batch.run, batch.seq)] = batch
        for old in sorted(self._recent, key=lambda k: k[1])[:-2]:
            del self._recent[old]
        if name is not None:
            self.claims.contents[batch.seq] = name

    def plan(self, start: dict, limit: ReadLimit) -> dict:
        """``latestOffset``: plan the next batch: recover what is already claimed for it, then
        reclaim and claim.

        Spark has committed every batch up to ``start`` when it asks for the next one (it
        delays ``commit(start)`` until a later batch is planned), so ``start`` is acked here:
        in the background when a new batch is returned, at once otherwise.
        """
        o = self.opts
        began = time.monotonic()
        begin = self.offset(start)
        self.quiet_probes = None
        self.lease.hold(begin.run)
        interrupted = self.prefetch.stop()  # True: it was still claiming, more is waiting
        if self.rediscover(begin.run):
            self.claims.idle = None  # streams joined: look for their plans too
        seq = begin.seq + 1
        budget: int | None = None
        if isinstance(limit, ReadMaxRows):
            budget = limit.max_rows
        elif not isinstance(limit, ReadAllAvailable):
            budget = o.max_entries_per_trigger

        # 1. What is already claimed for this batch number: pre-claimed while the previous
        #    batch ran, or left by a driver that died before Spark logged the batch. Those
        #    entries sit in our PEL and no logged batch covers them.
        batches: dict[str, StreamBatch] = {}
        # A quiet trigger after a quiet trigger of this driver for the same batch number:
        # nothing can have been planned for `seq` since (only a claim for `seq` writes its
        # plan: none found anything, and the pre-claim starts only after a batch is returned).
        quiet = self.claims.idle == (begin.run, seq)
        if self.claims.full_until is None:
            self.claims.full_until = seq + 1
            # where a driver before this one left plans or loss records (under the lease
            # now: no other driver of this consumer writes any more)
            self.claims.earlier = plans.left_behind(list(self.ops.values()))
        scope = [] if quiet else self.closer.plan_scope(begin.run, seq)
        for name, residue in zip((op.stream for op in scope), plans.plans(scope, begin.run, seq),
                                 strict=True):
            if residue:
                if self.claims.preclaimed_seq != seq:
                    log.warning("spark-eventbus: recovering %d entries of stream %r claimed by "
                                "a previous driver for batch %d", residue.count, name, seq)
                batches[name] = residue
        used = sum(b.count for b in batches.values())
        if self._hold_back(limit, used):  # minEntriesPerTrigger: not enough yet
            self.closer.close_committed(begin)
            return start

        # 2. Top up within the allowance (planning.first_claim_allowance). Entries of `begin`
        #    are committed but not acked yet: protected from reclaim.
        allowed = first_claim_allowance(budget, used, interrupted, o.num_partitions,
                                        len(self.ops))
        if o.max_bytes_per_trigger is not None and used \
                and not self.claimer.ledger.knows_size(begin.run, seq):
            allowed = 0  # a plan left by a driver that died: its bytes are unknown, ship it
        # With acks at commit, this consumer's PEL holds `begin` until its ack (in the
        # background, after this) and what is already planned for `seq`: a stream whose group
        # has no more pending than that has nothing to reclaim (Claimer.reclaim_all)
        mine: dict[str, int] | None = None
        if o.ack_mode == "commit":
            mine = {n: b.count for n, b in batches.items()}
            if self.claims.acked_seq < begin.seq:
                for n, b in begin.streams.items():
                    mine[n] = mine.get(n, 0) + b.count
        got, probed = self.claimer.fill(allowed, budget, begin.run, seq, mine)
        for name, b in got.items():
            batches[name] = batches.get(name, StreamBatch()) + b

        self.metrics.planned = {name: (sum(c.count for c in b.chunks), len(b.reclaimed))
                                for name, b in batches.items()}
        # Nothing claimed: the progress report of this trigger shows what the probe saw.
        self.quiet_probes = probed if not any(batches.values()) else None
        first_plan, self.claims.planned_once = not self.claims.planned_once, True
        if not any(batches.values()):
            if first_plan and self.claimer.stop_after is None \
                    and not isinstance(limit, ReadAllAvailable):
                # Nothing to read yet: one empty batch now makes Spark start the Python
                # workers of this query's tasks (reader and sink), so that the first entries
                # to arrive do not wait for that start-up (EventBusStreamReader.partitions).
                self._start_prefetch(begin, budget, seq + 1, {})
                self.claims.last_batch_at = time.monotonic()
                return BatchOffset(begin.run, seq, {}).to_json()
            self.closer.close_committed(begin)
            self.claims.idle = (begin.run, seq)
            return start  # the very same object: Spark compares offsets as JSON text
        batch = BatchOffset(begin.run, seq, batches)
        out, body = batch.describe()
        kept: list[Barrier] = []
        if body is not None:  # a large batch: its offset names the contents kept in Redis
            name = batch_key(out["at"], o.group or "", o.consumer_name, begin.run, seq)
            manifests.keep(o.connection, name, body)
            kept.append(_contents_barrier(name, body))
        # waitReplicas / waitAof: Spark logs this batch only once its plans (and any dead
        # letters the reclaim wrote beside them, and its kept contents) are on the replicas,
        # so that it replays exactly from the new primary after a failover.
        if o.connection.waits:
            wait_for_writes(o.connection, [
                *(_plan_barrier(self.ops[n].plan_key, begin.run, seq, b)
                  for n, b in batches.items() if b), *kept],
                f"recording the claim plan of batch {seq}", no_task_retry=True)
        self.claimer.reports.shipped(batches)  # before the pre-claim thread counts again
        self.telemetry.planned(batches, time.monotonic() - began, len(self.ops))
        self._remember(batch, kept[0].key if kept else None)  # before the pre-claim closes
        self._start_prefetch(begin, budget, seq + 1, batches)
        self.claims.last_batch_at = time.monotonic()
        return out

    def _hold_back(self, limit: ReadLimit, used: int) -> bool:
        """``minEntriesPerTrigger``: whether the next batch waits, with ``used`` entries already
        planned for it. Available = those + the groups' lag (``XINFO GROUPS``, or counted:
        :func:`.redisio.probes.available`); idle entries to reclaim are not counted. Never
        under ``Trigger.AvailableNow``, never past ``maxTriggerDelay`` since the last batch,
        never when the number available is unknown."""
        o = self.opts
        if o.min_entries_per_trigger is None or self.claimer.stop_after is not None \
                or isinstance(limit, ReadAllAvailable):
            return False
        waited_ms = (time.monotonic() - self.claims.last_batch_at) * 1000
        if waited_ms >= o.max_trigger_delay_ms:
            return False
        need = o.min_entries_per_trigger - used
        lags = probes.available(list(self.ops.values()), need) if need > 0 else []
        available = None if None in lags else used + sum(x for x in lags if x is not None)
        return should_wait(o.min_entries_per_trigger, available, waited_ms,
                           o.max_trigger_delay_ms)

    def progress(self) -> dict[str, Any]:
        """``reportLatestOffset`` (:mod:`.progress`): the quiet trigger's probe where it saw
        every stream in full, else a probe now."""
        found_probes, self.quiet_probes = self.quiet_probes, None
        found = [p.stats() for p in found_probes] if found_probes is not None and len(
            found_probes) == len(self.ops) and all(p.full for p in found_probes) \
            else self.claimer.probes.stats()
        self.telemetry.reported(list(self.ops), found, self.metrics)
        return report(self.ops, found, self.metrics)

    def commit(self, offset: BatchOffset) -> None:
        """Spark committed ``offset``: ack it, unless the pre-claim thread does."""
        if offset.seq > self.claims.ack_scheduled_seq:
            self.prefetch.join()
            self.closer.ack(offset)

    def _start_prefetch(self, committed: BatchOffset, budget: int | None, seq: int,
                        in_flight: Mapping[str, StreamBatch]) -> None:
        """While Spark runs batch ``seq - 1``: close ``committed``, then fill batch ``seq``
        until its allowance is reached, the streams run dry, or the next ``latestOffset``
        stops it (after the claim in progress).

        Safe to overlap with the batch: every claim script records what it takes in the plan
        of ``seq`` atomically, so the next ``latestOffset`` (in this process, or after a crash)
        finds it; reclaim never takes entries of plans from ``seq - 1`` on (the batch in flight).
        """
        run = committed.run

        def work(stop: threading.Event) -> bool:
            self.closer.close_committed(committed)
            # A plan for `seq` may exist already (left by a driver that died): top it up.
            planned = sum(b.count for b in plans.plans(self.closer.plan_scope(run, seq), run,
                                                       seq))
            left = preclaim_allowance(budget, self.opts.max_entries_per_trigger, planned)
            # With acks at commit, the PEL holds the batch in flight and what is reclaimable;
            # other ack modes leave committed entries pending too.
            flying = {n: b.count for n, b in in_flight.items()} \
                if self.opts.ack_mode == "commit" else None
            got, _ = self.claimer.fill(left, budget, run, seq, flying, stop)
            left -= sum(b.count for b in got.values())
            return stop.is_set() and left > 0

        self.claims.ack_scheduled_seq = max(self.claims.ack_scheduled_seq, committed.seq)
        self.claims.preclaimed_seq = seq
        self.prefetch.start(work)
