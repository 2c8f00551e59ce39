"""What the source reports in each ``StreamingQueryProgress`` (``reportLatestOffset``), bounded
whatever the number of streams (Spark keeps the last 100 progress events on the driver and hands
each to every listener):

* under ``_eventbus``, the totals and aggregates over every stream: ``streams``,
  ``entriesBehind`` (summed; None if any stream's is unknown), its ``min``/``avg``/``max`` over
  the streams where it is known and how many are unknown, ``pending`` (summed; None if any
  stream's is unknown: :func:`.redisio.probes.total`, the one rule for totals), the planned
  batch's ``claimed`` and ``reclaimed``, the query run's
  ``deadLettered``, ``lostRanges`` and ``lostEntries``, and ``streamsNotShown``;
* per stream (``entriesBehind`` — the group's lag, ``XINFO GROUPS``; None = unknown, e.g. Redis
  7.0 after XDEL/trim; ``lag``, the same value under ``XINFO GROUPS``'s name —, ``pending``,
  ``lastDeliveredId``, the planned batch's ``claimed`` and ``reclaimed``): every stream while
  they fit in :data:`DETAIL_BYTES`; past that, the streams of the planned batch first, then the
  :data:`MOST_BEHIND` most behind, then the others in subscription order, as many as fit.
  ``eventbus status --json`` lists every stream. Driver, planning thread.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Mapping
from typing import Any

from ..redisio import ConsumerOps, GroupStats, total
from .loss_reports import SourceMetrics

# The per-stream part of a progress report at most (JSON bytes, as json.dumps spaces it; Spark
# writes it without the spaces). With the aggregates, Spark's own fields and the batch's start
# and end offsets (~250 B each once they name their batches, offsets.NAME_FROM: some thousands
# of streams in a batch), a whole progress event stays under 64 KB however many streams a
# query reads; below that the offsets list their streams.
DETAIL_BYTES = 60 * 1024
# Past DETAIL_BYTES, the streams most behind shown after those of the planned batch.
MOST_BEHIND = 100


def report(ops: Mapping[str, ConsumerOps], found: list[GroupStats],
           metrics: SourceMetrics) -> dict[str, Any]:
    """The progress of ``ops`` (``found``: each stream's group stats, in order)."""
    m = metrics
    names = list(ops)
    stats = dict(zip(names, found, strict=True))
    known = [s.lag for s in found if s.lag is not None]
    out: dict[str, Any] = {}
    size = 0
    for name in _by_interest(names, stats, m):
        claimed, reclaimed = m.planned.get(name, (0, 0))
        s = stats[name]
        row = {"entriesBehind": s.lag, "lag": s.lag, "pending": s.pending,
               "lastDeliveredId": s.last_delivered, "claimed": claimed, "reclaimed": reclaimed}
        size += len(json.dumps(name)) + len(json.dumps(row)) + 2
        if size > DETAIL_BYTES:
            break
        out[name] = row
    out["_eventbus"] = {
        "streams": len(names), "streamsNotShown": len(names) - len(out),
        "claimed": sum(c for c, _ in m.planned.values()),
        "reclaimed": sum(r for _, r in m.planned.values()),
        "entriesBehind": total([s.lag for s in found]),
        "entriesBehindMin": min(known, default=None),
        "entriesBehindAvg": round(sum(known) / len(known), 1) if known else None,
        "entriesBehindMax": max(known, default=None),
        "entriesBehindUnknown": len(found) - len(known),
        "pending": total([s.pending for s in found]),
        "deadLettered": m.dead_lettered, "lostRanges": m.lost_ranges,
        "lostEntries": m.lost_entries}
    return out


def _by_interest(names: list[str], stats: Mapping[str, GroupStats],
                 m: SourceMetrics) -> list[str]:
    """``names`` in the order the report shows them when not all fit: the planned batch's
    streams (most claimed first), the :data:`MOST_BEHIND` most behind, then the rest."""
    batch = sorted((n for n in m.planned if n in stats), key=lambda n: -sum(m.planned[n]))
    behind = heapq.nlargest(MOST_BEHIND, (n for n in names if stats[n].lag),
                            key=lambda n: stats[n].lag or 0)
    return list(dict.fromkeys([*batch, *behind, *names]))
