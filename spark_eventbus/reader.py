"""The reader: consumer-group reads mapped onto replayable micro-batch offsets.

Driver side (:class:`EventBusStreamReader` methods ``initialOffset``, ``latestOffset``,
``partitions``, ``commit``) decides *what a batch contains* and records it in the offset.
Executor side (:func:`read_slice`, reached through ``read``) replays exactly that with
``XRANGE`` — never a PEL history read, which would bump delivery counts and return ``nil`` for
deleted entries. The same offset therefore yields the same rows on every retry.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import redis
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .commands import ClaimResult, StreamOps, stream_exists
from .connection import ConnectionSpec, client
from .errors import ConfigError, DataLossError, EventBusError, translate
from .ids import StreamId
from .offsets import BatchOffset, StreamBatch
from .options import ReaderOptions
from .planning import Slice, claim_chunk_size, share_budget, split_id_range, split_partitions
from .schema import BatchBuilder, ValueParser, output_schema, parse_value_schema

log = logging.getLogger("spark_eventbus")

# Entries per XRANGE page on executors and per Arrow batch: bounds worker memory whatever the
# batch size (~200-byte entries: ~1 MB of reply per page). A thread prefetching the next page
# measured no gain (the read is CPU-bound on this machine), so there is none.
# Pages never cross a claim chunk (2,000 entries), so batches are usually 2,000 rows; coalescing
# them to 5,000 measured ~8% slower (the JVM waits longer for its first rows).
READ_PAGE = 5_000
# XAUTOCLAIM COUNT per script call: it scans at most 10x this many PEL entries.
RECLAIM_PAGE = 500
# The consumer lease (lua/lease.lua): a live query renews it every LEASE_RENEW_S; a query
# killed with kill -9 keeps a successor with another checkpoint out for at most LEASE_TTL_MS
# (the successor waits that long for it, then starts or is refused).
LEASE_TTL_MS = 15_000
LEASE_RENEW_S = LEASE_TTL_MS / 3000
# Spark's driver-side process for a Python streaming source; the JVM ends it with SIGTERM.
_RUNNER = "python_streaming_source_runner.py"


@dataclass(frozen=True)
class ReadSpec:
    """Everything ``read()`` needs on an executor: primitives only (pickled into tasks)."""

    conn: ConnectionSpec
    group: str | None
    consumer: str | None
    fields_binary: bool
    value_field: str
    value_schema: str | None
    fail_on_data_loss: bool
    ack_mode: str


class EventBusPartition(InputPartition):
    """One Spark task's share of a batch: a :class:`Slice` (streaming) or an XRANGE (batch)."""

    def __init__(self, spec: ReadSpec, slice: Slice | None = None, stream: str | None = None,
                 range_start: str | None = None, range_end: str | None = None) -> None:
        super().__init__(None)
        self.spec = spec
        self.slice = slice
        self.stream = stream
        self.range_start = range_start
        self.range_end = range_end

    def __repr__(self) -> str:
        if self.slice is not None:
            return (f"EventBusPartition({self.slice.stream!r}, {len(self.slice.chunks)} chunks, "
                    f"{len(self.slice.reclaimed)} reclaimed, {self.slice.count} entries)")
        return f"EventBusPartition({self.stream!r}, {self.range_start}..{self.range_end})"


def _read_spec(opts: ReaderOptions) -> ReadSpec:
    return ReadSpec(ConnectionSpec(opts.url, opts.password), opts.group, opts.consumer_name
                    if opts.group else None, opts.fields_binary, opts.value_field,
                    opts.value_schema, opts.fail_on_data_loss, opts.ack_mode)


# ---------------------------------------------------------------------------------------------
# Executor side


def _builder(spec: ReadSpec) -> BatchBuilder:
    vs = parse_value_schema(spec.value_schema) if spec.value_schema else None
    return BatchBuilder(output_schema(vs, fields_binary=spec.fields_binary),
                        fields_binary=spec.fields_binary,
                        value_parser=ValueParser(spec.value_field, vs) if vs else None)


def _raw_client(spec: ConnectionSpec) -> redis.Redis:
    """The cached client, with XRANGE replies left raw (lists, not dicts): hiredis-fast."""
    c = client(spec)
    c.set_response_callback("XRANGE", lambda r, **kw: r)
    return c


def _xrange_pages(r: redis.Redis, stream: str, start: str, end: str) -> Iterator[list[Any]]:
    lo = start
    while True:
        page = r.execute_command("XRANGE", stream, lo, end, "COUNT", READ_PAGE)
        if page:
            yield page
        if len(page) < READ_PAGE:
            return
        lo = "(" + page[-1][0].decode()


def read_slice(spec: ReadSpec, sl: Slice) -> Iterator[pa.RecordBatch]:
    """Executor: replay one slice of a batch with XRANGE, as Arrow batches of <= READ_PAGE rows.

    Entries deleted or trimmed since they were claimed are missing from XRANGE: with
    ``failOnDataLoss`` the task fails naming them; otherwise they are logged and acked (except
    with ``ackMode=none``) so no PEL residue is left.
    """
    r = _raw_client(spec.conn)
    build = _builder(spec)
    missing: list[str] = []
    try:
        pages = ((chunk, page) for chunk in sl.chunks
                 for page in _xrange_pages(r, sl.stream, chunk.first, chunk.last))
        got: dict[str, int] = {}
        for chunk, page in pages:
            got[chunk.first] = got.get(chunk.first, 0) + len(page)
            yield build.build(sl.stream, page, 1)
        for chunk in sl.chunks:
            if got.get(chunk.first, 0) != chunk.count:
                missing += _missing_in_chunk(r, spec, sl.stream, chunk.first, chunk.last)
        for k in range(0, len(sl.reclaimed), READ_PAGE):
            part = sl.reclaimed[k:k + READ_PAGE]
            pipe = r.pipeline(transaction=False)
            for entry_id, _ in part:
                pipe.execute_command("XRANGE", sl.stream, entry_id, entry_id)
            rows, counts = [], []
            for (entry_id, deliveries), res in zip(part, pipe.execute(), strict=True):
                if res:
                    rows.append(res[0])
                    counts.append(deliveries)
                else:
                    missing.append(entry_id)
            if rows:
                yield build.build(sl.stream, rows, counts)
    except redis.RedisError as exc:
        raise translate(exc, f"reading stream {sl.stream!r} at {spec.conn.display}",
                        spec.conn.secrets) from exc
    if missing:
        _handle_missing(r, spec, sl.stream, missing)


def _missing_in_chunk(r: redis.Redis, spec: ReadSpec, stream: str, first: str, last: str
                      ) -> list[str]:
    """IDs this consumer has pending in [first, last] that the stream no longer holds."""
    assert spec.group is not None and spec.consumer is not None
    pel: Any = r.xpending_range(stream, spec.group, first, last, 100_000,
                                consumername=spec.consumer)
    pending = [e["message_id"].decode() if isinstance(e["message_id"], bytes)
               else str(e["message_id"]) for e in pel]
    present: set[str] = set()
    for page in _xrange_pages(r, stream, first, last):
        present.update(e[0].decode() for e in page)
    gone = [i for i in pending if i not in present]
    return gone or [f"{first}..{last}"]


def _handle_missing(r: redis.Redis, spec: ReadSpec, stream: str, missing: list[str]) -> None:
    shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10
                                       else "")
    if spec.fail_on_data_loss:
        raise DataLossError(
            f"{len(missing)} entries of stream {stream!r} were deleted or trimmed after this "
            f"query claimed them and before it read them: {shown}. Keep the stream longer "
            "(MAXLEN/MINID) than the query's lag, or set option 'failOnDataLoss' to 'false' "
            "to skip them with a warning.")
    log.warning("spark-eventbus: skipping %d entries of stream %r deleted before they were "
                "read (failOnDataLoss=false): %s", len(missing), stream, shown)
    ids = [i for i in missing if ".." not in i]
    if spec.ack_mode != "none" and ids and spec.group:
        for k in range(0, len(ids), 1000):
            r.xack(stream, spec.group, *ids[k:k + 1000])


def read_range(spec: ReadSpec, stream: str, start: str, end: str) -> Iterator[pa.RecordBatch]:
    """Executor: a batch read of ``XRANGE start end``, paged."""
    r = _raw_client(spec.conn)
    build = _builder(spec)
    try:
        for page in _xrange_pages(r, stream, start, end):
            yield build.build(stream, page, None)
    except redis.RedisError as exc:
        raise translate(exc, f"reading stream {stream!r} at {spec.conn.display}",
                        spec.conn.secrets) from exc


# ---------------------------------------------------------------------------------------------
# Driver side: streaming


@dataclass
class _DriverState:
    """Per-query state of the driver's reader process (never pickled)."""

    ops: dict[str, StreamOps]
    acked_seq: int = -1
    stop_after: dict[str, str | None] | None = None  # Trigger.AvailableNow targets
    reclaim_cursor: dict[str, str] = field(default_factory=dict)
    reclaim_done: set[str] = field(default_factory=set)
    reported_losses: set[tuple[str, str]] = field(default_factory=set)
    lost_ranges: int = 0
    background: threading.Thread | None = None
    background_error: BaseException | None = None
    background_stop: threading.Event | None = None
    background_busy: bool = False
    preclaimed_seq: int = -1
    ack_scheduled_seq: int = -1
    lost_entries: int = 0
    dead_lettered: int = 0
    owner: str = field(default_factory=lambda: uuid.uuid4().hex[:12])  # this driver process
    initial_run: str | None = None  # initialOffset's run: Spark may ask more than once
    lease_run: str | None = None  # the run whose leases this process holds
    lease_stop: threading.Event = field(default_factory=threading.Event)
    lease_thread: threading.Thread | None = None
    lease_error: EventBusError | None = None  # set by the heartbeat: another query took over


class EventBusStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reader. Constructed cheaply (Spark builds it several times, also to pickle
    ``read`` into tasks); Redis is first touched by ``initialOffset``/``latestOffset``."""

    def __init__(self, options: ReaderOptions, schema: StructType) -> None:
        self.options = options
        self.spec = _read_spec(options)
        self._state: _DriverState | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_state"] = None
        return state

    # -- driver helpers ------------------------------------------------------------------------

    @property
    def state(self) -> _DriverState:
        if self._state is None:
            o = self.options
            assert o.group is not None
            ops = {s: StreamOps(self.spec.conn, s, o.group, o.consumer_name,
                                cache_ack_ids=o.ack_mode == "commit") for s in o.streams}
            for s, op in ops.items():
                if op.ensure_group(o.starting_position):
                    log.info("spark-eventbus: created consumer group %r on stream %r at %s",
                             o.group, s, o.starting_position)
            self._state = _DriverState(ops)
            _exit_cleanly_on_sigterm()
        return self._state

    def _settle(self, committed: BatchOffset) -> None:
        """A batch Spark has committed: ack it (ackMode=commit), then drop plans up to it.

        Plans of earlier batches still present were committed too, but the driver died before
        acking them (the ack runs in the background while the next batch runs): ack them now
        rather than let them come back through reclaim as duplicates.
        """
        plans = {name: op.committed_plans(committed.seq) for name, op in self.state.ops.items()}
        if self.options.ack_mode == "commit":
            for name, op in self.state.ops.items():
                for field_, plan in plans[name].items():
                    if int(field_) < committed.seq and plan.get("run") == committed.run:
                        op.ack(StreamBatch.from_json(plan))
        self._ack(committed)
        for name, op in self.state.ops.items():
            op.drop_plans(plans[name])

    def _ack(self, offset: BatchOffset) -> None:
        st = self.state
        if self.options.ack_mode != "commit" or offset.seq <= st.acked_seq:
            return
        for name, batch in offset.streams.items():
            if name in st.ops:
                st.ops[name].ack(batch)
        st.acked_seq = offset.seq

    # -- DataSourceStreamReader ----------------------------------------------------------------

    # -- the consumer lease: one live query per (stream, group, consumer) ---------------------

    def _hold_lease(self, run: str) -> None:
        """Driver, before any claim: take this query's consumer lease on every stream, or fail
        naming option 'consumer' when another live query holds it. Idempotent per run."""
        st = self.state
        if st.lease_error is not None:
            raise st.lease_error
        if st.lease_run == run:
            return
        o = self.options
        taken: list[StreamOps] = []
        for name, op in st.ops.items():
            status, holder, _ = self._acquire(op, run)
            if status == "held":
                for done in taken:
                    _release_lease(done, run, st.owner)
                raise ConfigError(
                    f"option 'consumer' = {o.consumer_name!r} of group {o.group!r} on stream "
                    f"{name!r} is in use by another running query (checkpoint run "
                    f"{holder.split(' ')[0]}); two live queries with one consumer would share "
                    "its pending entries and claim plan. Give each concurrent query its own "
                    ".option('consumer', …), or stop the other query. (It renewed its lease "
                    f"while this query waited {LEASE_TTL_MS // 1000} s for it: it is alive.)")
            if status == "takeover":
                log.warning("spark-eventbus: taking over consumer %r of group %r on stream %r "
                            "from an earlier driver of this checkpoint", o.consumer_name,
                            o.group, name)
            taken.append(op)
        st.lease_run = run
        if st.lease_thread is None:
            st.lease_thread = threading.Thread(target=self._renew_leases, args=(st,),
                                               name="eventbus-lease", daemon=True)
            st.lease_thread.start()

    def _acquire(self, op: StreamOps, run: str) -> tuple[str, str, int]:
        """Take the lease; while another query holds it, wait up to its TTL: a holder that was
        killed lets it expire (then it is ours), a live one renews it (then it stays 'held')."""
        owner = self.state.owner
        status, holder, pttl = op.lease("acquire", run, owner, LEASE_TTL_MS)
        deadline = time.monotonic() + LEASE_TTL_MS / 1000 + 1
        while status == "held" and time.monotonic() < deadline:
            time.sleep(0.25)
            last = pttl
            status, holder, pttl = op.lease("acquire", run, owner, LEASE_TTL_MS)
            if status == "held" and pttl > last + 500:
                break  # renewed: its holder is alive
        return status, holder, pttl

    def _renew_leases(self, st: _DriverState) -> None:
        """Heartbeat thread: renew the leases until ``stop``; record a takeover for the next
        ``latestOffset`` to raise. Redis errors are retried at the next beat (the lease
        outlives two missed beats)."""
        while not st.lease_stop.wait(LEASE_RENEW_S):
            run = st.lease_run
            if run is None:
                continue
            for name, op in st.ops.items():
                try:
                    status, holder, _ = op.lease("renew", run, st.owner, LEASE_TTL_MS)
                except EventBusError as exc:
                    log.debug("spark-eventbus: could not renew the consumer lease: %s", exc)
                    continue
                if status == "lost":
                    st.lease_error = EventBusError(
                        f"consumer {self.options.consumer_name!r} of group "
                        f"{self.options.group!r} on stream {name!r} was taken over by another "
                        f"query (checkpoint run {holder.split(' ')[0]}) while this one was "
                        "not renewing its lease; this query stops so that the two do not "
                        "share pending entries. Give each concurrent query its own option "
                        "'consumer'.")
                    return

    def _release_leases(self, st: _DriverState) -> None:
        st.lease_stop.set()
        if st.lease_thread is not None:  # wakes at once; a renewal in flight could re-create
            st.lease_thread.join()       # the lease after the release below
        if st.lease_run is not None:
            for op in st.ops.values():
                _release_lease(op, st.lease_run, st.owner)

    def initialOffset(self) -> dict:
        st = self.state  # connect, check types and create groups before any batch
        if st.initial_run is None:
            st.initial_run = uuid.uuid4().hex
        run = st.initial_run
        self._hold_lease(run)
        return BatchOffset(run, 0, {}).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.max_entries_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        st = self.state
        st.stop_after = {s: op.last_generated_id() for s, op in st.ops.items()}
        st.reclaim_done.clear()
        st.reclaim_cursor.clear()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Plan the next batch: recover what is already claimed for it, then reclaim and claim.

        Spark has committed every batch up to ``start`` when it asks for the next one (it
        delays ``commit(start)`` until a later batch is planned), so ``start`` is acked here:
        in the background when a new batch is returned, at once otherwise.
        """
        st = self.state
        o = self.options
        begin = BatchOffset.from_json(start)
        self._hold_lease(begin.run)
        busy = self._stop_background()  # True: it was still claiming, more is waiting
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
        for name, op in st.ops.items():
            residue = op.load_plan(begin.run, seq)
            if residue:
                if st.preclaimed_seq != seq:
                    log.warning("spark-eventbus: recovering %d entries of stream %r claimed by "
                                "a previous driver for batch %d", residue.count, name, seq)
                batches[name] = residue
        used = sum(b.count for b in batches.values())
        left = None if budget is None else max(0, budget - used)

        # 2. Top up, unless the pre-claim was interrupted (more entries are waiting: they go to
        #    the next batch, claimed while this one runs). Claims made here delay the batch, so
        #    they are capped at one chunk per partition ("quick start"); the rest is pre-claimed.
        #    Entries of `begin` are committed but not acked yet: protected from reclaim.
        allowed = left
        if busy and used:
            allowed = 0
        elif left is not None:
            quick = claim_chunk_size(budget, o.num_partitions, len(st.ops)) * o.num_partitions
            allowed = min(left, quick * len(st.ops))
        if allowed is None or allowed > 0:
            for name, got in self._reclaim_all(allowed, begin.run, seq, begin.seq).items():
                batches[name] = batches.get(name, StreamBatch()) + got
                allowed = None if allowed is None else allowed - got.count
        if allowed is None or allowed > 0:
            for name, got in self._claim_new(allowed, budget, begin.run, seq).items():
                batches[name] = batches.get(name, StreamBatch()) + got

        if not any(batches.values()):
            self._settle(begin)
            return start  # the very same object: Spark compares offsets as JSON text
        self._start_background(begin, budget, seq + 1)
        return BatchOffset(begin.run, seq, batches).to_json()

    def _reclaim_all(self, left: int | None, run: str, seq: int, protect_from: int
                     ) -> dict[str, StreamBatch]:
        """Reclaim up to ``min(reclaimMaxEntries, left)`` entries, shared across streams."""
        o = self.options
        if not o.reclaim_enabled:
            return {}
        st = self.state
        budget = o.reclaim_max_entries if left is None else min(o.reclaim_max_entries, left)
        out: dict[str, StreamBatch] = {}
        for (name, op), grant in zip(st.ops.items(),
                                     share_budget(budget, [budget] * len(st.ops)), strict=True):
            got = self._reclaim(name, op, grant, run, seq, protect_from)
            if got:
                out[name] = got
        return out

    def _claim_new(self, left: int | None, budget: int | None, run: str, seq: int,
                   stop: threading.Event | None = None) -> dict[str, StreamBatch]:
        """Claim up to ``left`` new entries (all when None), shared fairly across streams."""
        st = self.state
        chunk_size = claim_chunk_size(budget, self.options.num_partitions, len(st.ops))
        grants = (share_budget(left, [left] * len(st.ops)) if left is not None
                  else [2**62] * len(st.ops))
        out: dict[str, StreamBatch] = {}
        claimed, filled = 0, []
        for (name, op), grant in zip(st.ops.items(), grants, strict=True):
            got = self._claim(name, op, grant, chunk_size, run, seq, stop)
            claimed += got.count
            if got:
                out[name] = got
            if grant and got.count >= grant:
                filled.append((name, op))
        spare = 0 if left is None else left - claimed
        for name, op in filled:  # streams that ran dry leave their share to the others
            if spare <= 0:
                break
            got = self._claim(name, op, spare, chunk_size, run, seq, stop)
            if got:
                out[name] = out[name] + got
                spare -= got.count
        return out

    # -- background: overlap acking and the next batch's claims with the current batch ------

    def _start_background(self, committed: BatchOffset, budget: int | None, seq: int) -> None:
        """While Spark runs batch ``seq - 1``: ack ``committed``, then reclaim and claim batch
        ``seq`` (the pre-claim) until the budget is reached, the streams run dry, or the next
        ``latestOffset`` stops it (after the chunk in progress).

        Claiming is serial Redis work (~4.3 us/entry of Redis CPU inside Lua) and acking
        ~0.5 us/entry (a plain XACK of the IDs the claim returned, see StreamOps.ack); the
        read runs on the executors. Overlapping them is safe: every claim script records what it
        takes in the plan of ``seq`` atomically, so the next ``latestOffset`` (in this process,
        or after a crash) finds it; reclaim never takes entries of plans from ``seq - 1`` on
        (the batch in flight).
        """
        st = self.state
        size = budget if budget is not None else self.options.max_entries_per_trigger
        run = committed.run
        stop = threading.Event()

        def work() -> None:
            try:
                self._settle(committed)
                # A plan for `seq` may exist already (left by a driver that died): top it up.
                planned = sum(op.load_plan(run, seq).count for op in st.ops.values())
                left = size - planned
                if left > 0:
                    for got in self._reclaim_all(left, run, seq, seq - 1).values():
                        left -= got.count
                if left > 0:
                    claimed = self._claim_new(left, budget, run, seq, stop)
                    left -= sum(b.count for b in claimed.values())
                st.background_busy = stop.is_set() and left > 0
            except BaseException as exc:  # re-raised by the next latestOffset
                st.background_error = exc

        st.ack_scheduled_seq = max(st.ack_scheduled_seq, committed.seq)
        st.preclaimed_seq = seq
        st.background_stop = stop
        st.background_busy = False
        st.background = threading.Thread(target=work, name="eventbus-preclaim", daemon=True)
        st.background.start()

    def _stop_background(self) -> bool:
        """Stop the pre-claim after its current chunk and wait for it. True when it was
        interrupted while entries were still coming (the next batch should not wait)."""
        st = self.state
        if st.background_stop is not None:
            st.background_stop.set()
        return self._join_background()

    def _join_background(self) -> bool:
        st = self.state
        if st.background is not None:
            st.background.join()
            st.background = None
        busy, st.background_busy = st.background_busy, False
        if st.background_error is not None:
            err, st.background_error = st.background_error, None
            raise err
        return busy

    def _claim(self, name: str, op: StreamOps, budget: int, chunk_size: int, run: str,
               seq: int, stop: threading.Event | None = None) -> StreamBatch:
        st = self.state
        stop_after = st.stop_after.get(name) if st.stop_after is not None else None
        if st.stop_after is not None and stop_after is None:
            return StreamBatch()  # the stream did not exist when AvailableNow began
        chunks = []
        while budget > 0 and not (stop is not None and stop.is_set()):
            res = op.claim(min(chunk_size, budget), run, seq, stop_after,
                           self.options.fail_on_data_loss)
            if res.lost_after:
                self._report_loss(name, res)
            if res.status == "nogroup":
                raise EventBusError(
                    f"consumer group {self.options.group!r} of stream {name!r} disappeared while "
                    "the query ran (XGROUP DESTROY or the key was deleted); restart the query "
                    "to recreate it.")
            if res.chunk is None:
                break
            chunks.append(res.chunk)
            budget -= res.chunk.count
            if res.chunk.count < chunk_size:
                break
        return StreamBatch(tuple(chunks))

    def _report_loss(self, name: str, res: ClaimResult) -> None:
        st = self.state
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
        if key not in st.reported_losses:
            st.reported_losses.add(key)
            st.lost_ranges += 1
            st.lost_entries += max(0, res.lost_count)
            log.warning("spark-eventbus: %s; skipping them (failOnDataLoss=false)", text)

    def _reclaim(self, name: str, op: StreamOps, budget: int, run: str, seq: int,
                 protect_from: int) -> StreamBatch:
        st = self.state
        o = self.options
        if budget <= 0 or name in st.reclaim_done:
            return StreamBatch()
        taken: list[tuple[str, int]] = []
        cursor = st.reclaim_cursor.get(name, "0-0")
        stop_after = st.stop_after.get(name) if st.stop_after is not None else None
        # At most a few passes per batch: every XAUTOCLAIM call is bounded server-side.
        for _ in range(max(4, budget // RECLAIM_PAGE + 2)):
            res = op.reclaim(cursor, min(RECLAIM_PAGE, budget - len(taken)), o.claim_min_idle_ms,
                             run, seq, o.max_deliveries, o.dead_letter_stream, protect_from)
            taken += res.taken
            st.dead_lettered += res.dead_lettered
            if res.dead_lettered:
                log.warning("spark-eventbus: moved %d entries of stream %r delivered more than "
                            "%d times to %r", res.dead_lettered, name, o.max_deliveries,
                            o.dead_letter_stream)
            if res.deleted:
                self._deleted_while_pending(name, res.deleted)
            cursor = res.cursor
            if cursor == "0-0" or (stop_after is not None
                                   and StreamId.parse(cursor) > StreamId.parse(stop_after)):
                cursor = "0-0"
                if st.stop_after is not None:
                    st.reclaim_done.add(name)  # AvailableNow: one pass over the PEL is enough
                break
            if len(taken) >= budget:
                break
        st.reclaim_cursor[name] = cursor
        return StreamBatch((), tuple(taken))

    def _deleted_while_pending(self, name: str, ids: Sequence[str]) -> None:
        shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"{len(ids)} pending entries of stream {name!r} were deleted before they were "
                f"processed: {shown}. Redis has removed them from group "
                f"{self.options.group!r}'s pending list. Set option 'failOnDataLoss' to "
                "'false' to skip such entries with a warning.")
        self.state.lost_ranges += 1
        log.warning("spark-eventbus: %d pending entries of stream %r were deleted before they "
                    "were processed (failOnDataLoss=false): %s", len(ids), name, shown)

    def reportLatestOffset(self) -> dict | None:
        """Progress: per stream lag (None = unknown on Redis 7.0 after XDEL/trim) and pending."""
        st = self.state
        out: dict[str, Any] = {}
        for name, op in st.ops.items():
            stats = op.stats()
            out[name] = {"lag": stats.lag, "pending": stats.pending,
                         "lastDeliveredId": stats.last_delivered}
        out["_eventbus"] = {"lostRanges": st.lost_ranges, "lostEntries": st.lost_entries,
                           "deadLettered": st.dead_lettered}
        return out

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if start == end:
            return []
        batch = BatchOffset.from_json(end)
        parts: list[InputPartition] = []
        for name in sorted(batch.streams):
            for sl in split_partitions(name, batch.streams[name], self.options.num_partitions):
                parts.append(EventBusPartition(self.spec, sl))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, EventBusPartition) and partition.slice is not None
        return read_slice(partition.spec, partition.slice)

    def commit(self, end: dict) -> None:
        offset = BatchOffset.from_json(end)
        if offset.seq > self.state.ack_scheduled_seq:  # else the background thread acks it
            self._join_background()
            self._ack(offset)

    def stop(self) -> None:
        """Driver: the query stops. Give the consumer leases back (first: the JVM may kill this
        process soon), then stop the pre-claim after its current chunk. Entries pre-claimed for
        the next batch stay in this consumer's plan: the next start of the query (same
        checkpoint) delivers them first."""
        st = self._state
        if st is None:
            return
        if st.background_stop is not None:
            st.background_stop.set()
        self._release_leases(st)
        if st.background is not None:
            st.background.join()
        self._state = None


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


def _release_lease(op: StreamOps, run: str, owner: str) -> None:
    """Give a consumer lease back (best effort: it expires on its own)."""
    try:
        op.lease("release", run, owner, LEASE_TTL_MS)
    except EventBusError as exc:
        log.debug("spark-eventbus: could not release the consumer lease: %s", exc)


# ---------------------------------------------------------------------------------------------
# Batch reads


class EventBusBatchReader(DataSourceReader):
    """``spark.read.format("eventbus")``: XRANGE ``startId``..``endId`` per stream, split by ID
    time into ``numPartitions`` ranges (even in time, not necessarily in count)."""

    def __init__(self, options: ReaderOptions) -> None:
        self.options = options
        self.spec = _read_spec(options)

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        r = client(self.spec.conn)
        parts: list[InputPartition] = []
        try:
            for stream in o.streams:
                if not stream_exists(r, stream, f"Server: {self.spec.conn.display}. Choose "
                                     "another 'stream' option."):
                    continue
                first: Any = r.xrange(stream, o.start_id, o.end_id, count=1)
                last: Any = r.xrevrange(stream, o.end_id, o.start_id, count=1)
                if not first:
                    continue
                lo = StreamId.parse(first[0][0])
                hi = StreamId.parse(last[0][0])
                ranges = split_id_range(lo.ms, hi.ms, o.num_partitions)
                for i, (a, b) in enumerate(ranges):
                    start = str(lo) if i == 0 else f"{a}-0"
                    end = str(hi) if i == len(ranges) - 1 else f"{b}-{2**64 - 1}"
                    parts.append(EventBusPartition(self.spec, None, stream, start, end))
        except redis.RedisError as exc:
            raise translate(exc, f"planning a batch read at {self.spec.conn.display}",
                            self.spec.conn.secrets) from exc
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, EventBusPartition)
        assert partition.stream and partition.range_start and partition.range_end
        return read_range(partition.spec, partition.stream, partition.range_start,
                          partition.range_end)
