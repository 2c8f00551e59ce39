"""Pure planning: claim sizes, the batch's claim budget, and the partition split. No Redis, no
Spark; unit-tested alone (``tests/unit/test_planning.py``)."""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .ids import StreamId
from .offsets import ClaimedRange, StreamBatch

# Entries per claim (one XREADGROUP): one server-side call must stay well under 50 ms of Redis
# time, also on a busy CPU (the README's benchmark section has the longest command measured).
MAX_CLAIM_CHUNK = 2_000


def claim_chunk_size(limit: int | None, num_partitions: int, streams: int) -> int:
    """Entries per XREADGROUP call: small enough to split a batch over ``num_partitions``.

    Partitions are packed across streams (:func:`pack_partitions`), so with at least as many
    streams as partitions one chunk per stream's share is enough; fewer streams split their
    share into chunks enough for every partition."""
    if limit is None:
        return MAX_CLAIM_CHUNK
    return max(1, min(MAX_CLAIM_CHUNK,
                      math.ceil(limit / max(1, streams, num_partitions))))


def share_budget(budget: int, wants: Sequence[int]) -> list[int]:
    """Split ``budget`` over consumers asking for ``wants``: fair shares, leftovers reassigned."""
    grants = [0] * len(wants)
    remaining = budget
    active = [i for i, w in enumerate(wants) if w > 0]
    while remaining > 0 and active:
        share = max(1, remaining // len(active))
        still = []  # the consumers that want more, in order (linear: 100,000 streams)
        for i in active:
            give = min(share, wants[i] - grants[i], remaining)
            grants[i] += give
            remaining -= give
            if grants[i] < wants[i]:
                still.append(i)
            if remaining == 0:
                break
        active = still
    return grants


# -- the claim budget of a micro-batch -----------------------------------------------------------
# `budget` is the batch's entry limit (None: everything available, Trigger.AvailableNow's
# ReadAllAvailable). `latestOffset` claims little itself (its claims delay the batch) and
# leaves the rest to the background pre-claim of the next batch.

UNBOUNDED_GRANT = 2**62  # a stream's grant when the batch has no limit


# What ``latestOffset`` may claim itself when no pre-claim is waiting to be shipped: claiming
# this many delays the batch by much less than a batch's own fixed cost (offset and commit logs,
# task launch), so a backlog that fits is read in one batch rather than a small first batch
# followed by the rest (docs/performance.md, the first batch).
SYNC_CLAIM_ENTRIES = 50_000


def first_claim_allowance(budget: int | None, used: int, interrupted: bool,
                          num_partitions: int, streams: int) -> int | None:
    """How many entries ``latestOffset`` may reclaim and claim itself, when ``used`` entries
    are already planned for the batch (pre-claimed or crash residue). None: no bound.

    * ``interrupted``: the pre-claim was stopped with entries still waiting: ship what it
      claimed now (0 more), the rest goes to the next batch, claimed while this one runs;
    * otherwise up to :data:`SYNC_CLAIM_ENTRIES`, or one claim chunk per partition per stream
      when that is more (the "quick start"); the background pre-claim takes the rest.
    """
    if budget is None:
        return 0 if interrupted and used else None
    left = max(0, budget - used)
    if interrupted and used:
        return 0
    quick = claim_chunk_size(budget, num_partitions, streams) * num_partitions * streams
    return min(left, max(quick, SYNC_CLAIM_ENTRIES))


def preclaim_allowance(budget: int | None, default: int, planned: int) -> int:
    """How many entries the background pre-claim of the next batch may take, when ``planned``
    are already in its plan. Unbounded batches pre-claim one default-sized batch."""
    return (budget if budget is not None else default) - planned


# A stream's share of a batch below which streams with news take turns: when a batch cannot
# give each of them this many entries, each in turn gets up to this many (or as many as it has,
# when known) and the streams not reached go first in the next batch. A stream a batch touches
# costs its claim, its plan, a read, an ack and a close, about what 20 entries cost, so sharing
# a batch over more streams than that — 100,000 streams of two entries each, one entry each
# per batch — touched every stream in every batch (issue 58).
MIN_SHARE = 16


def stream_grants(left: int | None, wants: Sequence[int | None]) -> list[int]:
    """Each stream's first share of ``left`` entries; ``wants``: how many each has to claim
    (None: unknown). From :data:`MIN_SHARE` entries per stream on, fair shares (streams that
    run dry leave their share to the others, which then get the spare: see the claimer's
    claim loop); below it, in order (the caller rotates the order between batches), each
    stream up to :data:`MIN_SHARE` or what it has, until ``left`` is spent."""
    if left is None:
        return [UNBOUNDED_GRANT] * len(wants)
    if left >= len(wants) * MIN_SHARE:
        return share_budget(left, [left] * len(wants))
    grants = []
    for want in wants:
        grant = min(left, MIN_SHARE if want is None else max(1, min(want, MIN_SHARE)))
        grants.append(grant)
        left -= grant
    return grants


def next_turn(listed: Sequence[str], names: Sequence[str], after: str | None) -> int:
    """Where the next turn starts in ``names`` (the streams with something to read, in the
    order of ``listed``, every stream of the query): at the first listed after ``after``, the
    last stream served (which may have run dry or left since); at 0 when none is."""
    if after is None:
        return 0
    order = {name: i for i, name in enumerate(listed)}
    last = order.get(after, -1)
    return next((k for k, name in enumerate(names) if order.get(name, -1) > last), 0)


def takes_turns(left: int | None, streams: int) -> bool:
    """Whether a batch of ``left`` entries over ``streams`` with news is shared in turns
    (:func:`stream_grants`)."""
    return left is not None and 0 < left < streams * MIN_SHARE


# -- trigger controls: maxBytesPerTrigger, minEntriesPerTrigger / maxTriggerDelay ------------------


def entries_within(sizes: Sequence[int], bytes_left: int, batch_empty: bool) -> int:
    """How many of the next entries (``sizes``: bytes of each, names + values, in order) fit in
    ``bytes_left``. The first always goes when the batch is still empty: an entry larger than
    ``maxBytesPerTrigger`` makes a batch of its own rather than wedge the query."""
    n, total = 0, 0
    for size in sizes:
        if total + size > bytes_left and not (batch_empty and n == 0):
            break
        total += size
        n += 1
    return n


def should_wait(min_entries: int | None, available: int | None, waited_ms: float,
                max_delay_ms: int) -> bool:
    """``minEntriesPerTrigger``: hold the next batch back while fewer than ``min_entries`` are
    available and the last batch is less than ``max_delay_ms`` ago. ``available`` None (the
    server cannot count the lag, see the README) never holds a batch back: waiting on a number
    nobody knows could wait the whole delay for nothing."""
    if min_entries is None or available is None:
        return False
    return available < min_entries and waited_ms < max_delay_ms


@dataclass(frozen=True)
class Slice:
    """Work of one Spark partition on one stream (a partition holds one or more)."""

    stream: str
    chunks: tuple[ClaimedRange, ...]
    reclaimed: tuple[tuple[str, int], ...]

    @property
    def count(self) -> int:
        return sum(c.count for c in self.chunks) + len(self.reclaimed)


def pack_partitions(streams: Mapping[str, StreamBatch], num_partitions: int
                    ) -> list[tuple[Slice, ...]]:
    """Pack the chunks and reclaimed IDs of every stream of a batch into at most
    ``num_partitions`` bins, balanced by entry count: a bin may hold ranges of many small
    streams, a big stream's chunks spread over several bins. So the number of Spark tasks
    follows ``num_partitions`` and the data, not the number of streams.

    Chunks are never cut (their IDs are unknown on the driver); biggest chunk first into the
    lightest bin (ties: the lowest bin), then the reclaimed IDs one by one, in ID order, into
    the lightest bins (so each bin's XRANGE pipeline stays ordered). Each bin holds one
    :class:`Slice` per stream, streams in name order, chunks in ID order. Deterministic: the
    same batch always packs the same way (replays of a batch read the same slices).
    """
    n = max(1, num_partitions)
    chunks: list[list[tuple[str, ClaimedRange]]] = [[] for _ in range(n)]
    reclaimed: list[list[tuple[str, tuple[str, int]]]] = [[] for _ in range(n)]
    heap = [(0, i) for i in range(n)]  # (load, bin): the lightest bin, lowest on ties
    # biggest first, then by name, then by first ID: each stream's chunks put in ID order
    # first (only a stream of several needs its IDs parsed), then a stable sort by the rest
    units = [(name, c) for name, b in streams.items() for c in (
        b.chunks if len(b.chunks) < 2 else sorted(b.chunks, key=_first_id))]
    units.sort(key=lambda u: (-u[1].count, u[0]))
    for name, chunk in units:
        load, i = heapq.heappop(heap)
        chunks[i].append((name, chunk))
        heapq.heappush(heap, (load + chunk.count, i))
    for name in sorted(streams):
        for entry in streams[name].reclaimed:
            load, i = heapq.heappop(heap)
            reclaimed[i].append((name, entry))
            heapq.heappush(heap, (load + 1, i))
    out: list[tuple[Slice, ...]] = []
    for bin_chunks, bin_rec in zip(chunks, reclaimed, strict=True):
        by_stream: dict[str, tuple[list[ClaimedRange], list[tuple[str, int]]]] = {}
        for name, chunk in bin_chunks:
            by_stream.setdefault(name, ([], []))[0].append(chunk)
        for name, entry in bin_rec:
            by_stream.setdefault(name, ([], []))[1].append(entry)
        if by_stream:
            out.append(tuple(
                Slice(name, tuple(cs) if len(cs) == 1 else tuple(sorted(cs, key=_first_id)),
                      tuple(rs))
                for name, (cs, rs) in sorted(by_stream.items())))
    return out


def _first_id(chunk: ClaimedRange) -> StreamId:
    return StreamId.parse(chunk.first)


def split_id_range(first_ms: int, last_ms: int, parts: int) -> list[tuple[int, int]]:
    """Split ``[first_ms, last_ms]`` into up to ``parts`` contiguous millisecond ranges."""
    parts = max(1, min(parts, last_ms - first_ms + 1))
    span = last_ms - first_ms + 1
    bounds = [first_ms + (span * i) // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(parts) if bounds[i + 1] > bounds[i]]
