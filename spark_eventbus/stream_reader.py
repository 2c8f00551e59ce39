"""Driver side of streaming reads: consumer-group reads mapped onto replayable micro-batch offsets.

:class:`EventBusStreamReader` decides *what a batch contains* and records it in the offset
(``initialOffset``, ``latestOffset``, ``partitions``, ``commit``); the executors replay exactly
that (:mod:`.partition_reader`). The pieces it composes each own their state:

* :class:`.redisio.ConsumerOps` — one per stream: claims, plans, acks (Redis);
* :class:`.claimer.Claimer` — the claim and reclaim loops that fill a batch;
* :class:`.lease.ConsumerLease` — one live query per consumer;
* :class:`.prefetch.Prefetcher` — acks the committed batch and pre-claims the next one while
  Spark runs the current one;
* :class:`ClaimState` below and :class:`.claimer.SourceMetrics` — the reader's bookkeeping.

The budget policy (how much to claim where) is pure, in :mod:`.planning`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .capabilities import require_scripting
from .claimer import Claimer, SourceMetrics
from .keys import BOOKKEEPING_TTL_MS
from .lease import ConsumerLease
from .offsets import BatchOffset, StreamBatch
from .options import ReaderOptions
from .partition_reader import read_slices
from .partitions import ReadSpec, SlicePartition
from .planning import (
    MANY_STREAMS,
    first_claim_allowance,
    pack_partitions,
    preclaim_allowance,
    should_wait,
)
from .prefetch import Prefetcher
from .redisio import (
    Barrier,
    ConsumerOps,
    capabilities_of,
    consumers,
    preflight,
    wait_for_writes,
)

log = logging.getLogger("spark_eventbus")

# Spark's driver-side process for a Python streaming source; the JVM ends it with SIGTERM.
_RUNNER = "python_streaming_source_runner.py"

# trimAcked over many streams: every stream is trimmed every this many trims (the others, only
# the streams the query acked since the last one)
TRIM_ALL_EVERY = 10

@dataclass
class ClaimState:
    """Where claiming and acking stand (driver; never pickled)."""

    initial_run: str | None = None  # initialOffset's run: Spark may ask more than once
    acked_seq: int = -1  # batches up to this one are acked
    ack_scheduled_seq: int = -1  # ... or being acked by the prefetcher
    preclaimed_seq: int = -1  # the batch the prefetcher claims for
    planned_once: bool = False  # latestOffset has run in this driver
    closed: tuple[str, int] | None = None  # the committed batch _close_committed finished
    idle: tuple[str, int] | None = None  # latestOffset found nothing for this batch number
    # when latestOffset last returned a new batch (or the driver started): maxTriggerDelay
    last_batch_at: float = field(default_factory=time.monotonic)
    last_trim_at: float = 0.0  # trimAcked: when the streams were last trimmed
    trims: int = 0  # ... how many times
    acked_since_trim: set[str] = field(default_factory=set)  # ... streams acked since
    # The last batch whose plans a driver before this one can have written: its first batch
    # and the pre-claim of the next (one live driver per consumer: the lease). Plans of later
    # batches are only where this process's claims wrote (Claimer.written), so a quiet stream
    # costs no plan reads, closes or loss checks per batch.
    full_until: int | None = None


def _plan_barrier(key: str, run: str, seq: int, batch: StreamBatch) -> Barrier:
    """waitReplicas: the plan of batch ``seq`` must be on the primary as planned."""

    def same(raw: Any) -> bool:
        if raw is None:
            return False
        plan = json.loads(raw)
        return bool(plan.get("run") == run and StreamBatch.from_json(plan).count == batch.count)
    return Barrier(key, BOOKKEEPING_TTL_MS, ("HGET", key, str(seq)), same)


class _Driver:
    """The reader's live parts on the driver, made at the first offset call."""

    def __init__(self, opts: ReaderOptions) -> None:
        assert opts.group is not None
        preflight(opts.connection)  # waitReplicas / waitAof: what the server can do
        # Capabilities checked once, before anything is created: never mid-query.
        self.capabilities = capabilities_of(opts.connection)
        require_scripting(self.capabilities, "spark.readStream (a streaming read)",
                          opts.connection.display)
        self.opts = opts
        self.ops: dict[str, ConsumerOps] = {}
        self.discovered_at = time.monotonic()
        names = opts.streams if opts.stream_pattern is None else self._discover()
        self._join(names)
        self.lease = ConsumerLease(self.ops, opts.group, opts.consumer_name, opts.connection,
                                   heartbeat=opts.stream_pattern is not None
                                   or len(self.ops) >= MANY_STREAMS)
        self.prefetch = Prefetcher("eventbus-preclaim")
        self.claims = ClaimState()
        self.metrics = SourceMetrics()
        self.claimer = Claimer(opts, self.ops, self.metrics)
        # latestOffset's probe when it claimed nothing: what reportLatestOffset shows then
        self.quiet_probes: list[consumers.Probe] | None = None
        self.last_offset: BatchOffset | None = None  # the batch latestOffset returned last

    def _discover(self) -> list[str]:
        o = self.opts
        assert o.stream_pattern is not None
        self.discovered_at = time.monotonic()
        exclude = [o.dead_letter_stream] if o.dead_letter_stream else []
        return consumers.discover(o.connection, o.stream_pattern, exclude)

    def _join(self, names: Sequence[str]) -> list[str]:
        """Streams join: their groups are created at ``startingPosition`` if missing."""
        o = self.opts
        assert o.group is not None
        new = [ConsumerOps(o.connection, s, o.group, o.consumer_name,
                           cache_ack_ids=o.ack_mode == "commit")
               for s in dict.fromkeys(names) if s not in self.ops]
        for op, made in zip(new, consumers.ensure_groups(new, o.starting_position),
                            strict=True):
            if made:
                log.info("spark-eventbus: created consumer group %r on stream %r at %s",
                         o.group, op.stream, o.starting_position)
            self.ops[op.stream] = op
        return [op.stream for op in new]

    def rediscover(self, run: str) -> bool:
        """``streamPattern``, every ``discoveryIntervalMs`` (between batches: the pre-claim is
        stopped): new matching streams join (group at ``startingPosition``, the consumer lease
        taken; a lease another live query holds stops this query, as at start), deleted ones
        leave (this consumer's plans, loss records and lease on them are dropped)."""
        o = self.opts
        if o.stream_pattern is None or \
                (time.monotonic() - self.discovered_at) * 1000 < o.discovery_interval_ms:
            return False
        names = self._discover()
        # not found by SCAN: confirmed gone (a cluster SCAN can miss a key being migrated)
        gone = consumers.missing([op for s, op in self.ops.items() if s not in set(names)])
        if gone:
            left = [self.ops.pop(s) for s in gone]
            self.lease.leave(left, run)
            consumers.forget(left)
            log.info("spark-eventbus: %d streams no longer match %r (deleted): %s", len(gone),
                     o.stream_pattern, ", ".join(gone[:10]))
            self.claimer.deleted(gone)  # unread entries: failOnDataLoss
        joined = self._join(names)
        if joined:
            self.lease.join([self.ops[s] for s in joined], run)
            log.info("spark-eventbus: %d new streams match %r: %s", len(joined),
                     o.stream_pattern, ", ".join(joined[:10]))
        return bool(joined)


class EventBusStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reader. Constructed cheaply (Spark builds it several times, also to pickle
    ``read`` into tasks); Redis is first touched by ``initialOffset``/``latestOffset``."""

    def __init__(self, options: ReaderOptions, schema: StructType) -> None:
        self.options = options
        self.spec = ReadSpec.of(options)
        self._driver: _Driver | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_driver"] = None
        return state

    @property
    def driver(self) -> _Driver:
        """Connect, check key types and create groups: once, before any batch."""
        if self._driver is None:
            self._driver = _Driver(self.options)
            _exit_cleanly_on_sigterm()
        return self._driver

    @property
    def ops(self) -> Mapping[str, ConsumerOps]:
        return self.driver.ops

    # -- DataSourceStreamReader ----------------------------------------------------------------

    def initialOffset(self) -> dict:
        claims = self.driver.claims
        if claims.initial_run is None:
            claims.initial_run = uuid.uuid4().hex
        self.driver.lease.hold(claims.initial_run)
        return BatchOffset(claims.initial_run, 0, {}).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.max_entries_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        ops = self.ops
        self.driver.claimer.stop_at(dict(zip(
            ops, consumers.last_generated_ids(list(ops.values())), strict=True)))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Plan the next batch: recover what is already claimed for it, then reclaim and claim.

        Spark has committed every batch up to ``start`` when it asks for the next one (it
        delays ``commit(start)`` until a later batch is planned), so ``start`` is acked here:
        in the background when a new batch is returned, at once otherwise.
        """
        d = self.driver
        o = self.options
        begin = self._offset(start)
        d.quiet_probes = None
        d.lease.hold(begin.run)
        interrupted = d.prefetch.stop()  # True: it was still claiming, more is waiting
        if d.rediscover(begin.run):
            d.claims.idle = None  # streams joined: look for their plans too
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
        quiet = d.claims.idle == (begin.run, seq)
        if d.claims.full_until is None:
            d.claims.full_until = seq + 1
        scope = [] if quiet else self._plan_scope(begin.run, seq)
        plans = consumers.plans(scope, begin.run, seq)
        for name, residue in zip((op.stream for op in scope), plans, strict=True):
            if residue:
                if d.claims.preclaimed_seq != seq:
                    log.warning("spark-eventbus: recovering %d entries of stream %r claimed by "
                                "a previous driver for batch %d", residue.count, name, seq)
                batches[name] = residue
        used = sum(b.count for b in batches.values())
        if self._hold_back(limit, used):  # minEntriesPerTrigger: not enough yet
            self._close_committed(begin)
            return start

        # 2. Top up within the allowance (planning.first_claim_allowance). Entries of `begin`
        #    are committed but not acked yet: protected from reclaim.
        allowed = first_claim_allowance(budget, used, interrupted, o.num_partitions,
                                        len(self.ops))
        if o.max_bytes_per_trigger is not None and used \
                and not d.claimer.knows_size(begin.run, seq):
            allowed = 0  # a plan left by a driver that died: its bytes are unknown, ship it
        probes = d.claimer.probe() if allowed is None or allowed > 0 else None
        if allowed is None or allowed > 0:
            # With acks at commit, this consumer's PEL holds `begin` until its ack (in the
            # background, after this) and what is already planned for `seq`: a stream whose
            # group has no more pending than that has nothing to reclaim (reclaim_all)
            mine: dict[str, int] | None = None
            if o.ack_mode == "commit":
                mine = {n: b.count for n, b in batches.items()}
                if d.claims.acked_seq < begin.seq:
                    for n, b in begin.streams.items():
                        mine[n] = mine.get(n, 0) + b.count
            for name, got in d.claimer.reclaim_all(allowed, begin.run, seq, begin.seq,
                                                   probes, mine).items():
                batches[name] = batches.get(name, StreamBatch()) + got
                allowed = None if allowed is None else allowed - got.count
        if allowed is None or allowed > 0:
            for name, got in d.claimer.claim_new(allowed, budget, begin.run, seq,
                                                 probes=probes).items():
                batches[name] = batches.get(name, StreamBatch()) + got

        d.metrics.planned = {name: (sum(c.count for c in b.chunks), len(b.reclaimed))
                             for name, b in batches.items()}
        # Nothing claimed: the progress report of this trigger shows what the probe saw.
        d.quiet_probes = probes if not any(batches.values()) else None
        first_plan, d.claims.planned_once = not d.claims.planned_once, True
        if not any(batches.values()):
            if first_plan and d.claimer.stop_after is None \
                    and not isinstance(limit, ReadAllAvailable):
                # Nothing to read yet: one empty batch now makes Spark start the Python
                # workers of this query's tasks (reader and sink), so that the first entries
                # to arrive do not wait for that start-up (partitions() below).
                self._start_prefetch(begin, budget, seq + 1, {})
                d.claims.last_batch_at = time.monotonic()
                return BatchOffset(begin.run, seq, {}).to_json()
            self._close_committed(begin)
            d.claims.idle = (begin.run, seq)
            return start  # the very same object: Spark compares offsets as JSON text
        # waitReplicas / waitAof: Spark logs this batch only once its plans (and any dead
        # letters the reclaim wrote beside them) are on the replicas, so that it replays
        # exactly from the new primary after a failover.
        if o.connection.waits:
            wait_for_writes(o.connection, [
                _plan_barrier(self.ops[n].plan_key, begin.run, seq, b)
                for n, b in batches.items() if b], f"recording the claim plan of batch {seq}")
        d.claimer.shipped(batches)  # before the pre-claim thread starts counting again
        self._start_prefetch(begin, budget, seq + 1, batches)
        d.claims.last_batch_at = time.monotonic()
        d.last_offset = BatchOffset(begin.run, seq, batches)
        return d.last_offset.to_json()

    def _offset(self, start: dict) -> BatchOffset:
        """``start`` parsed; the batch this driver returned last is not parsed again (with
        thousands of streams that costs more than a quiet trigger's Redis work)."""
        last = self.driver.last_offset
        if last is not None and start.get("run") == last.run and start.get("seq") == last.seq:
            return last
        return BatchOffset.from_json(start)

    def _hold_back(self, limit: ReadLimit, used: int) -> bool:
        """``minEntriesPerTrigger``: whether the next batch waits, with ``used`` entries already
        planned for it. Available = those + the groups' lag (``XINFO GROUPS``, or counted:
        ``ConsumerOps.available``); idle entries to reclaim are not counted. Never under
        ``Trigger.AvailableNow``, never past ``maxTriggerDelay`` since the last batch, never
        when the number available is unknown."""
        o, d = self.options, self.driver
        if o.min_entries_per_trigger is None or d.claimer.stop_after is not None \
                or isinstance(limit, ReadAllAvailable):
            return False
        waited_ms = (time.monotonic() - d.claims.last_batch_at) * 1000
        if waited_ms >= o.max_trigger_delay_ms:
            return False
        need = o.min_entries_per_trigger - used
        lags = [op.available(need) for op in self.ops.values()] if need > 0 else []
        available = None if None in lags else used + sum(x for x in lags if x is not None)
        return should_wait(o.min_entries_per_trigger, available, waited_ms,
                           o.max_trigger_delay_ms)

    def reportLatestOffset(self) -> dict | None:
        """Progress (``latestOffset`` of the source in each ``StreamingQueryProgress``): per
        stream ``entriesBehind`` (the group's lag from ``XINFO GROUPS``; None = unknown, e.g.
        Redis 7.0 after XDEL/trim; ``lag`` is the same value, kept for existing readers),
        pending count, last delivered ID and the planned batch's claimed and reclaimed counts;
        under ``_eventbus`` that batch's totals, ``entriesBehind`` summed (None if any stream's
        is unknown) and the query run's dead-lettered and lost counts."""
        out: dict[str, Any] = {}
        d = self.driver
        m = d.metrics
        probes, d.quiet_probes = d.quiet_probes, None
        found = [p.stats() for p in probes] if probes is not None and len(probes) == len(
            self.ops) and all(p.full for p in probes) else d.claimer.stats()
        behind: int | None = 0
        for name, stats in zip(self.ops, found, strict=True):
            claimed, reclaimed = m.planned.get(name, (0, 0))
            out[name] = {"entriesBehind": stats.lag, "lag": stats.lag, "pending": stats.pending,
                         "lastDeliveredId": stats.last_delivered, "claimed": claimed,
                         "reclaimed": reclaimed}
            behind = None if behind is None or stats.lag is None else behind + stats.lag
        out["_eventbus"] = {"claimed": sum(c for c, _ in m.planned.values()),
                            "reclaimed": sum(r for _, r in m.planned.values()),
                            "entriesBehind": behind,
                            "deadLettered": m.dead_lettered, "lostRanges": m.lost_ranges,
                            "lostEntries": m.lost_entries, "streams": len(self.ops)}
        return out

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if start == end:
            return []
        batch = self._offset(end)
        if not batch.streams:  # the warm-up batch (latestOffset): tasks that read nothing
            return [SlicePartition(self.spec, (), batch.run, batch.seq)
                    for _ in range(self.options.num_partitions)]
        # Packed across streams: tasks follow numPartitions and the data, not the streams.
        return [SlicePartition(self.spec, slices, batch.run, batch.seq)
                for slices in pack_partitions(batch.streams, self.options.num_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SlicePartition)
        return read_slices(partition)

    def commit(self, end: dict) -> None:
        offset = BatchOffset.from_json(end)
        d = self.driver
        if offset.seq > d.claims.ack_scheduled_seq:  # else the prefetcher acks it
            d.prefetch.join()
            self._ack(offset)

    def stop(self) -> None:
        """The query stops. Give the consumer leases back (first: the JVM may kill this process
        soon), then stop the pre-claim after its current chunk. Entries pre-claimed for the
        next batch stay in this consumer's plan: the next start of the query (same checkpoint)
        delivers them first."""
        d = self._driver
        if d is None:
            return
        d.lease.release()
        try:
            d.prefetch.stop()
        except Exception as exc:  # the query is stopping: its pre-claim stays in the plan
            log.warning("spark-eventbus: the pre-claim failed while the query stopped: %s", exc)
        self._driver = None

    # -- acks ----------------------------------------------------------------------------------

    def _close_committed(self, committed: BatchOffset) -> None:
        d = self.driver
        if d.claims.closed == (committed.run, committed.seq):
            return  # done already (a quiet trigger asks again with the same start)
        self._close(committed)
        d.claims.closed = (committed.run, committed.seq)

    def _plan_scope(self, run: str, seq: int) -> list[ConsumerOps]:
        """The streams where a plan of batch ``seq`` may exist: every stream while a driver
        before this one can have written it (:attr:`ClaimState.full_until`), else those this
        process's claims wrote into."""
        d = self.driver
        if d.claims.full_until is None or seq <= d.claims.full_until:
            return list(self.ops.values())
        return [op for name, op in self.ops.items() if name in d.claimer.written(run, seq)]

    def _close(self, committed: BatchOffset) -> None:
        """A batch Spark has committed: ack it (ackMode=commit), then drop plans up to it.

        Plans of earlier batches still present were committed too, but the driver died before
        acking them (the ack runs in the background while the next batch runs): ack them now
        rather than let them come back through reclaim as duplicates.
        """
        d = self.driver
        wrote = d.claimer.written_up_to(committed.run, committed.seq)
        if d.claims.full_until is None or committed.seq <= d.claims.full_until:
            ops = list(self.ops.values())
        else:  # plans and loss records only where this process claimed or the batch read
            ops = [op for name, op in self.ops.items()
                   if name in wrote or name in committed.streams]
        names = [op.stream for op in ops]
        plans = dict(zip(names, consumers.committed_plans(ops, committed.seq), strict=True))
        m = self.driver.metrics
        # Entries replays of this batch moved past (partition_reader: failOnDataLoss=false,
        # or a loss an operator accepted) are counted now that the batch is committed.
        entries, ranges = consumers.settle_all_losses(ops, committed.run, committed.seq)
        m.lost_entries += entries
        m.lost_ranges += ranges
        if self.options.ack_mode == "commit":
            earlier = [(op, StreamBatch.from_json(plan)) for op in ops
                       for field_, plan in plans[op.stream].items()
                       if int(field_) < committed.seq and plan.get("run") == committed.run]
            consumers.ack_many(earlier)
            self._acked([op.stream for op, _ in earlier])
        self._ack(committed)
        consumers.drop_plans(ops, [list(plans[name]) for name in names])
        d.claimer.forget_written(committed.run, committed.seq)
        self._trim_acked()

    def _ack(self, offset: BatchOffset) -> None:
        claims = self.driver.claims
        if self.options.ack_mode != "commit" or offset.seq <= claims.acked_seq:
            return
        consumers.ack_many([(self.ops[name], batch) for name, batch in offset.streams.items()
                            if name in self.ops])
        self._acked(list(offset.streams))
        claims.acked_seq = offset.seq

    def _acked(self, names: list[str]) -> None:
        """This driver acked entries of these streams: their groups changed (the next probe
        asks them), and trimAcked may trim them."""
        self.driver.claimer.touched(names)
        self.driver.claims.acked_since_trim.update(names)

    def _trim_acked(self) -> None:
        """``trimAcked``: after acks, at most once per ``trimIntervalMs``, remove from each
        stream what every group has acked (never an entry pending anywhere, never past a group
        that lags: :mod:`.redisio.retention`)."""
        claims, o = self.driver.claims, self.options
        now = time.monotonic()
        if not o.trim_acked or (now - claims.last_trim_at) * 1000 < o.trim_interval_ms:
            return
        claims.last_trim_at = now
        # Over many streams, the streams this query acked since the last trim, and every
        # stream every TRIM_ALL_EVERY-th time (another group's acks can free entries too).
        acked, claims.acked_since_trim = claims.acked_since_trim, set()
        everything = len(self.ops) < MANY_STREAMS or claims.trims % TRIM_ALL_EVERY == 0 \
            or o.ack_mode != "commit"  # acks this driver does not see (AckingBatchWriter)
        claims.trims += 1
        for name, op in list(self.ops.items()):
            if everything or name in acked:
                op.trim_acked()

    # -- the prefetcher: ack and pre-claim while Spark runs the batch --------------------------

    def _start_prefetch(self, committed: BatchOffset, budget: int | None, seq: int,
                        in_flight: Mapping[str, StreamBatch] | None = None) -> None:
        """While Spark runs batch ``seq - 1``: ack ``committed``, then reclaim and claim batch
        ``seq`` until its allowance is reached, the streams run dry, or the next
        ``latestOffset`` stops it (after the claim in progress).

        Safe to overlap with the batch: every claim script records what it takes in the plan
        of ``seq`` atomically, so the next ``latestOffset`` (in this process, or after a crash)
        finds it; reclaim never takes entries of plans from ``seq - 1`` on (the batch in flight).
        """
        d = self.driver
        run = committed.run

        def work(stop: threading.Event) -> bool:
            self._close_committed(committed)
            # A plan for `seq` may exist already (left by a driver that died): top it up.
            planned = sum(b.count for b in consumers.plans(self._plan_scope(run, seq), run,
                                                           seq))
            left = preclaim_allowance(budget, self.options.max_entries_per_trigger, planned)
            probes = d.claimer.probe() if left > 0 else None  # one for both
            if left > 0:
                # With acks at commit, the PEL holds the batch in flight and what is
                # reclaimable; other ack modes leave committed entries pending too.
                flying = {n: b.count for n, b in (in_flight or {}).items()} \
                    if self.options.ack_mode == "commit" else None
                for got in d.claimer.reclaim_all(left, run, seq, seq - 1, probes,
                                                 flying).values():
                    left -= got.count
            if left > 0:
                claimed = d.claimer.claim_new(left, budget, run, seq, stop, probes)
                left -= sum(b.count for b in claimed.values())
            return stop.is_set() and left > 0

        d.claims.ack_scheduled_seq = max(d.claims.ack_scheduled_seq, committed.seq)
        d.claims.preclaimed_seq = seq
        d.prefetch.start(work)


def _exit_cleanly_on_sigterm() -> None:
    """In Spark's source-runner process only: turn the JVM's SIGTERM (how it stops the runner
    when the query stops) into SystemExit, so that the runner's ``finally: reader.stop()`` runs
    and the consumer leases are given back at once instead of expiring. Later SIGTERMs are
    ignored so that they cannot interrupt ``stop()``."""
    if (os.path.basename(sys.argv[0] if sys.argv else "") != _RUNNER
            or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        return

    def on_term(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
