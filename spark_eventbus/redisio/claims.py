"""Claims and reclaims of many streams at once (a single stream is a list of one), each
script call recorded in the plan of the batch being built, pipelined per node.

* :func:`claim` — new entries. A chunk of at most :data:`ONE_STEP_CLAIM` entries is one
  ``claim_read.lua`` (checks, ``XREADGROUP >`` and record, atomic: a batch over thousands of
  streams, one or two entries each). A larger one is three steps, three round trips per
  node: every ``claim.lua`` intent, then every ``XREADGROUP >`` on the wire (its entries
  cross the network once, raw; Redis builds no Lua table of them), then every
  ``claim_record.lua``. Each stream's steps keep their order, so a driver killed in between
  leaves intents that the next plan read closes. Under ``maxBytesPerTrigger``
  (``bytes_left``) the one stream asked is sized first: the only single-stream path, since
  the byte budget is shared in order; always three steps.
* :func:`reclaim` — one ``reclaim.lua`` page (XAUTOCLAIM) per stream.
* :func:`dead_letter_poison` — entries delivered too often, whose dead-letter stream is in
  another cluster slot, moved by :mod:`.deadletter`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.offsets import ClaimedRange
from ..core.planning import entries_within
from .boundary import redis_errors
from .deadletter import dead_letter
from .group import ClaimResult, ConsumerOps, ReclaimResult, where
from .scripts import run_scripts
from .streams import entry_sizes, read_entries, text, xrange
from .wire import pipeline

# Chunks of at most this many entries are claimed in one step (claim_read.lua): under ~100
# entries the two scripts and the extra round trips of the three steps cost more than Redis's
# Lua tables of the entries (measured: docs/benchmarks.md, "One step for small claims").
ONE_STEP_CLAIM = 100


@dataclass(frozen=True)
class ClaimAsk:
    """One stream's claim of at most ``count`` new entries, none after ``stop_after``
    (``Trigger.AvailableNow``)."""

    op: ConsumerOps
    count: int
    stop_after: str | None


def claim(asks: Sequence[ClaimAsk], run: str, seq: int, fail_on_loss: bool,
          bytes_left: int | None = None, batch_empty: bool = True) -> list[ClaimResult]:
    """Claim for each ask with one ``XREADGROUP >`` recorded in the plan of batch ``seq``:
    in one step when the ask is small (:data:`ONE_STEP_CLAIM`, no byte budget), else three.

    Three steps per stream: ``claim.lua`` checks for lost entries and writes the claim's
    intent into the plan; the driver runs the XREADGROUP on the wire (replies as sent: no Lua
    table of the entries in Redis, no dict per entry here); ``claim_record.lua`` records the
    chunk. ``bytes_left`` (``maxBytesPerTrigger``; one ask only): the entries after the
    group's position are sized first (one ``XRANGE``) and only those that fit are claimed
    (:func:`.planning.entries_within`; one oversized entry when ``batch_empty``)."""
    if not asks:
        return []
    assert bytes_left is None or len(asks) == 1, "a byte budget sizes one stream at a time"
    small = [bytes_left is None and a.count <= ONE_STEP_CLAIM for a in asks]
    one = iter(_claim_in_one_step([a for a, s in zip(asks, small, strict=True) if s], run,
                                  seq, fail_on_loss))
    three = iter(_claim_in_three_steps([a for a, s in zip(asks, small, strict=True) if not s],
                                       run, seq, fail_on_loss, bytes_left, batch_empty))
    return [next(one) if s else next(three) for s in small]


def _claim_in_one_step(asks: Sequence[ClaimAsk], run: str, seq: int, fail_on_loss: bool
                       ) -> list[ClaimResult]:
    """Small chunks: one ``claim_read.lua`` per stream (pipelined, batched per node)."""
    if not asks:
        return []
    ops = [a.op for a in asks]
    with redis_errors(f"claiming new entries ({where(ops)})", ops[0].spec):
        replies = run_scripts(ops[0].redis, "claim_read", [
            a.op.claim_read(run, seq, a.stop_after, fail_on_loss, a.count) for a in asks])
    return [a.op.claim_read_result(reply) for a, reply in zip(asks, replies, strict=True)]


def _claim_in_three_steps(asks: Sequence[ClaimAsk], run: str, seq: int, fail_on_loss: bool,
                          bytes_left: int | None, batch_empty: bool) -> list[ClaimResult]:
    """Intent, the driver's own ``XREADGROUP``, record (:func:`claim`)."""
    if not asks:
        return []
    ops = [a.op for a in asks]
    counts = [a.count for a in asks]
    with redis_errors(f"claiming new entries ({where(ops)})", ops[0].spec):
        intents = run_scripts(ops[0].redis, "claim", [
            a.op.claim_intent(run, seq, a.stop_after, fail_on_loss) for a in asks])
        for op, res in zip(ops, intents, strict=True):
            op.check_fence(res)
        reading = [i for i, res in enumerate(intents) if text(res[0]) == "read"]
        if bytes_left is not None and reading:
            op = ops[0]
            ahead = xrange(op.redis, op.stream, "(" + text(intents[0][4]), "+", counts[0])
            counts[0] = entries_within(entry_sizes(ahead or []), bytes_left, batch_empty)
        entries: list[list[Any] | None] = [None] * len(asks)
        chunks: list[ClaimedRange | None] = [None] * len(asks)
        for i in reading:
            if counts[i] <= 0:  # nothing fits the byte budget: the intent is closed empty
                entries[i] = []
        sent = [i for i in reading if counts[i] > 0]
        read = pipeline(ops[0].redis, [asks[i].op.xreadgroup(counts[i]) for i in sent])
        failed = [reply for reply in read if isinstance(reply, Exception)]
        for i, reply in zip(sent, read, strict=True):
            if not isinstance(reply, Exception):
                entries[i] = got = read_entries(reply)
                chunks[i] = asks[i].op.claimed([e[0] for e in got] if got else [])
        # the streams whose read went through are recorded before any failure is raised (an
        # open intent would be closed by the next plan read, but not left needlessly)
        run_scripts(ops[0].redis, "claim_record", [
            asks[i].op.claim_record(run, seq, chunks[i]) for i in reading
            if entries[i] is not None])
        if failed:
            raise failed[0]
    return [ConsumerOps.claim_result(res, got, chunk, count, bytes_left is not None)
            for res, got, chunk, count in zip(intents, entries, chunks, counts, strict=True)]


@dataclass(frozen=True)
class ReclaimAsk:
    """One stream's reclaim page: at most ``count`` entries from ``cursor`` on."""

    op: ConsumerOps
    cursor: str
    count: int


def reclaim(asks: Sequence[ReclaimAsk], min_idle_ms: int, run: str, seq: int,
            max_deliveries: int, protect_from: int) -> list[ReclaimResult]:
    """One atomic XAUTOCLAIM page per stream into the plan of batch ``seq``
    (``reclaim.lua``), pipelined per node; entries of plans ``>= protect_from`` are never
    taken, poison entries are returned for :func:`dead_letter_poison`."""
    if not asks:
        return []
    ops = [a.op for a in asks]
    with redis_errors(f"reclaiming idle entries ({where(ops)})", ops[0].spec):
        replies = run_scripts(ops[0].redis, "reclaim", [
            a.op.reclaim_call(a.cursor, a.count, min_idle_ms, run, seq, max_deliveries,
                              protect_from) for a in asks])
    return [a.op.reclaim_result(res) for a, res in zip(asks, replies, strict=True)]


def dead_letter_poison(op: ConsumerOps, dlq: str, entries: list[tuple[str, str, str]]
                       ) -> int:
    """Move ``entries`` (id, reason, deliveries) of ``op``'s stream to ``dlq`` and ack them,
    exactly once (:func:`.deadletter.dead_letter`); the number moved."""
    with redis_errors(f"dead-lettering entries to {dlq!r} ({where([op])})", op.spec):
        moved, _ = dead_letter(op.spec, op.stream, dlq, op.group, entries)
    return moved
