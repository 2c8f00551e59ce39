"""Trimming what every consumer group has acked (``eventbus stream trim``, reader option
``trimAcked``): the groups' positions (``XINFO GROUPS``, ``XPENDING``), the bound
(:func:`spark_eventbus.core.retention.trim_bound`), then ``lua/trim.lua``, which checks every group
again and runs ``XTRIM MINID`` in the same atomic step. A stream lives in one cluster slot, so
this is per stream on Redis Cluster too."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.ids import StreamId
from ..core.retention import GroupPosition, TrimBound, trim_bound
from .base import Redis
from .scripts import run_script
from .streams import entry_sizes, key_type, text, xrange_pages

# Entries per XRANGE call when counting what a trim removes (the CLI's report).
COUNT_PAGE = 1000
# Attempts when groups move between reading their positions and trimming.
ATTEMPTS = 5
# An approximate trim removes at most this many entries per script call (bounded Redis time per
# call); calls repeat while they remove that many, up to APPROX_CALLS per trim.
APPROX_LIMIT = 10_000
APPROX_CALLS = 100


@dataclass(frozen=True)
class TrimReport:
    stream: str
    dry_run: bool
    entries: int  # removed (dry run: would be)
    bytes: int  # of those entries' field names + values (-1: not counted)
    keep_from: str | None  # the oldest entry kept (MINID); None: nothing trimmed
    held_by: str | None  # the group that needs it
    groups: int
    length: int  # entries left
    acked: bool = False  # removed with XTRIM … ACKED (the server checked every group too)

    def to_json(self) -> dict[str, object]:
        return {"stream": self.stream, "dry_run": self.dry_run, "entries": self.entries,
                "bytes": self.bytes, "keep_from": self.keep_from, "held_by": self.held_by,
                "groups": self.groups, "length": self.length, "acked_policy": self.acked}


def group_positions(r: Redis, stream: str) -> list[GroupPosition]:
    """Every group's last-delivered-id and oldest pending entry (one XPENDING summary each)."""
    out = []
    for g in r.xinfo_groups(stream):
        name = text(g["name"])
        oldest = None
        if int(g["pending"]):
            summary = r.xpending(stream, name)
            if summary.get("min"):
                oldest = StreamId.parse(text(summary["min"]))
        out.append(GroupPosition(name, StreamId.parse(text(g["last-delivered-id"])), oldest))
    return out


def _count(r: Redis, stream: str, keep_from: StreamId) -> tuple[int, int]:
    entries = size = 0
    for page in xrange_pages(r, stream, "-", f"({keep_from}", COUNT_PAGE):
        entries += len(page)
        size += sum(entry_sizes(page))
    return entries, size


def _trim(r: Redis, stream: str, bound: TrimBound, groups: int, exact: bool, acked: bool
          ) -> tuple[str, int]:
    """trim.lua once (exact; ``acked``: with ``ACKED``), or in calls of at most
    :data:`APPROX_LIMIT` entries."""
    assert bound.keep_from is not None
    args = [str(bound.keep_from), str(bound.keep_from.prev()), "=" if exact else "~", groups,
            APPROX_LIMIT, "ACKED" if acked and exact else ""]
    total = 0
    for _ in range(1 if exact else APPROX_CALLS):
        status, removed = run_script(r, "trim", [stream], args)
        if text(status) != "ok":
            return ("moved", 0) if total == 0 else ("ok", total)
        total += int(removed)
        if int(removed) < APPROX_LIMIT:
            break
    return "ok", total


def trim_acked(r: Redis, stream: str, dry_run: bool = False, exact: bool = True,
               count: bool = False, acked: bool = False) -> TrimReport:
    """Trim ``stream`` to the oldest entry any group still needs; never past a group that lags,
    never an entry pending anywhere. ``count``: count the entries and bytes removed first (the
    CLI; not the reader's ``trimAcked``). ``exact``:
    ``MINID =`` (exactly the entries before the bound), else ``~`` (whole nodes only, bounded
    work). ``acked`` (a server that takes it, :func:`.streams.takes_acked_trim`): an exact trim
    is ``XTRIM … ACKED``, so the server also checks each entry against every group.
    Idempotent."""
    groups: list[GroupPosition] = []
    for _ in range(ATTEMPTS):
        if key_type(r, stream) != "stream":
            return TrimReport(stream, dry_run, 0, 0, None, None, 0, 0)
        groups = group_positions(r, stream)
        bound: TrimBound = trim_bound(groups)
        entries, size = 0, -1
        if bound.keep_from is not None and count:
            entries, size = _count(r, stream, bound.keep_from)
        if dry_run or bound.keep_from is None:
            return TrimReport(stream, dry_run, entries, max(size, 0) if count else size,
                              None if bound.keep_from is None else str(bound.keep_from),
                              bound.held_by, len(groups), int(r.xlen(stream)) - entries)
        status, removed = _trim(r, stream, bound, len(groups), exact, acked)
        if status == "moved":
            continue
        return TrimReport(stream, False, removed, size if removed == entries else -1,
                          str(bound.keep_from), bound.held_by, len(groups),
                          int(r.xlen(stream)), acked and exact)
    return TrimReport(stream, dry_run, 0, 0, None, None, len(groups), int(r.xlen(stream)))
