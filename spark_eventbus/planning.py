"""Pure planning: claim sizes and partition split. No Redis, no Spark; unit-tested alone."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .ids import StreamId
from .offsets import Chunk, StreamBatch

# One server-side claim call must stay well under ~50 ms of Redis time: XREADGROUP inside Lua
# costs ~3 us/entry, so 5k entries is ~15 ms (DESIGN §1), leaving room for a busy CPU.
MAX_CLAIM_CHUNK = 2_000


def claim_chunk_size(limit: int | None, num_partitions: int, streams: int) -> int:
    """Entries per XREADGROUP call: small enough to split a batch over ``num_partitions``."""
    if limit is None:
        return MAX_CLAIM_CHUNK
    per_stream = max(1, math.ceil(limit / max(1, streams)))
    return max(1, min(MAX_CLAIM_CHUNK, math.ceil(per_stream / max(1, num_partitions))))


def share_budget(budget: int, wants: Sequence[int]) -> list[int]:
    """Split ``budget`` over consumers asking for ``wants``: fair shares, leftovers reassigned."""
    grants = [0] * len(wants)
    remaining = budget
    active = [i for i, w in enumerate(wants) if w > 0]
    while remaining > 0 and active:
        share = max(1, remaining // len(active))
        for i in list(active):
            give = min(share, wants[i] - grants[i], remaining)
            grants[i] += give
            remaining -= give
            if grants[i] >= wants[i]:
                active.remove(i)
            if remaining == 0:
                break
    return grants


@dataclass(frozen=True)
class Slice:
    """Work of one Spark partition for one stream."""

    stream: str
    chunks: tuple[Chunk, ...]
    reclaimed: tuple[tuple[str, int], ...]

    @property
    def count(self) -> int:
        return sum(c.count for c in self.chunks) + len(self.reclaimed)


def split_partitions(stream: str, batch: StreamBatch, num_partitions: int) -> list[Slice]:
    """Spread a stream's chunks and reclaimed IDs over at most ``num_partitions`` slices.

    Chunks are never cut (their IDs are unknown on the driver); bins are balanced by count,
    biggest chunk first. Deterministic: the same batch always gives the same slices.
    """
    if not batch:
        return []
    bins: list[list[Chunk]] = [[] for _ in range(num_partitions)]
    loads = [0] * num_partitions
    for chunk in sorted(batch.chunks, key=lambda c: (-c.count, StreamId.parse(c.first))):
        i = loads.index(min(loads))
        bins[i].append(chunk)
        loads[i] += chunk.count
    rec_bins: list[list[tuple[str, int]]] = [[] for _ in range(num_partitions)]
    if batch.reclaimed:
        # Fill the lightest bins up, in ID order, so each bin's XRANGE pipeline stays ordered.
        for entry in batch.reclaimed:
            i = loads.index(min(loads))
            rec_bins[i].append(entry)
            loads[i] += 1
    out = []
    for chunks, rec in zip(bins, rec_bins, strict=True):
        if chunks or rec:
            ordered = tuple(sorted(chunks, key=lambda c: StreamId.parse(c.first)))
            out.append(Slice(stream, ordered, tuple(rec)))
    return out


def split_id_range(first_ms: int, last_ms: int, parts: int) -> list[tuple[int, int]]:
    """Split ``[first_ms, last_ms]`` into up to ``parts`` contiguous millisecond ranges."""
    parts = max(1, min(parts, last_ms - first_ms + 1))
    span = last_ms - first_ms + 1
    bounds = [first_ms + (span * i) // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(parts) if bounds[i + 1] > bounds[i]]
