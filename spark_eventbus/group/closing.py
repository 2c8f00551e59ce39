"""Closing the batches Spark has committed (driver): acks (``ackMode=commit``), the plans and
loss records they leave, and ``trimAcked``.

Runs on the planning thread (``commit``, a quiet ``latestOffset``) or on the pre-claim thread
(:mod:`.prefetch`, while Spark runs the next batch), never both at once: the driver joins the
pre-claim before closing on the planning thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from ..core.offsets import BatchOffset, StreamBatch
from ..errors import EventBusError
from ..options.reader import ReaderOptions
from ..redisio import ConsumerOps, acks, manifests, plans
from .claimer import Claimer
from .ledger import ClaimState
from .loss_reports import SourceMetrics

log = logging.getLogger("spark_eventbus")

# trimAcked: every stream is trimmed every this many trims (the others, only the streams the
# query acked since the last one)
TRIM_ALL_EVERY = 10


class Closer:
    def __init__(self, options: ReaderOptions, ops: Mapping[str, ConsumerOps],
                 claims: ClaimState, claimer: Claimer, metrics: SourceMetrics) -> None:
        self.options = options
        self.ops = ops
        self.claims = claims
        self.claimer = claimer
        self.metrics = metrics

    def close_committed(self, committed: BatchOffset) -> None:
        """:meth:`close`, once per committed batch (a quiet trigger asks again with the same
        start)."""
        if self.claims.closed == (committed.run, committed.seq):
            return
        self.close(committed)
        self.claims.closed = (committed.run, committed.seq)

    def plan_scope(self, run: str, seq: int) -> list[ConsumerOps]:
        """The streams where a plan of batch ``seq`` may exist: those this process's claims
        wrote into, and while a driver before this one can have written it
        (:attr:`ClaimState.full_until`) the streams where one left plans or loss records
        (:attr:`ClaimState.earlier`)."""
        wrote = self.claimer.ledger.written(run, seq)
        earlier = self._earlier(seq)
        if earlier is None:
            return list(self.ops.values())
        return [op for name, op in self.ops.items() if name in wrote or name in earlier]

    def _earlier(self, seq: int) -> set[str] | None:
        """The streams where a driver before this one can have left plans or loss records of
        batch ``seq`` or earlier: none past :attr:`ClaimState.full_until`; None: any."""
        claims = self.claims
        if claims.full_until is None or seq <= claims.full_until:
            return claims.earlier
        return set()

    def close(self, committed: BatchOffset) -> None:
        """A batch Spark has committed: ack it (ackMode=commit), then drop plans up to it.

        Plans of earlier batches still present were committed too, but the driver died before
        acking them (the ack runs in the background while the next batch runs): ack them now
        rather than let them come back through reclaim as duplicates.
        """
        ledger = self.claimer.ledger
        wrote = ledger.written_up_to(committed.run, committed.seq)
        left = self._earlier(committed.seq)
        if left is None:
            ops = list(self.ops.values())
        else:  # plans and loss records only where this process claimed or the batch read,
            # and where a driver before this one left some
            ops = [op for name, op in self.ops.items()
                   if name in wrote or name in committed.streams or name in left]
        names = [op.stream for op in ops]
        # Read back even where this process wrote the only plan: a failover can have lost an
        # earlier close's acks and plan deletions, and those plans are acked below
        found = dict(zip(names, plans.committed_plans(ops, committed.seq), strict=True))
        # Entries replays of this batch moved past (partition_reader: failOnDataLoss=false,
        # or a loss an operator accepted) are counted now that the batch is committed.
        entries, ranges = plans.settle_all_losses(ops, committed.run, committed.seq)
        self.metrics.lost_entries += entries
        self.metrics.lost_ranges += ranges
        if self.options.ack_mode == "commit":
            earlier = [(op, StreamBatch.from_json(plan)) for op in ops
                       for plan in found[op.stream][1]
                       if plan.get("run") == committed.run]
            since = self.claimer.probes.generation()
            self._acked(acks.ack(earlier), since)
        self.ack(committed)
        plans.drop_plans(ops, [found[name][0] for name in names])
        ledger.forget_written(committed.run, committed.seq)
        self._drop_contents(committed.seq)
        self._trim_acked()

    def _drop_contents(self, committed: int) -> None:
        """The kept contents of large batches before ``committed`` (closed now): no offset
        Spark gives back names them any more. The committed batch's own stay until the next
        close: a restart gives its offset back as the next batch's start. Best effort: a key
        left behind expires (BOOKKEEPING_TTL_MS)."""
        # a copy first: the planning thread records the batches it reads meanwhile
        done = sorted(seq for seq in list(self.claims.contents) if seq < committed)
        keys = [k for k in (self.claims.contents.pop(seq, None) for seq in done) if k]
        if not keys:
            return
        try:
            manifests.drop(self.options.connection, keys)
        except EventBusError as exc:
            log.debug("spark-eventbus: could not drop the contents of closed batches: %s", exc)

    def ack(self, offset: BatchOffset) -> None:
        """ackMode=commit: ack every entry of batch ``offset`` (once)."""
        claims = self.claims
        if self.options.ack_mode != "commit" or offset.seq <= claims.acked_seq:
            return
        since = self.claimer.probes.generation()
        self._acked(acks.ack([(self.ops[name], batch) for name, batch in offset.streams.items()
                              if name in self.ops]), since)
        claims.acked_seq = offset.seq

    def _acked(self, counts: Mapping[str, int], since: int) -> None:
        """This driver acked ``counts[stream]`` entries of these streams (XACK's counts; sent
        at probe generation ``since``): their groups' pending counts follow
        (:meth:`.probe_cache.ProbeCache.acked`), and trimAcked may trim them."""
        self.claimer.probes.acked(counts, since)
        self.claims.acked_since_trim.update(counts)

    def _trim_acked(self) -> None:
        """``trimAcked``: after acks, at most once per ``trimIntervalMs``, remove from each
        stream what every group has acked (never an entry pending anywhere, never past a group
        that lags: :mod:`.redisio.retention`)."""
        claims, o = self.claims, self.options
        now = time.monotonic()
        if not o.trim_acked or (now - claims.last_trim_at) * 1000 < o.trim_interval_ms:
            return
        claims.last_trim_at = now
        # The streams this query acked since the last trim, and every stream every
        # TRIM_ALL_EVERY-th time (another group's acks can free entries too).
        acked, claims.acked_since_trim = claims.acked_since_trim, set()
        everything = claims.trims % TRIM_ALL_EVERY == 0 \
            or o.ack_mode != "commit"  # acks this driver does not see (AckingBatchWriter)
        claims.trims += 1
        trimmed = acks.trim_acked([op for name, op in list(self.ops.items())
                                   if everything or name in acked])
        self.claimer.probes.touched(trimmed)  # their first entries and lengths moved
