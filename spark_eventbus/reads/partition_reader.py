"""Executor side of reads: replay one partition with ``XRANGE`` into Arrow record batches.

Never a PEL history read (it would bump delivery counts and return ``nil`` for deleted entries),
so the same partition yields the same rows on every retry, speculative task or repeated action.
Memory is bounded by :data:`READ_PAGE` entries per Arrow batch, whatever the batch size.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import pyarrow as pa

from ..core.connection import cli_connection
from ..core.ids import StreamId
from ..core.losses import RangeLoss, loss_message, range_loss, skip_message
from ..core.planning import Slice
from ..core.positions import Piece, trimmed_in
from ..core.worker_gc import settle
from ..errors import DataLossError, EventBusConnectionError, EventBusError
from ..redisio.client import client, is_cluster
from ..redisio.replay import StreamReplay, read_ranges
from ..redisio.tails import tails, wait_for_replica
from .decoding import BatchBuilder, ValueParser, output_schema, parse_value_schema
from .partitions import PiecePartition, RangePartition, ReadSpec, SlicePartition

log = logging.getLogger("spark_eventbus")

T = TypeVar("T")

# Entries per XRANGE page and per Arrow batch: bounds worker memory whatever the batch size.
# Pages never cross a claimed range.
READ_PAGE = 5_000


def _builder(spec: ReadSpec) -> BatchBuilder:
    vs = parse_value_schema(spec.value_schema) if spec.value_schema else None
    return BatchBuilder(output_schema(vs, fields_binary=spec.fields_binary),
                        fields_binary=spec.fields_binary,
                        value_parser=ValueParser(spec.value_field, vs) if vs else None,
                        group=spec.group)


def read_slices(part: SlicePartition) -> Iterator[pa.RecordBatch]:
    """Replay one task's share of a micro-batch: its slices (one per stream) in turn, each
    with its own loss bookkeeping (:func:`read_slice`). Small slices (claimed ranges only, up
    to :data:`READ_PAGE` entries together) are read together: one pipelined ``XRANGE`` round
    trip and one Arrow batch for many streams (:func:`read_small`)."""
    settle()
    build = _builder(part.spec)
    for group, alone in _runs(part.slices, lambda sl: None if sl.reclaimed
                              or sl.count > READ_PAGE else sl.count):
        yield from read_small(part, group, build)
        if alone is not None:
            yield from read_slice(part, alone, build)


def _runs(items: Sequence[T], size: Callable[[T], int | None]
          ) -> Iterator[tuple[list[T], T | None]]:
    """``items`` in order as runs to read: small ones together, up to :data:`READ_PAGE`
    entries (``size``: an item's entries; None for one read alone, in pages), each run followed
    by the item read alone after it, if any."""
    group: list[T] = []
    total = 0
    for item in items:
        n = size(item)
        if n is None:
            yield group, item
            group, total = [], 0
            continue
        if group and total + n > READ_PAGE:
            yield group, None
            group, total = [], 0
        group.append(item)
        total += n
    yield group, None


def read_small(part: SlicePartition, slices: list[Slice], build: BatchBuilder
               ) -> Iterator[pa.RecordBatch]:
    """Slices of claimed ranges only, :data:`READ_PAGE` entries or fewer in all: every range
    in one pipelined round trip (a range holds at most its claimed count, so ``COUNT`` bounds
    nothing away), one Arrow batch; losses counted per range as :func:`read_slice` does."""
    if not slices:
        return
    ranges = [(sl, rng) for sl in slices for rng in sl.chunks]
    pages = read_ranges(part.spec.conn, [(sl.stream, rng.first, rng.last, rng.count)
                                         for sl, rng in ranges])
    names: list[str] = []
    rows: list[Any] = []
    lost: dict[str, list[RangeLoss]] = {}
    for (sl, rng), page in zip(ranges, pages, strict=True):
        names += [sl.stream] * len(page)
        rows += page
        gone = range_loss(rng, len(page))
        if gone is not None:
            lost.setdefault(sl.stream, []).append(gone)
    if rows:
        yield build.build(names, rows, 1)
    for stream, ranges_lost in lost.items():
        _handle_lost(StreamReplay(part.spec.conn, stream), part, stream, ranges_lost)


def read_slice(part: SlicePartition, sl: Slice, build: BatchBuilder
               ) -> Iterator[pa.RecordBatch]:
    """Replay one slice of a micro-batch, as Arrow batches of at most :data:`READ_PAGE` rows.

    Entries the stream no longer holds (deleted, trimmed, or never replicated to a promoted
    replica) are counted exactly: per claimed range, its count minus what XRANGE returned; per
    reclaimed ID, an empty XRANGE. They are recorded in the consumer's loss record
    (:mod:`.redisio.losses`); then with ``failOnDataLoss`` the task fails naming them, unless an
    operator accepted exactly this loss (``eventbus group accept-loss``); otherwise, or once
    accepted, they are logged, acked (except with ``ackMode=none``) and counted in
    ``lostEntries`` when the batch commits.
    """
    replay = StreamReplay(part.spec.conn, sl.stream)
    lost: list[RangeLoss] = []
    for rng in sl.chunks:
        returned = 0
        for page in replay.pages(rng.first, rng.last, READ_PAGE):
            returned += len(page)
            yield build.build(sl.stream, page, 1)
        gone = range_loss(rng, returned)
        if gone is not None:
            lost.append(gone)
    for k in range(0, len(sl.reclaimed), READ_PAGE):
        part_ids = sl.reclaimed[k:k + READ_PAGE]
        rows, counts = [], []
        found = replay.entries([entry_id for entry_id, _ in part_ids])
        for (entry_id, deliveries), entry in zip(part_ids, found, strict=True):
            if entry is None:
                lost.append(RangeLoss(entry_id, entry_id, 1, 1, reclaimed=True))
            else:
                rows.append(entry)
                counts.append(deliveries)
        if rows:
            yield build.build(sl.stream, rows, counts)
    if lost:
        _handle_lost(replay, part, sl.stream, lost)


def _handle_lost(replay: StreamReplay, part: SlicePartition, stream: str,
                 lost: list[RangeLoss]) -> None:
    spec = part.spec
    assert spec.group is not None and spec.consumer is not None
    fail = spec.fail_on_data_loss
    message = loss_message(stream, spec.group, spec.consumer, part.seq, lost,
                           *cli_connection(spec.conn))
    try:
        move_past = replay.record_losses(spec.group, spec.consumer, part.run, part.seq,
                                         int(time.time() * 1000), fail, lost)
    except EventBusError as exc:
        # A retriable failure (Redis unreachable, a failover under way): the task's retry
        # records the loss once Redis answers. Otherwise the loss is what the operator must
        # see, not the failed bookkeeping.
        if fail and not exc.retriable:
            raise DataLossError(f"{message} It could not be recorded for `eventbus status` "
                                f"and accept-loss: {exc}") from exc
        raise
    if not move_past:
        raise DataLossError(message)
    why = ("accepted with `eventbus group accept-loss`" if fail
           else "option 'failOnDataLoss' is 'false'")
    log.warning(skip_message(stream, part.seq, lost, why))
    if spec.ack_mode != "none":
        replay.ack_gone(spec.group, lost)


def read_range(part: RangePartition) -> Iterator[pa.RecordBatch]:
    """A batch read of ``XRANGE start end``, paged (with ``readFrom=replica``, once the
    replica holds the read's last entry: :func:`replica_or_primary`)."""
    settle()
    build = _builder(part.spec)
    spec = part.spec
    if spec.conn.read_from_replicas and part.hold:
        ready, primary = replica_or_primary(spec, {part.stream: part.hold})
        if part.stream not in ready:
            spec = primary
    for page in StreamReplay(spec.conn, part.stream).pages(part.start, part.end, READ_PAGE):
        yield build.build(part.stream, page, None)


def read_pieces(part: PiecePartition) -> Iterator[pa.RecordBatch]:
    """A read without a group: each piece ``(after, last]`` of a stream, paged; small pieces
    of a known count together in one pipelined round trip. A piece with a known count that
    returns fewer entries lost them before this read (:func:`_handle_piece_loss`). With
    ``readFrom=replica``, the streams the replica holds up to their pieces' ends, then the
    others from the primary (:func:`replica_or_primary`)."""
    settle()
    spec = part.spec
    build = _builder(spec)
    if not spec.conn.read_from_replicas or not part.pieces:
        yield from _read_pieces(spec, part.pieces, build)
        return
    needed: dict[str, str] = {}
    for p in part.pieces:
        needed[p.stream] = max(needed.get(p.stream, p.last), p.last, key=StreamId.parse)
    ready, primary = replica_or_primary(spec, needed)
    yield from _read_pieces(spec, [p for p in part.pieces if p.stream in ready], build)
    yield from _read_pieces(primary, [p for p in part.pieces if p.stream not in ready], build)


def replica_or_primary(spec: ReadSpec, needed: dict[str, str]) -> tuple[set[str], ReadSpec]:
    """``readFrom=replica``: the streams of ``needed`` the replica holds up to their IDs (it is
    waited for, within ``failoverTimeoutMs``: the driver may have planned from a node further
    ahead, and a replica behind would read the batch short), and the spec that reads the
    others: the primary (Sentinel, cluster), said in a warning. A replica named by URL has no
    primary to turn to: the task fails retriably (Spark retries it, which waits again)."""
    began = time.monotonic()
    behind = set(wait_for_replica(spec.conn, needed))
    waited = time.monotonic() - began
    if waited > 0.05 and len(behind) < len(needed):
        log.info("spark-eventbus: waited %.2f s for the replica of %s to receive the planned "
                 "entries of %d stream(s)", waited, spec.conn.display, len(needed) - len(behind))
    primary = replace(spec, conn=replace(spec.conn, read_from_replicas=False))
    if not behind:
        return set(needed), primary
    shown = ", ".join(f"{s!r} (up to {needed[s]})" for s in sorted(behind)[:5])
    late = (f"the replica read through {spec.conn.display} had not received stream(s) {shown} "
            f"after failoverTimeoutMs ({spec.conn.failover_timeout_ms} ms)")
    if not (spec.conn.sentinels or is_cluster(client(spec.conn))):
        raise EventBusConnectionError(
            f"{late}: its link to the primary may be down. The task is retried; to read from "
            "the primary, set option 'readFrom' to 'primary' (or give 'sentinels', whose "
            "primary a task falls back to).")
    log.warning("spark-eventbus: %s: reading them from the primary.", late)
    return set(needed) - behind, primary


def _read_pieces(spec: ReadSpec, pieces: Sequence[Piece], build: BatchBuilder
                 ) -> Iterator[pa.RecordBatch]:
    for small, piece in _runs(pieces, lambda p: None if p.expected is None
                              or p.expected >= READ_PAGE else p.expected):
        yield from _read_small_pieces(spec, small, build)
        if piece is None:
            continue
        returned = 0
        for page in StreamReplay(spec.conn, piece.stream).pages(f"({piece.after}", piece.last,
                                                                 READ_PAGE):
            returned += len(page)
            yield build.build(piece.stream, page, None)
        _handle_piece_loss(spec, piece, returned)
        if piece.whole_range is not None:
            _handle_head_trim(spec, piece)


def _read_small_pieces(spec: ReadSpec, pieces: list[Piece], build: BatchBuilder
                       ) -> Iterator[pa.RecordBatch]:
    """Pieces of known counts, :data:`READ_PAGE` entries or fewer in all, in one round trip
    (``COUNT`` one more than expected: a piece that holds more is read again in pages)."""
    if not pieces:
        return
    pages = read_ranges(spec.conn, [(p.stream, f"({p.after}", p.last, (p.expected or 0) + 1)
                                    for p in pieces])
    names: list[str] = []
    rows: list[Any] = []
    for piece, page in zip(pieces, pages, strict=True):
        if len(page) > (piece.expected or 0):  # more than counted: read it whole
            page = [e for pg in StreamReplay(spec.conn, piece.stream).pages(
                f"({piece.after}", piece.last, READ_PAGE) for e in pg]
        names += [piece.stream] * len(page)
        rows += page
    if rows:
        yield build.build(names, rows, None)
    for piece, page in zip(pieces, pages, strict=True):
        _handle_piece_loss(spec, piece, len(page))


def _handle_head_trim(spec: ReadSpec, piece: Piece) -> None:
    """The first piece of a range split over several tasks: entries of the whole range that
    were trimmed from the stream's head before they were read (:func:`.positions.trimmed_in`)
    are lost like those a piece with a count misses."""
    assert piece.whole_range is not None
    trimmed = trimmed_in(piece, tails(spec.conn, [piece.stream])[0])
    if trimmed:
        start_added, end_added, last = piece.whole_range
        whole = replace(piece, last=last, expected=end_added - start_added)
        _handle_piece_loss(spec, whole, end_added - start_added - trimmed)


def _handle_piece_loss(spec: ReadSpec, piece: Piece, returned: int) -> None:
    """Entries of ``piece`` that were added but are no longer in the stream (XDEL, trimming,
    a failover to a replica that had not received them): with ``failOnDataLoss`` the task
    fails naming them, else a warning. A read without a group records nothing in Redis."""
    if piece.expected is None or returned >= piece.expected:
        return
    n = piece.expected - returned
    message = (f"{n} {'entry' if n == 1 else 'entries'} of stream {piece.stream!r} after "
               f"{piece.after} up to {piece.last} {'was' if n == 1 else 'were'} added but "
               f"{'is' if n == 1 else 'are'} no longer in the stream: this read (without a "
               f"consumer group) found {returned} of {piece.expected}. Likely causes: "
               "trimming (MAXLEN/MINID) or XDEL before the query read them, or a failover to "
               "a replica that had not received them.")
    if spec.fail_on_data_loss:
        raise DataLossError(
            f"{message} Set option 'failOnDataLoss' to 'false' to move past such losses "
            "(they are then logged), and keep the query ahead of the trimming "
            "(docs/data-loss.md).")
    log.warning("spark-eventbus: %s Moving past them (failOnDataLoss=false).", message)
