"""What the source reports in each ``StreamingQueryProgress`` (``reportLatestOffset``):
per stream ``entriesBehind`` (the group's lag from ``XINFO GROUPS``; None = unknown, e.g.
Redis 7.0 after XDEL/trim; ``lag`` is the same value, kept for existing readers), pending
count, last delivered ID and the planned batch's claimed and reclaimed counts; under
``_eventbus`` that batch's totals, ``entriesBehind`` summed (None if any stream's is unknown)
and the query run's dead-lettered and lost counts. Driver, planning thread."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .loss_reports import SourceMetrics
from .redisio import ConsumerOps, GroupStats


def report(ops: Mapping[str, ConsumerOps], found: list[GroupStats],
           metrics: SourceMetrics) -> dict[str, Any]:
    """The progress of ``ops`` (``found``: each stream's group stats, in order)."""
    out: dict[str, Any] = {}
    m = metrics
    behind: int | None = 0
    for name, stats in zip(ops, found, strict=True):
        claimed, reclaimed = m.planned.get(name, (0, 0))
        out[name] = {"entriesBehind": stats.lag, "lag": stats.lag, "pending": stats.pending,
                     "lastDeliveredId": stats.last_delivered, "claimed": claimed,
                     "reclaimed": reclaimed}
        behind = None if behind is None or stats.lag is None else behind + stats.lag
    out["_eventbus"] = {"claimed": sum(c for c, _ in m.planned.values()),
                        "reclaimed": sum(r for _, r in m.planned.values()),
                        "entriesBehind": behind,
                        "deadLettered": m.dead_lettered, "lostRanges": m.lost_ranges,
                        "lostEntries": m.lost_entries, "streams": len(ops)}
    return out
