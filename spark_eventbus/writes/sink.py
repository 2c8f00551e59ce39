"""The sink: ``df.writeStream.format("eventbus")`` and ``df.write.format("eventbus")``.

Driver side: the writer objects check options, schema and target keys before any task runs,
and after each batch commits prune the idempotency markers Spark no longer needs.
Executor side: :func:`write_partition` encodes Arrow batches (:mod:`.encoding`), cuts them into
chunks (:mod:`.chunking`) and writes each chunk with :func:`.redisio.write_chunk`: one
transaction (``WATCH`` the marker set of this (stream, query, batch, partition), then
``MULTI``, the ``XADD``s, the marker ``<partition>:<chunk>``, ``EXEC``). A replayed
batch — task retry, speculative attempt, or the whole batch again after a driver crash — finds
the markers of chunks already written and adds nothing twice.

Markers of batch N are kept until batch N+1 commits: Spark starts batch N+1 only after batch N
is in its commit log, so from then on batch N is never replayed. But an attempt Spark has given
up on may still be writing (a failed attempt's Python worker writes out the input it had
received; a speculative copy that lost runs until killed), so before the markers go the driver
raises the seal of their (stream, query) to their batch, and a chunk transaction also
``WATCH``es the seal: such a late attempt writes nothing.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from ..core.keys import (
    BOOKKEEPING_TTL_MS,
    sink_marker_key,
    sink_registry_key,
    sink_seal_key,
    sink_seal_of_marker,
)
from ..core.worker_gc import settle
from ..errors import ConfigError, EventBusError, UnwritableRowError
from ..options.writer import SinkOptions
from ..redisio import (
    NO_TRIM,
    SEALED,
    WRITTEN,
    Barrier,
    Trim,
    check_acked_trim,
    check_streams,
    check_transactions,
    delete_keys,
    forget_batches,
    preflight,
    record_markers,
    seal_batches,
    wait_for_writes,
    write_chunk,
)
from .sink_schema import EncodingPlan

if TYPE_CHECKING:
    import pyarrow as pa

    from .chunking import WriteChunk
    from .encoding import Reject

log = logging.getLogger("spark_eventbus")

MARKER_TTL_MS = BOOKKEEPING_TTL_MS  # safety net for abandoned queries; see docs/key-layout.md
# A one-off write's seals (its query is a fresh id): they outlast its late attempts, which run
# on for seconds, by far; a streaming query's are renewed at each commit (MARKER_TTL_MS).
ONE_OFF_SEAL_TTL_MS = 3600 * 1000
_BATCH_ID = "streaming.sql.batchId"  # local properties Spark sets for every micro-batch job
_QUERY_ID = "sql.streaming.queryId"  # stable across restarts from the same checkpoint


@dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    """What one write task did (executor → driver)."""

    query: str
    batch: str
    partition: int
    rows: int
    written: tuple[tuple[str, int], ...]  # entries added per stream (dead letters included)
    replayed_chunks: int  # chunks found already written (this is a replay)
    dead_lettered: int
    reasons: tuple[tuple[str, int], ...]  # rules broken by dead-lettered rows, and counts
    markers: tuple[str, ...]
    sealed_chunks: int = 0  # chunks whose batch was sealed: written and committed already
    # (query, batch) is this write's alone (a streaming query's id, a one-off write's), so its
    # batches can be sealed; not so for writeId + batchId under Spark Connect
    fenced: bool = True


def _dlq_extra(query: str, batch: str, partition: int) -> list[tuple[str, str]]:
    return [("dlq.sink.query", query), ("dlq.sink.batch", batch),
            ("dlq.sink.partition", str(partition))]


def _reject_error(rejects: list[Reject], partition: int) -> UnwritableRowError:
    shown = "; ".join(
        f"row {r.row}" + (f" (column {r.column!r})" if r.column else "") + f": {r.reason}"
        for r in rejects[:5])
    more = f" (and {len(rejects) - 5} more in this Arrow batch)" if len(rejects) > 5 else ""
    return UnwritableRowError(
        f"partition {partition}: {len(rejects)} row(s) cannot be written as stream entries — "
        f"{shown}{more}. Fix those rows, or set option 'deadLetterStream' to move such rows "
        "there with 'dlq.reason'. Nothing of this task was dropped.")


def write_partition(opts: SinkOptions, plan: EncodingPlan, query: str, batch: str,
                    partition: int, batches: Iterator[pa.RecordBatch], fenced: bool = True
                    ) -> SinkCommitMessage:
    """Write one task's rows (executor side). Idempotent per (query, batch, partition) when
    ``opts.idempotent``: chunks are numbered per target stream in input order. ``fenced``:
    ``query`` names this write alone, so a chunk also looks at the seal of (stream, query) and
    writes nothing once the driver has sealed ``batch``."""
    # Here, not at the module's top: the encoder's NumPy, pyarrow compute functions and the
    # pandas that pyarrow loads for its first scalar are for the tasks; Spark's planner
    # processes, which make the writer and commit its batches, import this module without
    # them (~1 CPU second each)
    from .chunking import Chunker, xadd_commands
    from .encoding import dead_letter_run, encode_batch

    settle()
    spec = opts.connection
    chunker = Chunker(opts.chunk_size)
    dlq = opts.dead_letter_stream
    written: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    markers: set[str] = set()
    # The chunks of each stream (written now or by an earlier attempt): what the replication
    # barrier checks on the primary it reaches (waitReplicas)
    members: dict[str, list[str]] = {}
    # Streams whose seal covers this batch: their further chunks are skipped without asking
    sealed: set[str] = set()
    replayed = closed = rows = dead = 0
    trim = Trim(opts.max_len, opts.min_id, opts.min_age_ms, opts.trim_approximate,
                opts.trim_acked_only)
    extra = _dlq_extra(query, batch, partition)

    def flush(chunk: WriteChunk) -> None:
        nonlocal replayed, closed
        written[chunk.stream] += 0
        if chunk.stream in sealed:
            closed += 1
            return
        key = sink_marker_key(chunk.stream, query, batch, partition)
        member = f"{partition}:{chunk.index}" if opts.idempotent else None
        seal = (sink_seal_key(chunk.stream, query), int(batch)) if fenced else None
        chunk_trim = NO_TRIM if chunk.stream == dlq else trim
        added, outcome = write_chunk(spec, chunk.stream, xadd_commands(chunk), chunk.rows, key,
                                     member, MARKER_TTL_MS, chunk_trim, seal)
        if outcome == SEALED:
            log.warning(
                "spark-eventbus sink: batch %s of query %s is sealed on stream %r: it was "
                "written and committed already, so this attempt adds nothing to that stream "
                "(a late attempt of a failed or speculative task, or a query restarted from a "
                "checkpoint rolled back by hand; a new checkpoint writes afresh)",
                batch, query, chunk.stream)
            sealed.add(chunk.stream)
            closed += 1
            return
        if opts.idempotent:
            markers.add(key)
        if member is not None:
            members.setdefault(chunk.stream, []).append(member)
        written[chunk.stream] += added
        replayed += int(outcome == WRITTEN)

    for rb in batches:
        enc = encode_batch(plan, rb, default_stream=opts.stream,
                           max_payload_bytes=opts.max_payload_bytes, first_row=rows)
        rows += rb.num_rows
        if enc.rejects:
            if dlq is None:
                raise _reject_error(enc.rejects, partition)
            for rej in enc.rejects:
                reasons[rej.rule] += 1
                dead += 1
                for chunk in chunker.add(dlq, dead_letter_run(rej, extra)):
                    flush(chunk)
        for stream, run in enc.runs:
            for chunk in chunker.add(stream, run):
                flush(chunk)
    for chunk in chunker.flush():
        flush(chunk)
    # waitReplicas/waitAof: the task reports success only once the replicas have its chunks
    # and markers (those of an earlier attempt too).
    wait_for_writes(spec, [_barrier(sink_marker_key(s, query, batch, partition), ids)
                           for s, ids in members.items()],
                    f"writing batch {batch} partition {partition}")
    return SinkCommitMessage(query, batch, partition, rows, tuple(sorted(written.items())),
                             replayed, dead, tuple(sorted(reasons.items())),
                             tuple(sorted(markers)), closed, fenced)


def _barrier(marker: str, ids: list[str]) -> Barrier:
    """waitReplicas: every chunk of this task must be in its marker set on the primary."""
    return Barrier(marker, MARKER_TTL_MS, ("SMISMEMBER", marker, *ids),
                   lambda found: all(int(x) == 1 for x in found))


def _messages(messages: list[Any]) -> list[SinkCommitMessage]:
    return [m for m in messages if isinstance(m, SinkCommitMessage)]


def _summary(msgs: list[SinkCommitMessage], what: str) -> None:
    written: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for m in msgs:
        written.update(dict(m.written))
        reasons.update(dict(m.reasons))
    dead = sum(m.dead_lettered for m in msgs)
    replayed = sum(m.replayed_chunks for m in msgs)
    closed = sum(m.sealed_chunks for m in msgs)
    log.info("spark-eventbus sink: %s wrote %s%s%s", what, dict(written) or "nothing",
             f"; {replayed} chunk(s) were already written (replay)" if replayed else "",
             f"; {closed} chunk(s) of a batch sealed as written and committed" if closed
             else "")
    if dead:
        log.warning("spark-eventbus sink: %s dead-lettered %d row(s): %s", what, dead,
                    dict(reasons))


def check_targets(opts: SinkOptions) -> None:
    """Driver side, before any task: Redis answers, the static target and dead-letter keys
    are streams or missing (any other type is refused, never overwritten), the server can do
    what ``waitReplicas``/``waitAof`` ask, the ACL user may run the chunks' transaction, and
    (``trimPolicy=acked``) the server trims only what every group acked."""
    spec = opts.connection
    check_streams(spec, [(key, f"Server: {spec.display}. Choose another {option!r} option.")
                         for key, option in ((opts.stream, "stream"),
                                             (opts.dead_letter_stream, "deadLetterStream"))
                         if key is not None], "checking the sink's target streams")
    preflight(spec)
    check_transactions(spec, opts.stream)
    if opts.trim_acked_only and opts.stream is not None:
        check_acked_trim(spec, opts.stream)


class _SinkBase:
    def __init__(self, opts: SinkOptions, plan: EncodingPlan) -> None:
        self.opts = opts
        self.plan = plan

    def _commit_markers(self, query: str, batch: int, msgs: list[SinkCommitMessage]) -> None:
        """Record batch ``batch``'s marker keys, seal the older batches and delete their
        markers.

        The caller runs after batch ``batch`` of ``query`` is written; Spark (and foreachBatch)
        starts a batch only after every older one is in the checkpoint's commit log, so older
        batches are never replayed again and their markers can go — once their seal is up, for
        a late attempt of one of their tasks. This batch's stay until the next commit: a crash
        before Spark logs this commit replays it. (Not sealed when ``msgs`` say their query is
        not this write's alone: ``writeId`` + ``batchId`` under Spark Connect.)
        """
        markers = sorted({k for m in msgs for k in m.markers})
        spec = self.opts.connection
        reg = sink_registry_key(query)
        try:
            older = record_markers(spec, reg, batch, markers, MARKER_TTL_MS)
        except EventBusError as exc:
            log.warning("spark-eventbus sink: could not record batch %d's markers (%s); they "
                        "expire within 7 days.", batch, exc)
            return
        keys = sorted({k for v in older.values() for k in v})
        if older and self._retire_markers(
                keys, MARKER_TTL_MS if all(m.fenced for m in msgs) else None):
            self._try(lambda: forget_batches(spec, reg, older))  # else pruned at next commit

    def _retire_markers(self, keys: list[str], seal_ttl_ms: int | None,
                        also: Mapping[str, int] | None = None) -> bool:
        """Delete the marker ``keys``; first, unless ``seal_ttl_ms`` is ``None``, raise the
        seal of each one's (stream, query) to its batch (and the seals in ``also``), with that
        TTL. A seal that cannot be raised keeps the markers (they expire on their own)."""
        spec = self.opts.connection

        def retire() -> None:
            if seal_ttl_ms is not None:
                seals = dict(also or {})
                for key in keys:
                    seal, batch = sink_seal_of_marker(key)
                    seals[seal] = max(seals.get(seal, batch), batch)
                seal_batches(spec, seals, seal_ttl_ms)
            delete_keys(spec, keys)

        return self._try(retire)

    def _try(self, op: Callable[[], None]) -> bool:
        """Sealing and pruning after a commit: the batch is committed whatever happens here;
        markers left behind expire on their own (MARKER_TTL_MS)."""
        try:
            op()
            return True
        except (EventBusError, ValueError) as exc:  # ValueError: a marker key of no batch
            log.warning("spark-eventbus sink: could not seal finished batches and prune their "
                        "idempotency markers (%s); the markers expire within 7 days.", exc)
            return False


class EventBusStreamWriter(_SinkBase, DataSourceStreamArrowWriter):
    """``df.writeStream.format("eventbus")``: one instance per query, made on the driver."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:  # executor
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None, "write() runs in a Spark task"
        query, batch = _streaming_ids(ctx)
        if batch is None or query is None:
            if self.opts.idempotent:
                raise EventBusError(
                    "Spark did not tell this write task its streaming query and batch id "
                    "(local properties 'sql.streaming.queryId', 'streaming.sql.batchId'), so "
                    "the sink cannot make the batch idempotent. Set option 'idempotent' to "
                    "'false' to write at-least-once.")
            batch, query = batch or "0", query or "unknown"
        return write_partition(self.opts, self.plan, query, batch, ctx.partitionId(), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        msgs = _messages(messages)
        _summary(msgs, f"batch {batchId}")
        if self.opts.idempotent and msgs:
            self._commit_markers(msgs[0].query, batchId, msgs)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Keep the markers: the same batch id runs again when the query restarts.
        _summary(_messages(messages), f"aborted batch {batchId}")


class EventBusBatchWriter(_SinkBase, DataSourceArrowWriter):
    """``df.write.format("eventbus").mode("append")``.

    Idempotent against task retries within this write (a fresh id per write). Inside
    ``foreachBatch``, option ``writeId`` (a name for this write, unique within the batch
    function) makes a replayed batch idempotent too: the key becomes (streaming query id,
    ``writeId``, batch id), all three stable across restarts from the same checkpoint.
    """

    def __init__(self, opts: SinkOptions, plan: EncodingPlan) -> None:
        super().__init__(opts, plan)
        self.write_id = f"write-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:  # executor
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None, "write() runs in a Spark task"
        query, batch, fenced = self.write_id, "0", True
        if self.opts.write_id is not None:
            query, batch, fenced = _replayable_write(self.opts, *_streaming_ids(ctx))
        return write_partition(self.opts, self.plan, query, batch, ctx.partitionId(), iterator,
                               fenced)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        msgs = _messages(messages)
        if self.opts.write_id is not None and msgs:
            _summary(msgs, f"write {self.opts.write_id!r} of batch {msgs[0].batch}")
            if self.opts.idempotent:
                self._commit_markers(msgs[0].query, int(msgs[0].batch), msgs)
            return
        _summary(msgs, "write")
        self._end(msgs)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        msgs = _messages(messages)
        _summary(msgs, "aborted write")
        if self.opts.write_id is None:  # a one-off write is never replayed under its id
            self._end(msgs)

    def _end(self, msgs: list[SinkCommitMessage]) -> None:
        """A one-off write is over: seal it — on the streams its finished tasks wrote and on
        the ``stream`` and ``deadLetterStream`` options', which a failed task's late attempt
        writes to — and delete its markers. (A late attempt of a task that failed before
        reporting, writing to a stream a ``stream`` column named and no finished task did,
        finds no seal there.)"""
        if not self.opts.idempotent:
            return
        also = {sink_seal_key(s, self.write_id): 0
                for s in (self.opts.stream, self.opts.dead_letter_stream) if s}
        self._retire_markers(sorted({k for m in msgs for k in m.markers}),
                             ONE_OFF_SEAL_TTL_MS, also)


def _replayable_write(opts: SinkOptions, streaming_query: str | None,
                      streaming_batch: str | None) -> tuple[str, str, bool]:
    """The (query, batch) that key a ``writeId`` write's markers, and whether the query names
    this write alone (its batches can be sealed). Spark's streaming query id and batch id when
    the task sees them (classic Spark, inside foreachBatch); under Spark Connect the tasks of a
    foreachBatch write do not, so option ``batchId`` gives the batch and ``writeId`` alone names
    the write (it must then be unique per query; a new checkpoint may reuse it, so its batches
    are not sealed)."""
    assert opts.write_id is not None
    if streaming_query is not None and streaming_batch is not None:
        return f"{streaming_query}:{opts.write_id}", streaming_batch, True
    if opts.batch_id is not None:
        return opts.write_id, str(opts.batch_id), False
    raise ConfigError(
        f"option 'writeId' = {opts.write_id!r} works inside foreachBatch of a streaming query "
        "only (it pairs the query's id and batch id with it), and this write's tasks see no "
        "streaming batch. Under Spark Connect, whose foreachBatch writes do not see them, add "
        ".option('batchId', batch_id) (the id foreachBatch passes) with a writeId unique to the "
        "query; otherwise remove writeId from this batch write.")


def _streaming_ids(ctx: Any) -> tuple[str | None, str | None]:
    return ctx.getLocalProperty(_QUERY_ID), ctx.getLocalProperty(_BATCH_ID)


def refuse_overwrite() -> ConfigError:
    return ConfigError("the eventbus sink only appends entries to streams; use "
                       "df.write.mode('append'). To replace a stream's content, delete or trim "
                       "the stream first.")
